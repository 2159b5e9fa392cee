//! `orchestrator`: delegates to the other example agents and streams their progress.
//!
//! A message about booking or flights goes to `flight-booker`, one about writing to `writer`,
//! anything else to `echo`. The orchestrator says whom it asked, relays every artifact of the
//! peer's task as its own, and ends as the peer ended; a peer's question (input required)
//! becomes its own, and the follow-up is sent on with everything the user said in the task.
//! Canceling the orchestrator's task cancels the peer's.

use std::collections::HashMap;

use mesh_agent::model::{Message, Part, PartContent, Role, StreamResponse, TaskState};
use mesh_agent::{
    Agent, ArtifactWriter, HandlerError, Outcome, PeerError, TaskContext, handler_fn,
};

/// The orchestrator agent.
pub fn agent() -> Agent {
    Agent::new("orchestrator", handler_fn(orchestrate))
        .description("Delegates to the other agents of the mesh and streams their progress")
        .skill(
            "delegate",
            "Delegate",
            "Routes a request to flight-booker, writer or echo",
        )
}

async fn orchestrate(ctx: TaskContext) -> Result<Outcome, HandlerError> {
    // Everything the user said in this task: a fresh peer task gets the whole story.
    let said: Vec<String> = ctx
        .task()
        .history
        .iter()
        .flatten()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| {
            m.parts
                .iter()
                .filter_map(|p| p.as_text().map(str::to_owned))
        })
        .collect();
    let said = said.join("\n");
    let peer = choose_peer(&said);
    ctx.working(format!("asking {peer}")).await?;
    let request = Message::new(Role::User, vec![Part::text(said)]);
    let mut stream = match ctx.peers().stream(peer, request).await {
        Ok(stream) => stream,
        Err(PeerError::NotOnline(agent)) => {
            return Ok(Outcome::failed(format!("{agent} is not online")));
        }
        Err(error) => return Err(error.into()),
    };
    let mut outcome = Outcome::failed(format!("{peer} ended without an answer"));
    // The peer's artifacts being streamed, relayed chunk by chunk under their own ids.
    let mut relayed: HashMap<String, ArtifactWriter> = HashMap::new();
    while let Some(event) = stream.next().await {
        match event? {
            StreamResponse::ArtifactUpdate(update) => {
                let mut artifact = update.artifact;
                let parts = std::mem::take(&mut artifact.parts);
                let id = artifact.artifact_id.clone();
                let mut writer = match relayed.remove(&id) {
                    Some(writer) if update.append.unwrap_or(false) => writer,
                    _ => ctx.artifact_writer_for(artifact),
                };
                if update.last_chunk.unwrap_or(true) {
                    writer.finish(parts).await?;
                } else {
                    writer.append(parts).await?;
                    relayed.insert(id, writer);
                }
            }
            StreamResponse::StatusUpdate(update) => {
                let message = update.status.message.map(|m| relabel(peer, m));
                outcome = match update.status.state {
                    TaskState::Completed => Outcome::Completed(message),
                    TaskState::InputRequired => Outcome::InputRequired(
                        message.unwrap_or_else(|| mesh_agent::agent_text("more input needed")),
                    ),
                    TaskState::AuthRequired => Outcome::AuthRequired(
                        message.unwrap_or_else(|| mesh_agent::agent_text("auth needed")),
                    ),
                    TaskState::Failed => Outcome::Failed(
                        message.unwrap_or_else(|| mesh_agent::agent_text(format!("{peer} failed"))),
                    ),
                    TaskState::Rejected => Outcome::Rejected(message),
                    TaskState::Canceled => Outcome::failed(format!("{peer} canceled the task")),
                    _ => {
                        if let Some(message) = message {
                            ctx.working_with(message).await?;
                        }
                        continue;
                    }
                };
            }
            StreamResponse::Message(message) => {
                outcome = Outcome::Completed(Some(relabel(peer, message)));
            }
            StreamResponse::Task(_) => {}
        }
    }
    Ok(outcome)
}

fn choose_peer(text: &str) -> &'static str {
    let lower = text.to_lowercase();
    if lower.contains("book") || lower.contains("flight") || lower.contains("fly") {
        "flight-booker"
    } else if lower.contains("write") || lower.contains("draft") {
        "writer"
    } else {
        "echo"
    }
}

/// A peer's message, re-issued as the orchestrator's own (fresh id, prefixed with its name).
fn relabel(peer: &str, message: Message) -> Message {
    let mut parts = message.parts;
    if let Some(Part {
        content: PartContent::Text(text),
        ..
    }) = parts.first_mut()
    {
        *text = format!("[{peer}] {text}");
    }
    Message::new(Role::Agent, parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_intent() {
        assert_eq!(choose_peer("Book me a flight"), "flight-booker");
        assert_eq!(choose_peer("write about rust"), "writer");
        assert_eq!(choose_peer("hello"), "echo");
    }
}
