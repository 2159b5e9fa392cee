//! Shared subscriptions (`$share/{group}/{filter}`): round-robin within each group.
//!
//! rmqtt treats `$share/...` as a literal topic filter unless a handler that reports
//! itself supported is installed. rmqtt already keeps groups of different filters
//! apart (it groups subscribers per filter, then per group name); this handler only
//! picks which member of one group receives a message.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use rmqtt::context::ServerContext;
use rmqtt::subscribe::SharedSubscription;
use rmqtt::types::{
    ClientId, Id, IsOnline, NodeId, SharedGroup, SubscriptionIdentifier, SubscriptionOptions,
    TopicName,
};

/// One candidate of a shared group, as rmqtt hands it to [`SharedSubscription::choice`].
pub(crate) type Candidate = (
    NodeId,
    ClientId,
    SubscriptionOptions,
    Option<Vec<SubscriptionIdentifier>>,
    Option<IsOnline>,
);

/// Picks group members in turn, skipping members that are offline.
#[derive(Default)]
pub(crate) struct RoundRobinShared {
    /// The next turn of each group, by group name.
    turns: Mutex<HashMap<SharedGroup, usize>>,
}

impl RoundRobinShared {
    /// The next turn of `group`, advancing it.
    fn next_turn(&self, group: &SharedGroup) -> usize {
        let mut turns = self
            .turns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let turn = turns.entry(group.clone()).or_insert(0);
        let current = *turn;
        *turn = turn.wrapping_add(1);
        current
    }
}

#[async_trait]
impl SharedSubscription for RoundRobinShared {
    fn is_supported(&self) -> bool {
        true
    }

    async fn choice(
        &self,
        _scx: &ServerContext,
        group: &SharedGroup,
        _publisher: &Id,
        _topic: &TopicName,
        candidates: &[Candidate],
    ) -> Option<(usize, IsOnline)> {
        pick(self.next_turn(group), candidates)
    }
}

/// Starting at `turn`, the first online candidate; if none is online, the one at `turn`
/// (its session keeps the message until it reconnects).
fn pick(turn: usize, candidates: &[Candidate]) -> Option<(usize, IsOnline)> {
    let len = candidates.len();
    if len == 0 {
        return None;
    }
    let start = turn % len;
    (0..len)
        .map(|i| (start + i) % len)
        .find(|&i| candidates[i].4.unwrap_or(true))
        .map(|i| (i, true))
        .or(Some((start, false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(name: &str, online: bool) -> Candidate {
        (
            1,
            ClientId::from(name),
            SubscriptionOptions::default(),
            None,
            Some(online),
        )
    }

    #[test]
    fn empty_group_picks_none() {
        assert_eq!(pick(3, &[]), None);
    }

    #[test]
    fn turns_go_round() {
        let c = [
            candidate("a", true),
            candidate("b", true),
            candidate("c", true),
        ];
        let picked: Vec<usize> = (0..6).filter_map(|t| pick(t, &c)).map(|(i, _)| i).collect();
        assert_eq!(picked, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn offline_members_are_skipped() {
        let c = [
            candidate("a", true),
            candidate("b", false),
            candidate("c", true),
        ];
        assert_eq!(pick(1, &c), Some((2, true)));
        let all_off = [candidate("a", false), candidate("b", false)];
        assert_eq!(pick(1, &all_off), Some((1, false)));
    }
}
