//! The router of a broker that is not a cluster node: rmqtt's own ([`DefaultRouter`]: the
//! topic trie, the subscription relations, the shared groups) with a quicker way of finding
//! the filters a published topic matches.
//!
//! rmqtt's matcher (`trie::MatchedIter`) allocates an iterator, a list of items and a copy of
//! the path so far at every level and branch of the trie it visits, and then rebuilds each
//! matched filter by formatting its levels again. On the mesh's topics (seven to nine levels:
//! `<ns>/a2a/v1/<component>/<direction>/<target>/<task_id>`) that is about 30,000
//! instructions per publish, two thirds of the broker's work for a request and its reply.
//! [`matched_filters`] walks the same trie depth first with one path stack and writes each
//! matched filter once; the rest of [`Router::matches`] (subscribers by filter, one member
//! per shared group) is rmqtt's, and every other method is the default router's.

use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use rmqtt::Result;
use rmqtt::context::ServerContext;
use rmqtt::router::{DefaultRouter, Router};
use rmqtt::topic::{Level, TopicError};
use rmqtt::trie::TopicTree;
use rmqtt::types::{
    AllRelationsMap, HashMap, Id, NodeId, Route, SharedGroup, SubRelationsMap, SubsSearchParams,
    SubsSearchResult, SubscriptioRelationsCollectorMap, SubscriptionOptions, TopicFilter,
    TopicName,
};
use rmqtt::utils::Counter;

use crate::shared::Candidate;

/// How many parsed topics [`MeshRouter`] keeps for reuse (one per publish being matched at
/// once; a publish finding none parses into a new one).
const SPARE_TOPICS: usize = 16;

/// The most levels a parsed topic kept for reuse has (the mesh's topics have at most
/// eleven): a deeper topic's strings are freed with it.
const SPARE_LEVELS: usize = 32;

/// The default router with [`matched_filters`] for matching.
pub(crate) struct MeshRouter {
    inner: DefaultRouter,
    scx: ServerContext,
    /// Level lists of topics matched before, whose strings the next topics are parsed into
    /// (a topic's levels are the trie's keys: each is a `String`).
    spare: Mutex<Vec<Vec<Level>>>,
}

impl MeshRouter {
    /// A router for the broker of `scx`, with no subscriptions yet.
    pub(crate) fn new(scx: ServerContext) -> MeshRouter {
        MeshRouter {
            inner: DefaultRouter::new(Some(scx.clone())),
            scx,
            spare: Mutex::new(Vec::new()),
        }
    }

    /// The filters `topic` matches, parsed into a spare level list (see [`parse_levels`]).
    async fn filters(&self, topic: &str) -> Result<Vec<TopicFilter>> {
        let mut levels = self
            .spare
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        let parsed = parse_levels(topic, &mut levels);
        let found = match parsed {
            Ok(()) => Ok(matched_filters(&*self.inner.topics.read().await, &levels)),
            Err(e) => Err(e.into()),
        };
        keep_for_reuse(
            &mut self.spare.lock().unwrap_or_else(PoisonError::into_inner),
            levels,
        );
        found
    }
}

/// Keeps `levels` in `spare` for the next topic, unless `spare` is full or the topic was
/// deeper than [`SPARE_LEVELS`].
fn keep_for_reuse(spare: &mut Vec<Vec<Level>>, levels: Vec<Level>) {
    if spare.len() < SPARE_TOPICS && levels.len() <= SPARE_LEVELS {
        spare.push(levels);
    }
}

/// Parses `topic` into `levels` as rmqtt's `Topic::from_str` does (the same levels, the same
/// topics refused), writing each level into the string its predecessor in `levels` held.
fn parse_levels(topic: &str, levels: &mut Vec<Level>) -> std::result::Result<(), TopicError> {
    let mut count = 0;
    for (index, segment) in topic.split('/').enumerate() {
        let level = match segment {
            "+" => Level::SingleWildcard,
            "#" => Level::MultiWildcard,
            "" => Level::Blank,
            _ if segment.contains(['+', '#']) => {
                return Err(TopicError::InvalidLevel(format!(
                    "invalid level `{segment}` contains +|#"
                )));
            }
            _ => {
                let mut text = match levels.get_mut(index) {
                    Some(Level::Normal(s) | Level::Metadata(s)) => std::mem::take(s),
                    _ => String::new(),
                };
                text.clear();
                text.push_str(segment);
                if segment.starts_with('$') {
                    Level::Metadata(text)
                } else {
                    Level::Normal(text)
                }
            }
        };
        match levels.get_mut(index) {
            Some(slot) => *slot = level,
            None => levels.push(level),
        }
        count = index + 1;
    }
    levels.truncate(count);
    // As `Topic::is_valid`: `$` only first, `#` only last.
    let misplaced = levels
        .iter()
        .enumerate()
        .any(|(position, level)| match level {
            Level::MultiWildcard => position != count - 1,
            Level::Metadata(_) => position != 0,
            _ => false,
        });
    if misplaced {
        return Err(TopicError::InvalidTopic(format!("invalid topic `{topic}`")));
    }
    Ok(())
}

/// The filters of `tree` that the topic of `levels` matches, each written once (levels
/// joined by `/`, as rmqtt writes a filter), with MQTT's rules: `+` matches one level (an
/// empty one too), `#` the rest of the topic including none of it (`a/#` matches `a`), and
/// a topic whose first level starts with `$` is matched by no filter that starts with a
/// wildcard.
pub(crate) fn matched_filters(tree: &TopicTree<()>, levels: &[Level]) -> Vec<TopicFilter> {
    let mut found = Vec::new();
    let mut path = Vec::with_capacity(levels.len() + 1);
    walk(tree, levels, &mut path, &mut found);
    found
}

/// Adds to `found` every filter under `node` that matches the rest of the topic, `levels`;
/// `path` holds the levels of the filter from the root to `node`.
fn walk<'a>(
    node: &'a TopicTree<()>,
    levels: &'a [Level],
    path: &mut Vec<&'a Level>,
    found: &mut Vec<TopicFilter>,
) {
    let Some((level, rest)) = levels.split_first() else {
        // The whole topic is matched: by this node's filter, and by `#` below it (`a/#`
        // matches `a`).
        if let Some(multi) = node.child(&Level::MultiWildcard)
            && !multi.values().is_empty()
        {
            found.push(filter(path, Some(&Level::MultiWildcard)));
        }
        if !node.values().is_empty() {
            found.push(filter(path, None));
        }
        return;
    };
    // A `$` topic (`$SYS/...`) is not matched by a filter starting with a wildcard.
    let wildcards = !(path.is_empty() && level.is_metadata());
    if wildcards {
        if let Some(multi) = node.child(&Level::MultiWildcard)
            && !multi.values().is_empty()
        {
            found.push(filter(path, Some(&Level::MultiWildcard)));
        }
        if let Some(single) = node.child(&Level::SingleWildcard) {
            path.push(&Level::SingleWildcard);
            walk(single, rest, path, found);
            path.pop();
        }
    }
    if let Some(exact) = node.child(level) {
        path.push(level);
        walk(exact, rest, path, found);
        path.pop();
    }
}

/// The filter of `path` (and `last`), as rmqtt writes a topic: its levels joined by `/`.
fn filter(path: &[&Level], last: Option<&Level>) -> TopicFilter {
    let mut text = String::with_capacity(64);
    for (index, level) in path.iter().copied().chain(last).enumerate() {
        if index > 0 {
            text.push('/');
        }
        match level {
            Level::Normal(s) | Level::Metadata(s) => text.push_str(s),
            Level::Blank => {}
            Level::SingleWildcard => text.push('+'),
            Level::MultiWildcard => text.push('#'),
        }
    }
    TopicFilter::from(text)
}

#[async_trait]
impl Router for MeshRouter {
    async fn add(&self, topic_filter: &str, id: Id, opts: SubscriptionOptions) -> Result<()> {
        self.inner.add(topic_filter, id, opts).await
    }

    async fn remove(&self, topic_filter: &str, id: Id) -> Result<bool> {
        self.inner.remove(topic_filter, id).await
    }

    /// The subscribers of every filter `topic` matches, by node: each plain subscriber (but
    /// the publisher itself where it asked for MQTT 5's no-local), and one member of each
    /// shared group, picked by the broker's shared-subscription strategy.
    async fn matches(&self, this_id: Id, topic: &TopicName) -> Result<SubRelationsMap> {
        let filters = self.filters(topic).await?;
        let mut collectors = SubscriptioRelationsCollectorMap::default();
        for topic_filter in filters {
            let mut groups: HashMap<SharedGroup, Vec<Candidate>> = HashMap::default();
            if let Some(relations) = self.inner.relations.get(&topic_filter) {
                for (client_id, (id, opts)) in relations.iter() {
                    if opts.no_local() == Some(true) && &this_id == id {
                        continue;
                    }
                    match opts.shared_group() {
                        Some(group) => {
                            let online = self.inner.is_online(id.node_id, client_id).await;
                            groups.entry(group.clone()).or_default().push((
                                id.node_id,
                                client_id.clone(),
                                opts.clone(),
                                None,
                                Some(online),
                            ));
                        }
                        None => collectors.entry(id.node_id).or_default().add(
                            &topic_filter,
                            client_id.clone(),
                            opts.clone(),
                            None,
                        ),
                    }
                }
            }
            for (group, mut members) in groups.drain() {
                let names = members.iter().map(|m| m.1.clone()).collect();
                let chosen = self
                    .scx
                    .extends
                    .shared_subscription()
                    .await
                    .choice(&self.scx, &group, &this_id, topic, &members)
                    .await;
                if let Some((index, online)) = chosen {
                    let (node_id, client_id, opts, _, _) = members.remove(index);
                    collectors.entry(node_id).or_default().add(
                        &topic_filter,
                        client_id,
                        opts,
                        Some((group, online, names)),
                    );
                }
            }
        }
        Ok(collectors
            .into_iter()
            .map(|(node_id, collector)| (node_id, collector.into()))
            .collect())
    }

    async fn is_online(&self, node_id: NodeId, client_id: &str) -> bool {
        self.inner.is_online(node_id, client_id).await
    }

    async fn gets(&self, limit: usize) -> Vec<Route> {
        self.inner.gets(limit).await
    }

    async fn get(&self, topic: &str) -> Result<Vec<Route>> {
        self.inner.get(topic).await
    }

    async fn query_subscriptions(&self, q: &SubsSearchParams) -> Vec<SubsSearchResult> {
        self.inner.query_subscriptions(q).await
    }

    async fn topics_tree(&self) -> usize {
        self.inner.topics_tree().await
    }

    fn topics(&self) -> Counter {
        self.inner.topics()
    }

    fn routes(&self) -> Counter {
        self.inner.routes()
    }

    fn merge_topics(&self, topics_map: &HashMap<NodeId, Counter>) -> Counter {
        self.inner.merge_topics(topics_map)
    }

    fn merge_routes(&self, routes_map: &HashMap<NodeId, Counter>) -> Counter {
        self.inner.merge_routes(routes_map)
    }

    async fn list_topics(&self, top: usize) -> Vec<String> {
        self.inner.list_topics(top).await
    }

    async fn list_relations(&self, top: usize) -> Vec<serde_json::Value> {
        self.inner.list_relations(top).await
    }

    fn relations(&self) -> &AllRelationsMap {
        self.inner.relations()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmqtt::topic::Topic;
    use rmqtt::trie::VecToTopic;
    use std::str::FromStr;

    /// rmqtt's own matcher, for comparison: the filters it finds, sorted.
    fn rmqtt_matches(tree: &TopicTree<()>, topic: &str) -> Vec<String> {
        let topic = Topic::from_str(topic).unwrap();
        let mut found: Vec<String> = tree
            .matches(&topic)
            .iter()
            .map(|(levels, _)| levels.to_topic_filter().to_string())
            .collect();
        found.sort();
        found
    }

    fn ours(tree: &TopicTree<()>, topic: &str) -> Vec<String> {
        let mut levels = Vec::new();
        parse_levels(topic, &mut levels).unwrap();
        let mut found: Vec<String> = matched_filters(tree, &levels)
            .iter()
            .map(ToString::to_string)
            .collect();
        found.sort();
        found
    }

    fn tree(filters: &[&str]) -> TopicTree<()> {
        let mut tree = TopicTree::default();
        for filter in filters {
            tree.insert(&Topic::from_str(filter).unwrap(), ());
        }
        tree
    }

    #[test]
    fn the_filters_found_are_those_mqtt_matches_and_rmqtt_finds() {
        let filters = [
            "ns/a2a/v1/agent/request/echo/+",
            "ns/a2a/v1/agent/cancel/echo/+",
            "ns/a2a/v1/gateway/response/gateway/gw-1/#",
            "ns/a2a/v1/discovery/#",
            "ns/a2a/v1/discovery/agentcards/+",
            "ns/#",
            "#",
            "+/+",
            "+/a2a/#",
            "/leading",
            "+/leading",
            "trailing/",
            "trailing/+",
            "a/+/+/d",
            "a/#",
            "a",
            "$SYS/broker/load",
            "$SYS/#",
            "+/broker/load",
        ];
        let tree = tree(&filters);
        let topics = [
            "ns/a2a/v1/agent/request/echo/0f1e2d3c",
            "ns/a2a/v1/agent/cancel/echo/0f1e2d3c",
            "ns/a2a/v1/gateway/response/gateway/gw-1/echo/0f1e2d3c",
            "ns/a2a/v1/discovery/agentcards/echo",
            "ns/a2a/v1/discovery/presence/echo/i-1",
            "ns",
            "other/topic",
            "/leading",
            "trailing/",
            "a",
            "a/b",
            "a/b/c/d",
            "a//c/d",
            "$SYS/broker/load",
            "$SYS",
            "x",
        ];
        for topic in topics {
            let expected = rmqtt_matches(&tree, topic);
            assert_eq!(ours(&tree, topic), expected, "topic {topic:?}");
        }
        assert_eq!(
            ours(&tree, "ns/a2a/v1/agent/request/echo/t-1"),
            ["#", "+/a2a/#", "ns/#", "ns/a2a/v1/agent/request/echo/+"],
            "the filters a request topic of the mesh matches"
        );
        assert_eq!(
            ours(&tree, "a"),
            ["#", "a", "a/#"],
            "`#` matches its parent level"
        );
        assert_eq!(
            ours(&tree, "$SYS/broker/load"),
            ["$SYS/#", "$SYS/broker/load"],
            "no filter starting with a wildcard matches a `$` topic"
        );
    }

    #[test]
    fn random_trees_and_topics_match_as_rmqtt_matches_them() {
        // A fixed xorshift sequence: the same cases on every run.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        let topic_levels = ["a", "b", "", "$s"];
        let mut matched = 0;
        for _ in 0..300 {
            let mut filters = Vec::new();
            for _ in 0..1 + next(12) {
                let depth = 1 + next(4);
                let mut levels: Vec<&str> = (0..depth)
                    .map(|_| ["a", "b", "", "+", "$s"][next(5)])
                    .collect();
                if next(3) == 0 {
                    levels.push("#");
                }
                // `$` only first, as a filter may have it.
                if levels.iter().skip(1).any(|l| l.starts_with('$')) {
                    continue;
                }
                filters.push(levels.join("/"));
            }
            let refs: Vec<&str> = filters.iter().map(String::as_str).collect();
            let tree = tree(&refs);
            for _ in 0..10 {
                let depth = 1 + next(5);
                let levels: Vec<&str> = (0..depth)
                    .map(|index| topic_levels[next(if index == 0 { 4 } else { 3 })])
                    .collect();
                let topic = levels.join("/");
                let found = ours(&tree, &topic);
                assert_eq!(
                    found,
                    rmqtt_matches(&tree, &topic),
                    "topic {topic:?} against {filters:?}"
                );
                matched += usize::from(!found.is_empty());
            }
        }
        assert!(
            matched > 300,
            "the cases match something: {matched} of 3,000"
        );
    }

    #[test]
    fn topics_parse_into_the_levels_rmqtt_parses_and_reuse_their_strings() {
        let mut levels = Vec::new();
        for topic in [
            "ns/a2a/v1/agent/request/echo/t-1",
            "a",
            "$SYS/broker/load",
            "/leading//",
            "a/+/#",
            "ns/a2a/v1/agent/request/echo/t-2",
        ] {
            parse_levels(topic, &mut levels).unwrap();
            assert_eq!(&levels, Topic::from_str(topic).unwrap().levels(), "{topic}");
        }
        let reused = match &levels[6] {
            Level::Normal(s) => s.as_ptr(),
            other => panic!("{other:?}"),
        };
        parse_levels("ns/a2a/v1/agent/request/echo/t-3", &mut levels).unwrap();
        assert!(
            matches!(&levels[6], Level::Normal(s) if s.as_ptr() == reused && s == "t-3"),
            "the level is written into the string that was there"
        );
        for refused in ["a/b+c", "a/#/b", "a/$b", "a/#c"] {
            assert!(Topic::from_str(refused).is_err(), "rmqtt refuses {refused}");
            assert!(
                parse_levels(refused, &mut levels).is_err(),
                "{refused} is refused"
            );
        }
    }

    #[test]
    fn only_so_many_parsed_topics_of_so_many_levels_are_kept() {
        let mut spare = Vec::new();
        let mut deep = Vec::new();
        parse_levels(&vec!["x"; SPARE_LEVELS + 1].join("/"), &mut deep).unwrap();
        keep_for_reuse(&mut spare, deep);
        assert!(spare.is_empty(), "a deep topic's strings are freed");
        for _ in 0..SPARE_TOPICS + 5 {
            let mut levels = Vec::new();
            parse_levels("ns/a2a/v1/agent/request/echo/t-1", &mut levels).unwrap();
            keep_for_reuse(&mut spare, levels);
        }
        assert_eq!(spare.len(), SPARE_TOPICS);
    }

    #[test]
    fn an_empty_tree_matches_nothing() {
        assert!(ours(&tree(&[]), "a/b").is_empty());
    }
}
