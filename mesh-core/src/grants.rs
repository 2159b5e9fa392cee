//! What each account of a mesh needs from a broker ACL, and nothing more: the grants of an
//! agent (by name, with the peers it may call) and of a gateway deployment (by name), built
//! from the topic scheme ([`Topics`]), so that the ACL a tool writes follows the scheme
//! wherever it changes.
//!
//! With these grants alone, no account can read or publish the traffic of a task it does not
//! serve: an agent reads only its own requests, cancels and the replies to its own peer calls,
//! and publishes replies only in its own name; a gateway reads only the replies to its own
//! instances; cards and presence are each writable by their own agent only. Every account
//! reads the discovery topics (cards and presence are public by design).

use crate::topic::{RequesterKind, TopicError, Topics};

/// What a grant allows on its filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Subscribe (and receive).
    Read,
    /// Publish.
    Write,
    /// Both.
    ReadWrite,
}

impl Right {
    /// The word of Mosquitto's ACL file (`read`, `write`, `readwrite`).
    pub fn as_str(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::Write => "write",
            Right::ReadWrite => "readwrite",
        }
    }
}

/// One right on one topic filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// What is allowed.
    pub right: Right,
    /// The topic filter it is allowed on.
    pub filter: String,
}

fn grant(right: Right, filter: String) -> Grant {
    Grant { right, filter }
}

/// The grants of agent `agent`'s account, which may call `peers`.
pub fn agent_grants(
    topics: &Topics,
    agent: &str,
    peers: &[&str],
) -> Result<Vec<Grant>, TopicError> {
    let mut grants = vec![
        // Its requests (its shared subscription, and its own start-up probe).
        grant(Right::ReadWrite, topics.agent_request_filter(agent)?),
        grant(Right::Read, topics.agent_cancel_filter(agent)?),
        // The replies to its peer calls, for every instance of it.
        grant(
            Right::Read,
            topics.responses_to(RequesterKind::Agent, agent)?,
        ),
        // Replies in its own name only.
        grant(
            Right::Write,
            topics.responses_from(RequesterKind::Gateway, agent)?,
        ),
        grant(
            Right::Write,
            topics.responses_from(RequesterKind::Agent, agent)?,
        ),
        // Its card, its instances' presence (and their wills), its registry's load marker.
        grant(Right::Write, topics.agent_card(agent)?),
        grant(Right::Write, topics.agent_presence_filter(agent)?),
        grant(Right::Write, topics.registry_marker(agent)?),
        grant(Right::Read, topics.discovery_filter()),
    ];
    for peer in peers {
        grants.push(grant(Right::Write, topics.agent_request_filter(peer)?));
        grants.push(grant(Right::Write, topics.agent_cancel_filter(peer)?));
    }
    Ok(grants)
}

/// The grants of gateway deployment `gateway`'s account (shared by its instances).
pub fn gateway_grants(topics: &Topics, gateway: &str) -> Result<Vec<Grant>, TopicError> {
    Ok(vec![
        grant(
            Right::Read,
            topics.responses_to(RequesterKind::Gateway, gateway)?,
        ),
        grant(Right::Write, topics.every_request_filter()),
        grant(Right::Write, topics.every_cancel_filter()),
        grant(Right::Write, topics.registry_marker(gateway)?),
        grant(Right::Read, topics.discovery_filter()),
    ])
}

/// The grants of operator `operator`'s account (`mesh tail`, `mesh send` over the bus): it
/// reads the whole namespace, and asks as a gateway deployment of its own name.
pub fn operator_grants(topics: &Topics, operator: &str) -> Result<Vec<Grant>, TopicError> {
    Ok(vec![
        grant(Right::Read, topics.namespace_filter()),
        grant(Right::Write, topics.every_request_filter()),
        grant(Right::Write, topics.every_cancel_filter()),
        grant(Right::Write, topics.registry_marker(operator)?),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_reads_its_own_and_writes_in_its_own_name() {
        let topics = Topics::new("ns").unwrap();
        let grants = agent_grants(&topics, "orchestrator", &["writer"]).unwrap();
        let lines: Vec<String> = grants
            .iter()
            .map(|g| format!("{} {}", g.right.as_str(), g.filter))
            .collect();
        assert_eq!(
            lines,
            [
                "readwrite ns/a2a/v1/agent/request/orchestrator/+",
                "read ns/a2a/v1/agent/cancel/orchestrator/+",
                "read ns/a2a/v1/agent/response/orchestrator/#",
                "write ns/a2a/v1/gateway/response/+/+/orchestrator/+",
                "write ns/a2a/v1/agent/response/+/+/orchestrator/+",
                "write ns/a2a/v1/discovery/agentcards/orchestrator",
                "write ns/a2a/v1/discovery/presence/orchestrator/+",
                "write ns/a2a/v1/discovery/presence/_registry/orchestrator",
                "read ns/a2a/v1/discovery/#",
                "write ns/a2a/v1/agent/request/writer/+",
                "write ns/a2a/v1/agent/cancel/writer/+",
            ]
        );
        assert!(agent_grants(&topics, "a/b", &[]).is_err());
        assert!(agent_grants(&topics, "a", &["+"]).is_err());
    }

    #[test]
    fn a_gateway_reads_only_its_replies() {
        let topics = Topics::new("ns").unwrap();
        let lines: Vec<String> = gateway_grants(&topics, "web")
            .unwrap()
            .iter()
            .map(|g| format!("{} {}", g.right.as_str(), g.filter))
            .collect();
        assert_eq!(
            lines,
            [
                "read ns/a2a/v1/gateway/response/web/#",
                "write ns/a2a/v1/agent/request/+/+",
                "write ns/a2a/v1/agent/cancel/+/+",
                "write ns/a2a/v1/discovery/presence/_registry/web",
                "read ns/a2a/v1/discovery/#",
            ]
        );
    }

    #[test]
    fn an_operator_reads_everything_and_asks_as_itself() {
        let topics = Topics::new("ns").unwrap();
        let lines: Vec<String> = operator_grants(&topics, "ops")
            .unwrap()
            .iter()
            .map(|g| format!("{} {}", g.right.as_str(), g.filter))
            .collect();
        assert_eq!(
            lines,
            [
                "read ns/a2a/v1/#",
                "write ns/a2a/v1/agent/request/+/+",
                "write ns/a2a/v1/agent/cancel/+/+",
                "write ns/a2a/v1/discovery/presence/_registry/ops",
            ]
        );
    }
}
