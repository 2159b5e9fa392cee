//! `echo`: answers every message with a completed task whose artifact repeats the parts it got.

use mesh_agent::{Agent, Outcome, TaskContext, handler_fn, new_artifact};

/// The echo agent.
pub fn agent() -> Agent {
    Agent::new(
        "echo",
        handler_fn(|ctx: TaskContext| async move {
            let parts = ctx.message().parts.clone();
            ctx.artifact(new_artifact(Some("echo".into()), parts))
                .await?;
            Ok(Outcome::completed())
        }),
    )
    .description("Repeats every message it receives, as an artifact")
    .skill("echo", "Echo", "Answers with the parts it was sent")
}
