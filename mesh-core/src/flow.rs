//! Flow control of a reply stream: the requester's credit, and the one reader and writer of
//! its message on the bus.
//!
//! A streaming request carries `_mesh.window` (W). The agent publishes the event at position
//! `seq` only once the requester has credited a position `c` with `seq < c + W`: the first W
//! events go at once, and then the agent waits for the requester, instead of filling the
//! broker's queue for it (where a broker drops what passes its limit) or the requester's
//! buffer. The requester credits as its consumer takes events, with a notification on the
//! task's cancel topic (every instance of the agent hears it; the one running the task acts):
//!
//! ```json
//! {"jsonrpc":"2.0","method":"mesh/credit","params":{"id":"<task id>","seq":1024}}
//! ```
//!
//! `seq` is the position after the last event taken (the count of events taken, for a stream
//! read from its start); a credit never lowers an earlier one. An agent that does not know the
//! method ignores it, as it ignores any notification it does not know on that topic. The
//! request's deadline bounds every wait: past it the agent publishes without credit (its task
//! fails at the deadline anyway). docs/protocol.md, section 3.5.

use serde::Deserialize;

/// The JSON-RPC method of a credit.
pub const CREDIT_METHOD: &str = "mesh/credit";

/// A credit as the agent reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit {
    /// The task whose stream it credits.
    pub task_id: String,
    /// The position after the last event the requester took.
    pub seq: u64,
}

/// The payload of a credit for `task_id`, up to position `seq`.
pub fn encode_credit(task_id: &str, seq: u64) -> Vec<u8> {
    let notification = serde_json::json!({
        "jsonrpc": "2.0",
        "method": CREDIT_METHOD,
        "params": {"id": task_id, "seq": seq},
    });
    notification.to_string().into_bytes()
}

/// Reads a credit; `None` for anything else (a cancel request, another method, a credit
/// without a task id or a position).
pub fn decode_credit(payload: &[u8]) -> Option<Credit> {
    #[derive(Deserialize)]
    struct Notification<'a> {
        #[serde(borrow)]
        method: std::borrow::Cow<'a, str>,
        params: Params,
    }
    #[derive(Deserialize)]
    struct Params {
        id: String,
        seq: u64,
    }
    let notification: Notification = serde_json::from_slice(payload).ok()?;
    (notification.method == CREDIT_METHOD).then_some(Credit {
        task_id: notification.params.id,
        seq: notification.params.seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credit_reads_back_as_written_and_nothing_else_reads_as_one() {
        let payload = encode_credit("t-1", 1024);
        assert_eq!(
            decode_credit(&payload),
            Some(Credit {
                task_id: "t-1".into(),
                seq: 1024
            })
        );
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"t-1"}}"#,
            r#"{"jsonrpc":"2.0","method":"mesh/other","params":{"id":"t-1","seq":3}}"#,
            r#"{"jsonrpc":"2.0","method":"mesh/credit","params":{"id":"t-1"}}"#,
            r#"{"jsonrpc":"2.0","method":"mesh/credit","params":{"id":"t-1","seq":-1}}"#,
            "not json",
        ] {
            assert_eq!(decode_credit(other.as_bytes()), None, "{other}");
        }
    }
}
