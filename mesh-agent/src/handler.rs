//! What user code implements: a [`Handler`] gets a [`TaskContext`] and returns an [`Outcome`].
//!
//! The handler streams progress through the context (status messages, artifacts, chunks) and
//! ends the task by returning: completed, input or auth required (the task waits for the next
//! message), rejected, failed, or a direct [`Outcome::Reply`] message with no task at all. An
//! `Err` fails the task with its message; a panic fails the task too, and the agent keeps
//! serving.

use crate::context::TaskContext;
use async_trait::async_trait;
use mesh_core::model::{Message, Part, Role};
use std::future::Future;

/// The error type handlers return: anything that can say what went wrong.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// The code of an agent: called once per message (a new task, or the next turn of one).
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handles one message. See [`TaskContext`] for what it can read and emit.
    async fn handle(&self, ctx: TaskContext) -> Result<Outcome, HandlerError>;
}

/// How a handler ends its turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The task is done; the optional message becomes the final status message.
    Completed(Option<Message>),
    /// The task waits for the user's next message (same task id).
    InputRequired(Message),
    /// The task waits for credentials in the user's next message.
    AuthRequired(Message),
    /// The agent refuses the task.
    Rejected(Option<Message>),
    /// The task failed; the message says why.
    Failed(Message),
    /// A direct answer with no task (only when the handler emitted nothing before).
    Reply(Message),
}

impl Outcome {
    /// Completed with no final message.
    pub fn completed() -> Outcome {
        Outcome::Completed(None)
    }

    /// Completed, with a final text message.
    pub fn completed_with(text: impl Into<String>) -> Outcome {
        Outcome::Completed(Some(agent_text(text)))
    }

    /// Input required: asks the user `question`.
    pub fn input_required(question: impl Into<String>) -> Outcome {
        Outcome::InputRequired(agent_text(question))
    }

    /// Auth required: tells the user what to provide.
    pub fn auth_required(text: impl Into<String>) -> Outcome {
        Outcome::AuthRequired(agent_text(text))
    }

    /// Rejected, saying why.
    pub fn rejected(reason: impl Into<String>) -> Outcome {
        Outcome::Rejected(Some(agent_text(reason)))
    }

    /// Failed, saying why.
    pub fn failed(reason: impl Into<String>) -> Outcome {
        Outcome::Failed(agent_text(reason))
    }

    /// A direct text answer with no task.
    pub fn reply(text: impl Into<String>) -> Outcome {
        Outcome::Reply(agent_text(text))
    }
}

/// A message from the agent with one text part.
pub fn agent_text(text: impl Into<String>) -> Message {
    Message::new(Role::Agent, vec![Part::text(text)])
}

/// A [`Handler`] made from an async closure: `handler_fn(|ctx| async move { … })`.
pub fn handler_fn<F, Fut>(f: F) -> FnHandler<F>
where
    F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Outcome, HandlerError>> + Send + 'static,
{
    FnHandler(f)
}

/// The [`Handler`] [`handler_fn`] makes.
pub struct FnHandler<F>(F);

#[async_trait]
impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Outcome, HandlerError>> + Send + 'static,
{
    async fn handle(&self, ctx: TaskContext) -> Result<Outcome, HandlerError> {
        (self.0)(ctx).await
    }
}
