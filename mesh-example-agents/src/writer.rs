//! `writer`: streams a text artifact in several chunks (append / lastChunk) before completing.
//!
//! Send it a topic; it writes a short piece about it, one paragraph per chunk, with a status
//! message before it starts. A number in the message (`"chunks: 1000"`) sets how many chunks it
//! streams, which the ordering tests and the SSE benchmark use; `"pace: 200"` waits that many
//! milliseconds before each chunk (at most ten seconds), for a stream a person can watch.

use mesh_agent::model::Part;
use mesh_agent::{Agent, Outcome, TaskContext, handler_fn};

/// The most chunks one request may ask for.
const MAX_CHUNKS: usize = 100_000;

/// The longest pause one request may ask for between chunks, in milliseconds.
const MAX_PACE_MS: u64 = 10_000;

/// The writer agent.
pub fn agent() -> Agent {
    Agent::new(
        "writer",
        handler_fn(|ctx: TaskContext| async move {
            let text = ctx.text();
            let chunks = requested_chunks(&text).unwrap_or(4);
            let pace = requested_number(&text, "pace:")
                .map(|ms| std::time::Duration::from_millis((ms as u64).min(MAX_PACE_MS)));
            let topic = text
                .split("chunks:")
                .next()
                .unwrap_or_default()
                .split("pace:")
                .next()
                .unwrap_or_default()
                .trim();
            ctx.working(format!("writing {chunks} paragraphs about {topic:?}"))
                .await?;
            let mut draft = ctx.artifact_writer("draft.txt");
            for index in 0..chunks {
                if let Some(pace) = pace {
                    tokio::select! {
                        () = tokio::time::sleep(pace) => {}
                        _ = ctx.cancelled() => {}
                    }
                }
                if ctx.is_cancelled() {
                    break;
                }
                let parts = vec![Part::text(paragraph(topic, index))];
                if index + 1 == chunks {
                    draft.finish(parts).await?;
                    break;
                }
                draft.append(parts).await?;
            }
            Ok(Outcome::completed_with(format!(
                "wrote {chunks} paragraphs"
            )))
        }),
    )
    .description("Writes a short piece on any topic, streamed paragraph by paragraph")
    .skill("write", "Write", "Streams a text artifact in chunks")
}

fn requested_chunks(text: &str) -> Option<usize> {
    requested_number(text, "chunks:").map(|n| n.clamp(1, MAX_CHUNKS))
}

/// The number after `key` in `text`, when there is one.
fn requested_number(text: &str, key: &str) -> Option<usize> {
    let rest = text.split(key).nth(1)?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn paragraph(topic: &str, index: usize) -> String {
    format!(
        "[{index}] On {topic}: paragraph {} of the draft.\n",
        index + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_count_is_read_and_clamped() {
        assert_eq!(requested_chunks("chunks: 12"), Some(12));
        assert_eq!(requested_chunks("write chunks:3 please"), Some(3));
        assert_eq!(requested_chunks("chunks: 0"), Some(1));
        assert_eq!(requested_chunks("chunks: 99999999"), Some(MAX_CHUNKS));
        assert_eq!(requested_chunks("no count"), None);
        assert_eq!(requested_number("chunks: 3 pace: 250", "pace:"), Some(250));
    }
}
