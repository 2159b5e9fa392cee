//! The MQTT topic scheme of the mesh: the one place that builds and parses every topic and
//! topic filter the mesh uses, and that refuses hostile topic segments.
//!
//! Every topic has the form `<namespace>/a2a/v1/<component>/<direction>/<target>/<task_id>`:
//!
//! | what | topic |
//! | --- | --- |
//! | a request to an agent (all instances share one subscription group) | `<ns>/a2a/v1/agent/request/<agent>/<task>` |
//! | every event of a task, back to the gateway that asked | `<ns>/a2a/v1/gateway/response/<gateway>/<instance>/<agent>/<task>` |
//! | every event of a task, back to an agent that delegated | `<ns>/a2a/v1/agent/response/<caller>/<instance>/<agent>/<task>` |
//! | cancellation, to every instance of an agent | `<ns>/a2a/v1/agent/cancel/<agent>/<task>` |
//! | an agent's card (retained) | `<ns>/a2a/v1/discovery/agentcards/<agent>` |
//! | an instance's presence (retained) | `<ns>/a2a/v1/discovery/presence/<agent>/<instance_id>` |
//!
//! All the events of one task travel on one topic, so MQTT's per-topic ordering keeps them in
//! order.
//!
//! # Response topics and ACLs
//!
//! A response topic names, in this order, who asked (the gateway deployment's name, or the
//! calling agent's name: the broker account it runs as), which instance of it asked (so that
//! each instance subscribes to its own replies only), and which agent answers (the one it
//! asked). A broker ACL can then say, per account and without knowing any instance id:
//!
//! - an account reads only the responses to itself: `<ns>/a2a/v1/gateway/response/<gateway>/#`
//!   (all its replicas: they may read each other's replies) or
//!   `<ns>/a2a/v1/agent/response/<agent>/#`;
//! - an agent account publishes only responses in its own name:
//!   `<ns>/a2a/v1/+/response/+/+/<agent>/+` (for both components).
//!
//! A requester drops a reply whose answering agent is not the one it asked, so an account can
//! never answer for another agent.
//!
//! # Segments
//!
//! A *safe segment* is non-empty, at most [`MAX_SEGMENT_LEN`] bytes, does not start with `$`,
//! and contains none of `/`, `+`, `#` (MQTT separators and wildcards), `.`, `*`, `>` (NATS's
//! MQTT bridge maps topics onto NATS subjects where these mean something), whitespace, NUL or
//! any other control character.
//!
//! The namespace is a single safe segment (not a path): one tenant or one deployment per
//! namespace, and a namespace can never overlap another one's topics. Agent names, gateway
//! ids, instance ids and namespaces are refused when they are not safe segments.
//!
//! Task ids come from outside (in A2A 0.1 the HTTP client chooses them), so they are never
//! refused for their characters: a task id that is a safe segment and does not start with `~`
//! is used as is; any other is mapped to `~` followed by the unpadded base64url encoding of
//! its bytes ([`encode_task_id`]), and mapped back by [`decode_task_id`]. The mapping is
//! refused only when the encoded form would exceed [`MAX_SEGMENT_LEN`] bytes (task ids longer
//! than 47 bytes that are not safe segments). A task id can therefore never widen a
//! subscription nor reach another agent's topics.

use std::borrow::Cow;
use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The longest segment accepted, in bytes.
pub const MAX_SEGMENT_LEN: usize = 64;

/// The protocol part that follows the namespace in every topic.
const PROTO: &str = "a2a/v1";

/// The agent segment of the registries' load markers ([`Topics::registry_marker`]); a
/// registry ignores presence under it.
pub const REGISTRY_MARKER_AGENT: &str = "_registry";

/// The prefix that marks an encoded task id.
const ENCODED_PREFIX: char = '~';

/// What kind of segment was refused (named in [`TopicError`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// The namespace.
    Namespace,
    /// An agent name.
    Agent,
    /// A gateway (deployment) name.
    Gateway,
    /// An instance id.
    Instance,
    /// A task id (only refused when even its encoded form is too long, or when decoding).
    TaskId,
}

impl fmt::Display for SegmentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SegmentKind::Namespace => "namespace",
            SegmentKind::Agent => "agent name",
            SegmentKind::Gateway => "gateway name",
            SegmentKind::Instance => "instance id",
            SegmentKind::TaskId => "task id",
        })
    }
}

/// Why a segment is not safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentProblem {
    /// The segment is empty.
    Empty,
    /// The segment is longer than [`MAX_SEGMENT_LEN`] bytes (the length is given).
    TooLong(usize),
    /// The segment starts with `$` (reserved for broker topics such as `$SYS` and `$share`).
    LeadingDollar,
    /// The segment contains a character that is not allowed.
    ForbiddenChar(char),
    /// An encoded task id that does not decode (bad base64url or not UTF-8), or that is not
    /// the canonical encoding of its task id.
    BadEncoding,
}

impl fmt::Display for SegmentProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SegmentProblem::Empty => f.write_str("it is empty"),
            SegmentProblem::TooLong(n) => {
                write!(f, "it is {n} bytes long (at most {MAX_SEGMENT_LEN})")
            }
            SegmentProblem::LeadingDollar => f.write_str("it starts with '$'"),
            SegmentProblem::ForbiddenChar(c) => write!(f, "it contains the character {c:?}"),
            SegmentProblem::BadEncoding => f.write_str("it is not a valid encoded task id"),
        }
    }
}

/// A refused topic segment: which one, its value, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsafe {kind} {value:?} in an MQTT topic: {problem}")]
pub struct TopicError {
    /// Which segment was refused.
    pub kind: SegmentKind,
    /// The refused value (as given).
    pub value: String,
    /// Why it was refused.
    pub problem: SegmentProblem,
}

/// The ASCII bytes a segment must not contain: controls, space, DEL, and the MQTT and NATS
/// separators and wildcards (`/ + # . * >`). One lookup per byte: ids are checked on every
/// request.
const FORBIDDEN_ASCII: [bool; 128] = {
    let mut table = [false; 128];
    let mut b = 0;
    while b < 128 {
        table[b] = b <= b' ' as usize || b == 0x7f;
        b += 1;
    }
    table[b'/' as usize] = true;
    table[b'+' as usize] = true;
    table[b'#' as usize] = true;
    table[b'.' as usize] = true;
    table[b'*' as usize] = true;
    table[b'>' as usize] = true;
    table
};

/// Checks that `segment` is a safe segment (see the module documentation).
pub fn check_segment(segment: &str) -> Result<(), SegmentProblem> {
    if segment.is_empty() {
        return Err(SegmentProblem::Empty);
    }
    if segment.len() > MAX_SEGMENT_LEN {
        return Err(SegmentProblem::TooLong(segment.len()));
    }
    if segment.starts_with('$') {
        return Err(SegmentProblem::LeadingDollar);
    }
    // Ids are almost always ASCII: one pass over the bytes, characters only from the first
    // byte that is not.
    let forbidden = |c: char| {
        matches!(c, '/' | '+' | '#' | '.' | '*' | '>') || c.is_control() || c.is_whitespace()
    };
    for (i, &b) in segment.as_bytes().iter().enumerate() {
        match FORBIDDEN_ASCII.get(usize::from(b)) {
            Some(false) => {}
            Some(true) => return Err(SegmentProblem::ForbiddenChar(char::from(b))),
            // Not ASCII: the rest by characters (`i` is a character boundary, as every byte
            // before it was ASCII).
            None => {
                return match segment[i..].chars().find(|&c| forbidden(c)) {
                    Some(c) => Err(SegmentProblem::ForbiddenChar(c)),
                    None => Ok(()),
                };
            }
        }
    }
    Ok(())
}

/// `path` as exactly `N` safe segments, `None` for any other path: the separators found by
/// one vectorised search, each segment checked once (on every request an agent serves: the
/// reply topic it is given).
fn safe_segments<const N: usize>(path: &str) -> Option<[&str; N]> {
    let mut segments = [""; N];
    let mut count = 0;
    let mut start = 0;
    let bytes = path.as_bytes();
    for end in memchr::memchr_iter(b'/', bytes).chain(std::iter::once(bytes.len())) {
        let segment = &path[start..end];
        *segments.get_mut(count)? = segment;
        check_segment(segment).ok()?;
        count += 1;
        start = end + 1;
    }
    (count == N).then_some(segments)
}

/// Returns whether `segment` is a safe segment.
pub fn is_safe_segment(segment: &str) -> bool {
    check_segment(segment).is_ok()
}

fn checked(kind: SegmentKind, value: &str) -> Result<&str, TopicError> {
    check_segment(value).map_err(|problem| TopicError {
        kind,
        value: value.to_owned(),
        problem,
    })?;
    Ok(value)
}

/// Maps a task id onto a safe segment, reversibly (see [`decode_task_id`]).
///
/// A safe segment that does not start with `~` is returned as is; anything else becomes `~`
/// followed by the unpadded base64url encoding of its UTF-8 bytes. Fails only when that
/// encoding would be longer than [`MAX_SEGMENT_LEN`] bytes.
pub fn encode_task_id(task_id: &str) -> Result<Cow<'_, str>, TopicError> {
    if !task_id.starts_with(ENCODED_PREFIX) && is_safe_segment(task_id) {
        return Ok(Cow::Borrowed(task_id));
    }
    let encoded_len = 1 + (task_id.len() * 4).div_ceil(3);
    if encoded_len > MAX_SEGMENT_LEN {
        return Err(TopicError {
            kind: SegmentKind::TaskId,
            value: task_id.to_owned(),
            problem: SegmentProblem::TooLong(encoded_len),
        });
    }
    let mut out = String::with_capacity(encoded_len);
    out.push(ENCODED_PREFIX);
    URL_SAFE_NO_PAD.encode_string(task_id.as_bytes(), &mut out);
    Ok(Cow::Owned(out))
}

/// Maps a task segment (as produced by [`encode_task_id`]) back to the task id.
///
/// Refuses anything [`encode_task_id`] cannot produce, so the mapping is a bijection.
pub fn decode_task_id(segment: &str) -> Result<Cow<'_, str>, TopicError> {
    let bad = |problem| TopicError {
        kind: SegmentKind::TaskId,
        value: segment.to_owned(),
        problem,
    };
    check_segment(segment).map_err(bad)?;
    let Some(encoded) = segment.strip_prefix(ENCODED_PREFIX) else {
        return Ok(Cow::Borrowed(segment));
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| bad(SegmentProblem::BadEncoding))?;
    let task_id = String::from_utf8(bytes).map_err(|_| bad(SegmentProblem::BadEncoding))?;
    // Canonical form only: a plain safe id is never encoded.
    if !task_id.starts_with(ENCODED_PREFIX) && is_safe_segment(&task_id) {
        return Err(bad(SegmentProblem::BadEncoding));
    }
    Ok(Cow::Owned(task_id))
}

/// Returns whether an MQTT topic filter matches a topic name.
///
/// Handles `+` and `#`, strips a `$share/<group>/` prefix from the filter, and follows MQTT's
/// rule that a filter starting with a wildcard does not match a topic starting with `$`.
pub fn filter_matches(filter: &str, topic: &str) -> bool {
    let (literal, rest) = split_literal(filter);
    topic.starts_with(literal) && rest_matches(rest, &topic[literal.len()..])
}

/// A filter as a router keeps it: its [`literal_prefix`], which every matching topic starts
/// with (compared in one `memcmp`), and the rest of the filter after it, which
/// [`rest_matches`] matches against the rest of the topic.
pub fn split_literal(filter: &str) -> (&str, &str) {
    let literal = literal_prefix(filter);
    (literal, &strip_share(filter)[literal.len()..])
}

/// Whether the rest of a topic after a filter's literal prefix matches the rest of the filter
/// ([`split_literal`]): what [`filter_matches`] is once the prefixes compared equal.
pub fn rest_matches(rest: &str, topic: &str) -> bool {
    // Runs for every route on every incoming message: one pass over the bytes, no iterators
    // (the literal levels, compared already, are not walked again).
    let filter = rest.as_bytes();
    let topic = topic.as_bytes();
    if topic.first() == Some(&b'$') && matches!(filter.first(), Some(b'+' | b'#')) {
        return false;
    }
    let (mut f, mut t) = (0, 0);
    loop {
        // Both at the start of a level. A wildcard is a level of its own (`+`, `#`).
        let wildcard = matches!(filter.get(f + 1), None | Some(b'/'));
        match filter.get(f) {
            Some(b'#') if wildcard => return true,
            Some(b'+') if wildcard => {
                f += 1;
                t += memchr::memchr(b'/', &topic[t..]).unwrap_or(topic.len() - t);
            }
            _ => {
                let level = memchr::memchr(b'/', &filter[f..]).unwrap_or(filter.len() - f);
                let end = t + level;
                if end > topic.len()
                    || filter[f..f + level] != topic[t..end]
                    || topic.get(end).is_some_and(|&b| b != b'/')
                {
                    return false;
                }
                f += level;
                t = end;
            }
        }
        // Both at the end of a level.
        match (f == filter.len(), t == topic.len()) {
            (true, true) => return true,
            // `a/#` also matches `a`.
            (false, true) => {
                return filter[f..].starts_with(b"/#")
                    && matches!(filter.get(f + 2), None | Some(b'/'));
            }
            (true, false) => return false,
            (false, false) => {
                f += 1;
                t += 1;
            }
        }
    }
}

/// The literal levels of a filter before its first wildcard (the `$share/<group>/` prefix
/// stripped, the `/` before the wildcard excluded): every topic the filter matches starts
/// with it, so a router compares it first, in one `memcmp`, and runs [`filter_matches`] only
/// on the topics that pass.
pub fn literal_prefix(filter: &str) -> &str {
    let filter = strip_share(filter);
    let bytes = filter.as_bytes();
    let mut level_start = 0;
    loop {
        let wildcard = matches!(bytes.get(level_start), Some(b'+' | b'#'))
            && matches!(bytes.get(level_start + 1), None | Some(b'/'));
        if wildcard {
            return &filter[..level_start.saturating_sub(1)];
        }
        match bytes[level_start..].iter().position(|&b| b == b'/') {
            Some(slash) => level_start += slash + 1,
            None => return filter,
        }
    }
}

/// Strips a `$share/<group>/` prefix from a filter (returns other filters unchanged).
pub fn strip_share(filter: &str) -> &str {
    filter
        .strip_prefix("$share/")
        .and_then(|rest| rest.split_once('/'))
        .map_or(filter, |(_, f)| f)
}

/// Who a response topic goes back to: a gateway or a calling agent (on the wire, as
/// `_mesh.caller.kind`: `"gateway"` or `"agent"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequesterKind {
    /// `<ns>/a2a/v1/gateway/response/…`.
    Gateway,
    /// `<ns>/a2a/v1/agent/response/…`.
    Agent,
}

impl RequesterKind {
    /// The kind as `_mesh.caller.kind` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            RequesterKind::Gateway => "gateway",
            RequesterKind::Agent => "agent",
        }
    }

    /// The kind `_mesh.caller.kind` names, if it is one.
    pub fn from_name(name: &str) -> Option<RequesterKind> {
        match name {
            "gateway" => Some(RequesterKind::Gateway),
            "agent" => Some(RequesterKind::Agent),
            _ => None,
        }
    }

    fn path(self) -> &'static str {
        match self {
            RequesterKind::Gateway => "gateway/response",
            RequesterKind::Agent => "agent/response",
        }
    }

    fn segment_kind(self) -> SegmentKind {
        match self {
            RequesterKind::Gateway => SegmentKind::Gateway,
            RequesterKind::Agent => SegmentKind::Agent,
        }
    }
}

/// The segment of a task id inside a topic: borrowed, as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSegment<'a>(&'a str);

impl<'a> TaskSegment<'a> {
    /// The segment as it appears in the topic (possibly encoded).
    pub fn as_segment(&self) -> &'a str {
        self.0
    }

    /// The task id it stands for.
    pub fn task_id(&self) -> Cow<'a, str> {
        // A TaskSegment is only made by `Topics::parse`, which checked it decodes.
        decode_task_id(self.0).unwrap_or(Cow::Borrowed(self.0))
    }
}

/// What a topic is, as recognised by [`Topics::parse`], with borrowed segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicKind<'a> {
    /// `<ns>/a2a/v1/agent/request/<agent>/<task>`.
    AgentRequest {
        /// The namespace.
        namespace: &'a str,
        /// The agent asked.
        agent: &'a str,
        /// The task.
        task: TaskSegment<'a>,
    },
    /// `<ns>/a2a/v1/gateway/response/<gateway>/<instance>/<agent>/<task>`.
    GatewayResponse {
        /// The namespace.
        namespace: &'a str,
        /// The gateway (deployment) that asked.
        gateway: &'a str,
        /// The instance of the gateway that asked.
        instance: &'a str,
        /// The agent that answers.
        agent: &'a str,
        /// The task.
        task: TaskSegment<'a>,
    },
    /// `<ns>/a2a/v1/agent/response/<caller>/<instance>/<agent>/<task>`.
    AgentResponse {
        /// The namespace.
        namespace: &'a str,
        /// The agent that delegated the task.
        caller: &'a str,
        /// The instance of the calling agent.
        instance: &'a str,
        /// The agent that answers.
        agent: &'a str,
        /// The task.
        task: TaskSegment<'a>,
    },
    /// `<ns>/a2a/v1/agent/cancel/<agent>/<task>`.
    AgentCancel {
        /// The namespace.
        namespace: &'a str,
        /// The agent whose task is cancelled.
        agent: &'a str,
        /// The task.
        task: TaskSegment<'a>,
    },
    /// `<ns>/a2a/v1/discovery/agentcards/<agent>`.
    AgentCard {
        /// The namespace.
        namespace: &'a str,
        /// The agent the card describes.
        agent: &'a str,
    },
    /// `<ns>/a2a/v1/discovery/presence/<agent>/<instance_id>`.
    Presence {
        /// The namespace.
        namespace: &'a str,
        /// The agent.
        agent: &'a str,
        /// The instance of the agent.
        instance: &'a str,
    },
}

/// Builds the topics and filters of one namespace; parses any topic of the scheme.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Topics {
    namespace: String,
    /// `<ns>/a2a/v1`, precomputed.
    base: String,
}

impl Topics {
    /// The topics of `namespace`, which must be a single safe segment.
    pub fn new(namespace: impl Into<String>) -> Result<Self, TopicError> {
        let namespace = namespace.into();
        checked(SegmentKind::Namespace, &namespace)?;
        let base = format!("{namespace}/{PROTO}");
        Ok(Topics { namespace, base })
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn task_topic(
        &self,
        path: &str,
        kind: SegmentKind,
        target: &str,
        task_id: &str,
    ) -> Result<String, TopicError> {
        let target = checked(kind, target)?;
        let task = encode_task_id(task_id)?;
        let mut topic =
            String::with_capacity(self.base.len() + path.len() + target.len() + task.len() + 3);
        for part in [&self.base, "/", path, "/", target, "/", &task] {
            topic.push_str(part);
        }
        Ok(topic)
    }

    fn task_filter(
        &self,
        path: &str,
        kind: SegmentKind,
        target: &str,
    ) -> Result<String, TopicError> {
        let target = checked(kind, target)?;
        Ok(format!("{}/{path}/{target}/+", self.base))
    }

    /// The topic of a request to `agent` for task `task_id`.
    pub fn agent_request(&self, agent: &str, task_id: &str) -> Result<String, TopicError> {
        self.task_topic("agent/request", SegmentKind::Agent, agent, task_id)
    }

    /// The plain (not shared) filter of every request to `agent`, for brokers without shared
    /// subscriptions: every instance then receives every request.
    pub fn agent_request_filter(&self, agent: &str) -> Result<String, TopicError> {
        self.task_filter("agent/request", SegmentKind::Agent, agent)
    }

    /// The name of the shared subscription group of `agent` in this namespace.
    ///
    /// `mesh_<len(ns)>_<ns>_<agent>`: the namespace's length makes the name unambiguous, so
    /// no two (namespace, agent) pairs ever share a group name (some brokers key groups by
    /// name only).
    pub fn share_group(&self, agent: &str) -> Result<String, TopicError> {
        let agent = checked(SegmentKind::Agent, agent)?;
        Ok(format!(
            "mesh_{}_{}_{agent}",
            self.namespace.len(),
            self.namespace
        ))
    }

    /// The shared filter through which all instances of `agent` split its requests:
    /// `$share/<group>/<ns>/a2a/v1/agent/request/<agent>/+`.
    pub fn agent_request_shared_filter(&self, agent: &str) -> Result<String, TopicError> {
        let group = self.share_group(agent)?;
        Ok(format!(
            "$share/{group}/{}",
            self.agent_request_filter(agent)?
        ))
    }

    /// The topic of every event of task `task_id` that `agent` sends back to instance
    /// `instance` of gateway `gateway`.
    pub fn gateway_response(
        &self,
        gateway: &str,
        instance: &str,
        agent: &str,
        task_id: &str,
    ) -> Result<String, TopicError> {
        self.response_topic(RequesterKind::Gateway, gateway, instance, agent, task_id)
    }

    /// The filter of every task event going back to instance `instance` of gateway `gateway`.
    pub fn gateway_response_filter(
        &self,
        gateway: &str,
        instance: &str,
    ) -> Result<String, TopicError> {
        self.response_filter(RequesterKind::Gateway, gateway, instance)
    }

    /// The topic of every event of task `task_id` that `agent` sends back to instance
    /// `instance` of agent `caller`, which delegated it.
    pub fn agent_response(
        &self,
        caller: &str,
        instance: &str,
        agent: &str,
        task_id: &str,
    ) -> Result<String, TopicError> {
        self.response_topic(RequesterKind::Agent, caller, instance, agent, task_id)
    }

    /// The filter of every task event going back to instance `instance` of agent `caller`.
    pub fn agent_response_filter(
        &self,
        caller: &str,
        instance: &str,
    ) -> Result<String, TopicError> {
        self.response_filter(RequesterKind::Agent, caller, instance)
    }

    /// The topic of every event of task `task_id` that `agent` sends back to instance
    /// `instance` of requester `requester` (a gateway deployment or a calling agent, as
    /// `kind` says).
    pub fn response_topic(
        &self,
        kind: RequesterKind,
        requester: &str,
        instance: &str,
        agent: &str,
        task_id: &str,
    ) -> Result<String, TopicError> {
        let requester = checked(kind.segment_kind(), requester)?;
        let instance = checked(SegmentKind::Instance, instance)?;
        let agent = checked(SegmentKind::Agent, agent)?;
        let task = encode_task_id(task_id)?;
        let path = kind.path();
        let mut topic = String::with_capacity(
            self.base.len()
                + path.len()
                + requester.len()
                + instance.len()
                + agent.len()
                + task.len()
                + 5,
        );
        for part in [
            &self.base, "/", path, "/", requester, "/", instance, "/", agent, "/", &task,
        ] {
            topic.push_str(part);
        }
        Ok(topic)
    }

    /// The filter of every task event going back to instance `instance` of requester
    /// `requester`: `…/response/<requester>/<instance>/+/+`.
    pub fn response_filter(
        &self,
        kind: RequesterKind,
        requester: &str,
        instance: &str,
    ) -> Result<String, TopicError> {
        let requester = checked(kind.segment_kind(), requester)?;
        let instance = checked(SegmentKind::Instance, instance)?;
        Ok(format!(
            "{}/{}/{requester}/{instance}/+/+",
            self.base,
            kind.path()
        ))
    }

    /// The filter of every response to any instance of requester `requester`:
    /// `…/response/<requester>/#`, what a broker ACL lets that account read.
    pub fn responses_to(&self, kind: RequesterKind, requester: &str) -> Result<String, TopicError> {
        let requester = checked(kind.segment_kind(), requester)?;
        Ok(format!("{}/{}/{requester}/#", self.base, kind.path()))
    }

    /// The filter of every response `agent` may publish, to gateways (`RequesterKind::Gateway`)
    /// or to calling agents (`RequesterKind::Agent`): `…/response/+/+/<agent>/+`, what a broker
    /// ACL lets that agent's account write.
    pub fn responses_from(&self, kind: RequesterKind, agent: &str) -> Result<String, TopicError> {
        let agent = checked(SegmentKind::Agent, agent)?;
        Ok(format!("{}/{}/+/+/{agent}/+", self.base, kind.path()))
    }

    /// True for a topic `agent` may send a reply to: a gateway's or a calling agent's
    /// response topic of this namespace whose answering agent is `agent` (safe segments, a
    /// task segment that decodes). Agents answer nowhere else, whatever a request's
    /// `_mesh.replyTo` says.
    pub fn is_response_topic_of(&self, topic: &str, agent: &str) -> bool {
        // On every request: no allocation.
        let Some(rest) = topic
            .strip_prefix(self.base.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(|rest| {
                rest.strip_prefix("gateway/response/")
                    .or_else(|| rest.strip_prefix("agent/response/"))
            })
        else {
            return false;
        };
        let Some([_requester, _instance, answering, task]) = safe_segments(rest) else {
            return false;
        };
        // A task segment not encoded is a safe segment (checked); an encoded one decodes.
        answering == agent && (!task.starts_with(ENCODED_PREFIX) || decode_task_id(task).is_ok())
    }

    /// The filter of every topic of the namespace.
    pub fn namespace_filter(&self) -> String {
        format!("{}/#", self.base)
    }

    /// The filter of every request to every agent of the namespace.
    pub fn every_request_filter(&self) -> String {
        format!("{}/agent/request/+/+", self.base)
    }

    /// The filter of every cancellation to every agent of the namespace.
    pub fn every_cancel_filter(&self) -> String {
        format!("{}/agent/cancel/+/+", self.base)
    }

    /// The topic on which the registry of `owner` (a gateway's or an agent's name) publishes
    /// its load marker: `<ns>/a2a/v1/discovery/presence/_registry/<owner>`.
    pub fn registry_marker(&self, owner: &str) -> Result<String, TopicError> {
        let owner = checked(SegmentKind::Instance, owner)?;
        Ok(format!(
            "{}/discovery/presence/{REGISTRY_MARKER_AGENT}/{owner}",
            self.base
        ))
    }

    /// The topic that cancels task `task_id` at every instance of `agent`.
    pub fn agent_cancel(&self, agent: &str, task_id: &str) -> Result<String, TopicError> {
        self.task_topic("agent/cancel", SegmentKind::Agent, agent, task_id)
    }

    /// The cancel topic of the task whose request topic ([`Topics::agent_request`]) is
    /// `request`: the same agent and task, whose segments that topic's making checked and
    /// encoded already. `None` for a topic that is not a request topic of this namespace.
    pub fn agent_cancel_of_request(&self, request: &str) -> Option<String> {
        const REQUEST: &str = "/agent/request/";
        const CANCEL: &str = "/agent/cancel/";
        let rest = request
            .strip_prefix(self.base.as_str())?
            .strip_prefix(REQUEST)?;
        let mut topic = String::with_capacity(self.base.len() + CANCEL.len() + rest.len());
        for part in [&self.base, CANCEL, rest] {
            topic.push_str(part);
        }
        Some(topic)
    }

    /// The (not shared) filter of every cancellation for `agent`.
    pub fn agent_cancel_filter(&self, agent: &str) -> Result<String, TopicError> {
        self.task_filter("agent/cancel", SegmentKind::Agent, agent)
    }

    /// The retained topic of `agent`'s card.
    pub fn agent_card(&self, agent: &str) -> Result<String, TopicError> {
        let agent = checked(SegmentKind::Agent, agent)?;
        Ok(format!("{}/discovery/agentcards/{agent}", self.base))
    }

    /// The filter of everything on the discovery topics of the namespace: every card and
    /// every presence.
    pub fn discovery_filter(&self) -> String {
        format!("{}/discovery/#", self.base)
    }

    /// The filter of every agent card in the namespace.
    pub fn agent_cards_filter(&self) -> String {
        format!("{}/discovery/agentcards/+", self.base)
    }

    /// The retained presence topic of one instance of `agent`.
    pub fn presence(&self, agent: &str, instance_id: &str) -> Result<String, TopicError> {
        let agent = checked(SegmentKind::Agent, agent)?;
        let instance = checked(SegmentKind::Instance, instance_id)?;
        Ok(format!(
            "{}/discovery/presence/{agent}/{instance}",
            self.base
        ))
    }

    /// The filter of the presence of every instance of every agent in the namespace.
    pub fn presence_filter(&self) -> String {
        format!("{}/discovery/presence/+/+", self.base)
    }

    /// The filter of the presence of every instance of `agent`.
    pub fn agent_presence_filter(&self, agent: &str) -> Result<String, TopicError> {
        let agent = checked(SegmentKind::Agent, agent)?;
        Ok(format!("{}/discovery/presence/{agent}/+", self.base))
    }

    /// Recognises any topic of the scheme, in any namespace; `None` for anything else,
    /// including topics with an unsafe segment or a task segment that does not decode.
    pub fn parse(topic: &str) -> Option<TopicKind<'_>> {
        // The longest topic of the scheme has 9 segments: one more means none of them.
        let mut buf = [""; 10];
        let mut len = 0;
        for seg in topic.split('/') {
            *buf.get_mut(len)? = seg;
            len += 1;
        }
        let segs = &buf[..len];
        let (&namespace, rest) = segs.split_first()?;
        if rest.len() < 4 || rest[0] != "a2a" || rest[1] != "v1" {
            return None;
        }
        if !segs
            .iter()
            .skip(3)
            .chain([&namespace])
            .all(|s| is_safe_segment(s))
        {
            return None;
        }
        let kind = match &rest[2..] {
            ["agent", "request", agent, t] => TopicKind::AgentRequest {
                namespace,
                agent,
                task: task_segment(t)?,
            },
            ["gateway", "response", gateway, instance, agent, t] => TopicKind::GatewayResponse {
                namespace,
                gateway,
                instance,
                agent,
                task: task_segment(t)?,
            },
            ["agent", "response", caller, instance, agent, t] => TopicKind::AgentResponse {
                namespace,
                caller,
                instance,
                agent,
                task: task_segment(t)?,
            },
            ["agent", "cancel", agent, t] => TopicKind::AgentCancel {
                namespace,
                agent,
                task: task_segment(t)?,
            },
            ["discovery", "agentcards", agent] => TopicKind::AgentCard { namespace, agent },
            ["discovery", "presence", agent, instance] => TopicKind::Presence {
                namespace,
                agent,
                instance,
            },
            _ => return None,
        };
        Some(kind)
    }

    /// Like [`Topics::parse`], but only for topics of this namespace.
    pub fn parse_own<'t>(&self, topic: &'t str) -> Option<TopicKind<'t>> {
        let kind = Self::parse(topic)?;
        (kind.namespace() == self.namespace).then_some(kind)
    }
}

fn task_segment(s: &str) -> Option<TaskSegment<'_>> {
    decode_task_id(s).ok()?;
    Some(TaskSegment(s))
}

impl<'a> TopicKind<'a> {
    /// The namespace of the topic.
    pub fn namespace(&self) -> &'a str {
        match *self {
            TopicKind::AgentRequest { namespace, .. }
            | TopicKind::GatewayResponse { namespace, .. }
            | TopicKind::AgentResponse { namespace, .. }
            | TopicKind::AgentCancel { namespace, .. }
            | TopicKind::AgentCard { namespace, .. }
            | TopicKind::Presence { namespace, .. } => namespace,
        }
    }

    /// The task of the topic, for the kinds that carry one.
    pub fn task(&self) -> Option<TaskSegment<'a>> {
        match *self {
            TopicKind::AgentRequest { task, .. }
            | TopicKind::GatewayResponse { task, .. }
            | TopicKind::AgentResponse { task, .. }
            | TopicKind::AgentCancel { task, .. } => Some(task),
            TopicKind::AgentCard { .. } | TopicKind::Presence { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn topics() -> Topics {
        Topics::new("prod").unwrap()
    }

    #[test]
    fn a_request_topic_names_the_cancel_topic_of_its_task() {
        let t = topics();
        for task in ["t1", "a/b/#/+", "", "$x", "%2F"] {
            let request = t.agent_request("echo", task).unwrap();
            assert_eq!(
                t.agent_cancel_of_request(&request),
                Some(t.agent_cancel("echo", task).unwrap()),
                "{task:?}"
            );
        }
        let other = Topics::new("dev").unwrap();
        let request = other.agent_request("echo", "t1").unwrap();
        assert_eq!(
            t.agent_cancel_of_request(&request),
            None,
            "another namespace"
        );
        let cancel = t.agent_cancel("echo", "t1").unwrap();
        assert_eq!(t.agent_cancel_of_request(&cancel), None, "not a request");
    }

    #[test]
    fn builds_every_topic() {
        let t = topics();
        assert_eq!(
            t.agent_request("echo", "t1").unwrap(),
            "prod/a2a/v1/agent/request/echo/t1"
        );
        assert_eq!(
            t.agent_request_filter("echo").unwrap(),
            "prod/a2a/v1/agent/request/echo/+"
        );
        assert_eq!(
            t.agent_request_shared_filter("echo").unwrap(),
            "$share/mesh_4_prod_echo/prod/a2a/v1/agent/request/echo/+"
        );
        assert_eq!(
            t.gateway_response("web", "gw-1", "echo", "t1").unwrap(),
            "prod/a2a/v1/gateway/response/web/gw-1/echo/t1"
        );
        assert_eq!(
            t.gateway_response_filter("web", "gw-1").unwrap(),
            "prod/a2a/v1/gateway/response/web/gw-1/+/+"
        );
        assert_eq!(
            t.agent_response("planner", "i-1", "writer", "t1").unwrap(),
            "prod/a2a/v1/agent/response/planner/i-1/writer/t1"
        );
        assert_eq!(
            t.agent_response_filter("planner", "i-1").unwrap(),
            "prod/a2a/v1/agent/response/planner/i-1/+/+"
        );
        assert_eq!(
            t.responses_to(RequesterKind::Gateway, "web").unwrap(),
            "prod/a2a/v1/gateway/response/web/#"
        );
        assert_eq!(
            t.responses_from(RequesterKind::Agent, "writer").unwrap(),
            "prod/a2a/v1/agent/response/+/+/writer/+"
        );
        assert_eq!(
            t.agent_cancel("echo", "t1").unwrap(),
            "prod/a2a/v1/agent/cancel/echo/t1"
        );
        assert_eq!(
            t.agent_cancel_filter("echo").unwrap(),
            "prod/a2a/v1/agent/cancel/echo/+"
        );
        assert_eq!(
            t.agent_card("echo").unwrap(),
            "prod/a2a/v1/discovery/agentcards/echo"
        );
        assert_eq!(t.agent_cards_filter(), "prod/a2a/v1/discovery/agentcards/+");
        assert_eq!(
            t.presence("echo", "i-1").unwrap(),
            "prod/a2a/v1/discovery/presence/echo/i-1"
        );
        assert_eq!(t.presence_filter(), "prod/a2a/v1/discovery/presence/+/+");
        assert_eq!(t.discovery_filter(), "prod/a2a/v1/discovery/#");
        assert_eq!(
            t.agent_presence_filter("echo").unwrap(),
            "prod/a2a/v1/discovery/presence/echo/+"
        );
    }

    #[test]
    fn every_built_topic_parses_back() {
        let t = topics();
        let hostile_task = "task.abc/1#x";
        let cases = [
            t.agent_request("echo", hostile_task).unwrap(),
            t.gateway_response("gw", "g1", "echo", hostile_task)
                .unwrap(),
            t.agent_response("planner", "p1", "writer", hostile_task)
                .unwrap(),
            t.agent_cancel("echo", hostile_task).unwrap(),
        ];
        let kinds: Vec<_> = cases.iter().map(|c| Topics::parse(c).unwrap()).collect();
        assert!(matches!(
            kinds[0],
            TopicKind::AgentRequest {
                namespace: "prod",
                agent: "echo",
                ..
            }
        ));
        assert!(matches!(
            kinds[1],
            TopicKind::GatewayResponse {
                gateway: "gw",
                instance: "g1",
                agent: "echo",
                ..
            }
        ));
        assert!(matches!(
            kinds[2],
            TopicKind::AgentResponse {
                caller: "planner",
                instance: "p1",
                agent: "writer",
                ..
            }
        ));
        assert!(matches!(
            kinds[3],
            TopicKind::AgentCancel { agent: "echo", .. }
        ));
        for k in &kinds {
            assert_eq!(k.task().unwrap().task_id(), hostile_task);
            assert_eq!(k.namespace(), "prod");
        }
        assert_eq!(
            Topics::parse(&t.agent_card("echo").unwrap()),
            Some(TopicKind::AgentCard {
                namespace: "prod",
                agent: "echo"
            })
        );
        assert_eq!(
            Topics::parse(&t.presence("echo", "i1").unwrap()),
            Some(TopicKind::Presence {
                namespace: "prod",
                agent: "echo",
                instance: "i1"
            })
        );
        let other = Topics::new("dev").unwrap();
        assert!(other.parse_own(&cases[0]).is_none());
        assert!(t.parse_own(&cases[0]).is_some());
    }

    #[test]
    fn parse_refuses_what_the_scheme_cannot_produce() {
        for bad in [
            "",
            "prod",
            "prod/a2a/v1",
            "prod/a2a/v2/agent/request/echo/t1",
            "prod/mqtt/v1/agent/request/echo/t1",
            "prod/a2a/v1/agent/request/echo",
            "prod/a2a/v1/agent/request/echo/t1/extra",
            "prod/a2a/v1/agent/request/+/t1",
            "prod/a2a/v1/agent/request/echo/#",
            "prod/a2a/v1/agent/request/ec.ho/t1",
            "prod/a2a/v1/agent/request//t1",
            "$SYS/a2a/v1/agent/request/echo/t1",
            "prod/a2a/v1/agent/push/echo/t1",
            "prod/a2a/v1/gateway/request/gw/t1",
            "prod/a2a/v1/gateway/response/gw/t1",
            "prod/a2a/v1/gateway/response/gw/g1/echo",
            "prod/a2a/v1/gateway/response/gw/g1/echo/t1/extra",
            "prod/a2a/v1/agent/response/gw/g1/+/t1",
            "prod/a2a/v1/discovery/agentcards/echo/extra",
            "prod/a2a/v1/discovery/presence/echo",
            // Not canonical: `t1` is safe, so it is never encoded.
            "prod/a2a/v1/agent/request/echo/~dDE",
            // Not base64url.
            "prod/a2a/v1/agent/request/echo/~!!",
        ] {
            assert_eq!(Topics::parse(bad), None, "{bad:?} should not parse");
        }
    }

    #[test]
    fn only_response_topics_of_the_namespace_in_the_agents_name_take_replies() {
        let t = topics();
        for good in [
            t.gateway_response("gw", "g1", "echo", "task-1").unwrap(),
            t.agent_response("orchestrator", "o1", "echo", "a/b#c")
                .unwrap(),
        ] {
            assert!(t.is_response_topic_of(&good, "echo"), "{good}");
            assert!(!t.is_response_topic_of(&good, "writer"), "{good}");
        }
        let other = Topics::new("other").unwrap();
        for bad in [
            other.gateway_response("gw", "g1", "echo", "t").unwrap(),
            t.agent_request("echo", "t").unwrap(),
            t.agent_card("echo").unwrap(),
            t.presence("echo", "i").unwrap(),
            t.agent_cancel("echo", "t").unwrap(),
            "$SYS/broker/pwned".to_owned(),
            format!("{}/a2a/v1/gateway/response/gw/t", t.namespace()),
            format!("{}/a2a/v1/gateway/response/gw/g1/echo", t.namespace()),
            format!(
                "{}/a2a/v1/gateway/response/gw/g1/echo/t/extra",
                t.namespace()
            ),
            format!("{}/a2a/v1/gateway/response//g1/echo/t", t.namespace()),
            format!("{}/a2a/v1/gateway/response/g+/g1/echo/t", t.namespace()),
            format!("{}/a2a/v1/gateway/response/gw/#/echo/t", t.namespace()),
            format!("{}/a2a/v1/gateway/response/gw/g1/echo/~!!", t.namespace()),
            format!("{}x/a2a/v1/gateway/response/gw/g1/echo/t", t.namespace()),
            String::new(),
        ] {
            assert!(!t.is_response_topic_of(&bad, "echo"), "{bad}");
        }
    }

    #[test]
    fn hostile_segments_are_refused_with_the_reason() {
        let cases: &[(&str, SegmentProblem)] = &[
            ("", SegmentProblem::Empty),
            ("+", SegmentProblem::ForbiddenChar('+')),
            ("#", SegmentProblem::ForbiddenChar('#')),
            ("a/b", SegmentProblem::ForbiddenChar('/')),
            ("$SYS", SegmentProblem::LeadingDollar),
            ("$share", SegmentProblem::LeadingDollar),
            ("a\0b", SegmentProblem::ForbiddenChar('\0')),
            ("a\nb", SegmentProblem::ForbiddenChar('\n')),
            ("a\u{7f}", SegmentProblem::ForbiddenChar('\u{7f}')),
            ("a b", SegmentProblem::ForbiddenChar(' ')),
            ("a\u{a0}b", SegmentProblem::ForbiddenChar('\u{a0}')),
            ("a.b", SegmentProblem::ForbiddenChar('.')),
            ("a*", SegmentProblem::ForbiddenChar('*')),
            ("a>", SegmentProblem::ForbiddenChar('>')),
        ];
        let t = topics();
        for (seg, problem) in cases {
            assert_eq!(check_segment(seg), Err(*problem), "{seg:?}");
            let err = t.agent_request(seg, "t1").unwrap_err();
            assert_eq!(err.kind, SegmentKind::Agent);
            assert_eq!(err.problem, *problem);
            assert_eq!(err.value, *seg);
            assert_eq!(
                t.gateway_response(seg, "g1", "echo", "t").unwrap_err().kind,
                SegmentKind::Gateway
            );
            assert_eq!(
                t.gateway_response("gw", seg, "echo", "t").unwrap_err().kind,
                SegmentKind::Instance
            );
            assert_eq!(
                t.agent_response("planner", "p1", seg, "t")
                    .unwrap_err()
                    .kind,
                SegmentKind::Agent
            );
            assert_eq!(
                t.presence("a", seg).unwrap_err().kind,
                SegmentKind::Instance
            );
            assert_eq!(Topics::new(*seg).unwrap_err().kind, SegmentKind::Namespace);
            assert!(t.share_group(seg).is_err());
        }
        let long = "a".repeat(65);
        assert_eq!(check_segment(&long), Err(SegmentProblem::TooLong(65)));
        assert!(check_segment(&"a".repeat(64)).is_ok());
        let msg = t.agent_card("a/b").unwrap_err().to_string();
        assert!(msg.contains("agent name") && msg.contains("'/'"), "{msg}");
    }

    #[test]
    fn task_ids_never_widen_a_topic() {
        let t = topics();
        for id in [
            "+",
            "#",
            "a/b",
            "$SYS",
            "x/+/#",
            "task.abc/1#x",
            "",
            " ",
            "~",
            "~abc",
        ] {
            let topic = t.agent_request("echo", id).unwrap();
            assert!(!topic.contains('+') && !topic.contains('#'), "{topic}");
            assert_eq!(topic.split('/').count(), 7, "{topic}");
            let kind = Topics::parse(&topic).unwrap();
            assert_eq!(kind.task().unwrap().task_id(), id);
        }
        // Safe ids are used as they are.
        assert_eq!(
            encode_task_id("550e8400-e29b-41d4").unwrap(),
            "550e8400-e29b-41d4"
        );
        // Ids whose encoding is too long are refused, with the reason.
        let err = encode_task_id(&"/".repeat(48)).unwrap_err();
        assert_eq!(err.kind, SegmentKind::TaskId);
        assert!(matches!(err.problem, SegmentProblem::TooLong(_)));
        assert!(encode_task_id(&"/".repeat(47)).is_ok());
    }

    #[test]
    fn share_groups_never_collide() {
        // ("a_1", "b") and ("a", "1_b") would collide with a plain separator.
        let g1 = Topics::new("a_1").unwrap().share_group("b").unwrap();
        let g2 = Topics::new("a").unwrap().share_group("1_b").unwrap();
        assert_ne!(g1, g2);
        let g3 = Topics::new("a").unwrap().share_group("b").unwrap();
        let g4 = Topics::new("a").unwrap().share_group("c").unwrap();
        assert_ne!(g3, g4);
        assert!(!g1.contains('/') && !g1.contains('+') && !g1.contains('#'));
    }

    #[test]
    fn filter_matching() {
        assert!(filter_matches("a/+/c", "a/b/c"));
        assert!(!filter_matches("a/+/c", "a/b/d"));
        assert!(!filter_matches("a/+", "a/b/c"));
        assert!(filter_matches("a/#", "a/b/c"));
        assert!(filter_matches("a/#", "a"));
        assert!(filter_matches("#", "a/b"));
        assert!(!filter_matches("#", "$SYS/x"));
        assert!(!filter_matches("+/x", "$SYS/x"));
        assert!(filter_matches("$SYS/#", "$SYS/x"));
        assert!(filter_matches("$share/g/a/+", "a/b"));
        assert!(!filter_matches("$share/g/a/+", "g/a/b"));
        assert!(filter_matches("a/b", "a/b"));
        assert!(!filter_matches("a/b", "a/b/c"));
        assert!(!filter_matches("a/b/c", "a/b"));
        assert!(filter_matches("a/+/+", "a//"));
        assert_eq!(strip_share("$share/g/x/y"), "x/y");
        assert_eq!(strip_share("x/y"), "x/y");
    }

    /// The plain reading of the matching rules, level by level: the reference the fast
    /// matcher is checked against.
    fn reference_matches(filter: &str, topic: &str) -> bool {
        let filter = strip_share(filter);
        if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
            return false;
        }
        let mut f = filter.split('/');
        let mut t = topic.split('/');
        loop {
            match (f.next(), t.next()) {
                (Some("#"), _) => return true,
                (Some("+"), Some(_)) => {}
                (Some(fs), Some(ts)) if fs == ts => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    proptest! {
        #[test]
        fn the_response_topic_check_agrees_with_the_parser(
            kind in prop_oneof![Just("gateway/response"), Just("agent/response"), Just("agent/request"), Just("gateway/x")],
            ns in prop_oneof![Just("ns"), Just("other"), Just("n+s")],
            requester in "[a-z+#$~/. ]{0,6}",
            instance in prop_oneof![Just("i1"), Just(""), Just("i/2"), Just("#")],
            agent in prop_oneof![Just("echo"), Just("writer"), Just("ec+ho")],
            task in "[A-Za-z0-9_~/.+-]{0,12}",
        ) {
            let t = Topics::new("ns").unwrap();
            let topic = format!("{ns}/a2a/v1/{kind}/{requester}/{instance}/{agent}/{task}");
            let parsed = matches!(
                t.parse_own(&topic),
                Some(TopicKind::GatewayResponse { agent: "echo", .. } | TopicKind::AgentResponse { agent: "echo", .. })
            );
            prop_assert_eq!(t.is_response_topic_of(&topic, "echo"), parsed, "{}", topic);
        }

        #[test]
        fn the_fast_matcher_agrees_with_the_reference(
            filter in "(\\$share/g/)?[ab+#$/]{0,8}",
            topic in "[ab$/]{0,8}",
        ) {
            prop_assert_eq!(
                filter_matches(&filter, &topic),
                reference_matches(&filter, &topic),
                "filter {:?} topic {:?}", filter, topic
            );
        }

        #[test]
        fn every_matching_topic_starts_with_the_literal_prefix(
            filter in "(\\$share/g/)?[ab+#/]{0,8}",
            topic in "[ab$/]{0,8}",
        ) {
            if filter_matches(&filter, &topic) {
                let prefix = literal_prefix(&filter);
                prop_assert!(topic.starts_with(prefix), "filter {:?} topic {:?} prefix {:?}", filter, topic, prefix);
            }
        }

        #[test]
        fn the_ascii_segment_check_agrees_with_the_character_rule(
            segment in "[\\x00-\\x7f]{1,12}|\\PC{1,6}|[ -~\\u{85}\\u{a0}\\u{2028}\\u{3000}]{1,8}",
        ) {
            let reference = segment.chars().find(|&c| {
                matches!(c, '/' | '+' | '#' | '.' | '*' | '>') || c.is_control() || c.is_whitespace()
            });
            let checked = match check_segment(&segment) {
                Err(SegmentProblem::ForbiddenChar(c)) => Some(c),
                _ => None,
            };
            if !segment.starts_with('$') {
                prop_assert_eq!(checked, reference, "segment {:?}", segment);
            }
        }

        #[test]
        fn task_id_mapping_is_safe_and_reversible(id in any::<String>()) {
            match encode_task_id(&id) {
                Ok(seg) => {
                    prop_assert!(is_safe_segment(&seg), "unsafe segment {seg:?}");
                    prop_assert_eq!(decode_task_id(&seg).unwrap(), id.as_str());
                }
                Err(e) => {
                    prop_assert!(matches!(e.problem, SegmentProblem::TooLong(n) if n > MAX_SEGMENT_LEN));
                    prop_assert!(id.len() > 47);
                }
            }
        }

        #[test]
        fn short_task_ids_always_map(id in "\\PC{0,11}|[ -~]{0,47}") {
            let seg = encode_task_id(&id).unwrap();
            prop_assert!(is_safe_segment(&seg));
            prop_assert_eq!(decode_task_id(&seg).unwrap(), id.as_str());
        }

        #[test]
        fn decoding_is_injective(seg in "~?[A-Za-z0-9_-]{0,20}") {
            if let Ok(id) = decode_task_id(&seg) {
                prop_assert_eq!(encode_task_id(&id).unwrap(), seg.as_str());
            }
        }
    }
}
