//! Mosquitto's ACL file, read by the embedded broker and written by `mesh secure`: which
//! topics each account may publish to (write) and subscribe to (read).
//!
//! ```text
//! # lines before any `user` line are the anonymous clients' (none, when anonymous clients
//! # are refused)
//! user echo
//! topic read mesh/a2a/v1/agent/request/echo/+
//! topic write mesh/a2a/v1/gateway/response/+/+/echo/+
//! topic readwrite mesh/a2a/v1/discovery/presence/echo/+
//! topic deny mesh/a2a/v1/secret/#
//! # for every client: %u is the user name, %c the client id
//! pattern read mesh/a2a/v1/agent/response/%u/#
//! ```
//!
//! As in Mosquitto: what is not granted is denied; a `deny` line wins over any grant; a
//! publish is allowed when a `write` (or `readwrite`) filter matches its topic; a subscription
//! is allowed when every topic it can match is readable, i.e. some `read` filter contains it
//! (`a/+` allows subscribing to `a/+` and `a/b`, not to `a/#`). A `$share/<group>/` prefix is
//! checked without it (the broker strips it before asking). A pattern is skipped for a client
//! whose user name or client id contains `+`, `#` or `/`.

use std::borrow::Cow;
use std::collections::HashMap;

/// What a line grants (or denies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    ReadWrite,
    Deny,
}

impl Access {
    fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }

    fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

#[derive(Debug, Clone)]
struct Rule {
    access: Access,
    filter: String,
}

/// The rules of an ACL file.
#[derive(Debug, Clone, Default)]
pub struct Acl {
    anonymous: Vec<Rule>,
    users: HashMap<String, Vec<Rule>>,
    patterns: Vec<Rule>,
}

/// The most levels an ACL filter or a checked topic may have (deeper ones never match).
const MAX_LEVELS: usize = 64;

impl Acl {
    /// Reads an ACL file's text. Blank lines and lines starting with `#` are skipped. An error
    /// names the line.
    pub fn parse(text: &str) -> Result<Acl, String> {
        let mut acl = Acl::default();
        let mut user: Option<String> = None;
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (keyword, rest) = line.split_once([' ', '\t']).unwrap_or((line, ""));
            let rest = rest.trim();
            match keyword {
                "user" => {
                    if rest.is_empty() {
                        return Err(format!("line {number}: `user` without a name"));
                    }
                    acl.users.entry(rest.to_owned()).or_default();
                    user = Some(rest.to_owned());
                }
                "topic" | "pattern" => {
                    let rule = parse_rule(rest).map_err(|e| format!("line {number}: {e}"))?;
                    match (keyword, &user) {
                        ("pattern", _) => acl.patterns.push(rule),
                        (_, Some(user)) => acl.users.entry(user.clone()).or_default().push(rule),
                        (_, None) => acl.anonymous.push(rule),
                    }
                }
                other => {
                    return Err(format!(
                        "line {number}: unknown keyword {other:?} (user, topic or pattern)"
                    ));
                }
            }
        }
        Ok(acl)
    }

    /// Whether a client (`user`: its user name, `None` when anonymous) may publish to
    /// `topic`.
    pub fn may_publish(&self, user: Option<&str>, client_id: &str, topic: &str) -> bool {
        self.decide(user, client_id, |rule, filter| {
            (rule.access == Access::Deny || rule.access.writes()) && matches(filter, topic)
        })
    }

    /// Whether a client may subscribe to `filter` (without any `$share/<group>/` prefix).
    pub fn may_subscribe(&self, user: Option<&str>, client_id: &str, filter: &str) -> bool {
        self.decide(user, client_id, |rule, acl_filter| match rule.access {
            // A deny line refuses any subscription that could receive one of its topics.
            Access::Deny => overlaps(acl_filter, filter),
            access => access.reads() && contains(acl_filter, filter),
        })
    }

    /// Runs `applies` over the client's rules (its own, or the anonymous ones, then the
    /// patterns with their substitutions): denied when a deny line applies, else allowed
    /// when a grant does.
    fn decide(
        &self,
        user: Option<&str>,
        client_id: &str,
        applies: impl Fn(&Rule, &str) -> bool,
    ) -> bool {
        let own = match user {
            Some(user) => self.users.get(user).map_or(&[][..], Vec::as_slice),
            None => &self.anonymous,
        };
        let substitutable = |s: &str| !s.contains(['+', '#', '/']);
        // On every publish: an account's own filters are borrowed; only patterns that name
        // the user or the client are written out.
        let patterns = self.patterns.iter().filter_map(|rule| {
            let mut filter = Cow::Borrowed(rule.filter.as_str());
            if filter.contains("%u") {
                let user = user.filter(|u| substitutable(u))?;
                filter = Cow::Owned(filter.replace("%u", user));
            }
            if filter.contains("%c") {
                if !substitutable(client_id) {
                    return None;
                }
                filter = Cow::Owned(filter.replace("%c", client_id));
            }
            Some((rule, filter))
        });
        let rules = own
            .iter()
            .map(|rule| (rule, Cow::Borrowed(rule.filter.as_str())))
            .chain(patterns);
        let mut granted = false;
        for (rule, filter) in rules {
            if applies(rule, &filter) {
                if rule.access == Access::Deny {
                    return false;
                }
                granted = true;
            }
        }
        granted
    }
}

fn parse_rule(rest: &str) -> Result<Rule, String> {
    let (access, filter) = match rest.split_once([' ', '\t']) {
        Some((word, filter)) => match word {
            "read" => (Access::Read, filter.trim()),
            "write" => (Access::Write, filter.trim()),
            "readwrite" => (Access::ReadWrite, filter.trim()),
            "deny" => (Access::Deny, filter.trim()),
            // Mosquitto: without an access word, the whole rest is the topic, read and write.
            _ => (Access::ReadWrite, rest),
        },
        None => (Access::ReadWrite, rest),
    };
    if filter.is_empty() {
        return Err("a topic line without a topic".to_owned());
    }
    if !valid_filter(filter) {
        return Err(format!("{filter:?} is not a valid topic filter"));
    }
    Ok(Rule {
        access,
        filter: filter.to_owned(),
    })
}

/// A valid MQTT filter: `+` and `#` only as whole levels, `#` last, at most [`MAX_LEVELS`].
fn valid_filter(filter: &str) -> bool {
    let levels: Vec<&str> = filter.split('/').collect();
    levels.len() <= MAX_LEVELS
        && levels.iter().enumerate().all(|(i, level)| {
            !level.contains(['+', '#']) || *level == "+" || (*level == "#" && i == levels.len() - 1)
        })
}

/// Whether `filter` matches the topic name `topic` (MQTT's rules, `$` topics only by filters
/// that start with the same literal level).
fn matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && filter.starts_with(['+', '#']) {
        return false;
    }
    let mut f = filter.split('/');
    let mut t = topic.split('/');
    loop {
        match (f.next(), t.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(level), Some(topic_level)) if level == topic_level => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether every topic the subscription filter `sub` matches is also matched by `acl`.
fn contains(acl: &str, sub: &str) -> bool {
    if sub.starts_with('$') && acl.starts_with(['+', '#']) {
        return false;
    }
    let mut a = acl.split('/');
    let mut s = sub.split('/');
    loop {
        match (a.next(), s.next()) {
            (Some("#"), _) => return true,
            // `a/#` also matches `a`, which `a/+` does not.
            (_, Some("#")) => return false,
            (Some("+"), Some(_)) => {}
            (Some(level), Some(sub_level)) if level == sub_level => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether some topic is matched by both filters.
fn overlaps(a: &str, b: &str) -> bool {
    let mut a = a.split('/');
    let mut b = b.split('/');
    loop {
        match (a.next(), b.next()) {
            (Some("#"), _) | (_, Some("#")) => return true,
            (Some("+"), Some(_)) | (Some(_), Some("+")) => {}
            (Some(x), Some(y)) if x == y => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# anonymous: nothing but this
topic read public/#

user echo
topic read ns/a2a/v1/agent/request/echo/+
topic write ns/a2a/v1/gateway/response/+/+/echo/+
topic readwrite ns/a2a/v1/discovery/presence/echo/+
topic read ns/a2a/v1/discovery/#
topic deny ns/a2a/v1/discovery/secret/#

user gateway
topic ns/a2a/v1/gateway/response/gateway/#

pattern read box/%u/#
pattern write out/%c
";

    fn acl() -> Acl {
        Acl::parse(FILE).unwrap()
    }

    #[test]
    fn each_user_publishes_only_where_granted() {
        let acl = acl();
        let echo = Some("echo");
        assert!(acl.may_publish(echo, "c", "ns/a2a/v1/gateway/response/gw/i1/echo/t1"));
        assert!(!acl.may_publish(echo, "c", "ns/a2a/v1/gateway/response/gw/i1/writer/t1"));
        assert!(!acl.may_publish(echo, "c", "ns/a2a/v1/agent/request/echo/t1"));
        assert!(acl.may_publish(echo, "c", "ns/a2a/v1/discovery/presence/echo/i1"));
        assert!(!acl.may_publish(echo, "c", "ns/a2a/v1/discovery/presence/writer/i1"));
        assert!(!acl.may_publish(echo, "c", "ns/a2a/v1/discovery/agentcards/writer"));
        // No access word: read and write.
        assert!(acl.may_publish(Some("gateway"), "c", "ns/a2a/v1/gateway/response/gateway/x"));
        assert!(!acl.may_publish(Some("nobody"), "c", "public/x"));
        assert!(!acl.may_publish(None, "c", "public/x"));
    }

    #[test]
    fn a_subscription_must_fit_inside_a_read_grant() {
        let acl = acl();
        let echo = Some("echo");
        assert!(acl.may_subscribe(echo, "c", "ns/a2a/v1/agent/request/echo/+"));
        assert!(acl.may_subscribe(echo, "c", "ns/a2a/v1/agent/request/echo/t1"));
        assert!(!acl.may_subscribe(echo, "c", "ns/a2a/v1/agent/request/echo/#"));
        assert!(!acl.may_subscribe(echo, "c", "ns/a2a/v1/agent/request/+/+"));
        assert!(!acl.may_subscribe(echo, "c", "ns/a2a/v1/gateway/response/#"));
        assert!(!acl.may_subscribe(echo, "c", "#"));
        // Inside a grant, but it could receive topics of the deny line.
        assert!(!acl.may_subscribe(echo, "c", "ns/a2a/v1/discovery/#"));
        assert!(acl.may_subscribe(echo, "c", "ns/a2a/v1/discovery/agentcards/+"));
        assert!(!acl.may_subscribe(echo, "c", "ns/a2a/v1/discovery/secret/x"));
        // Write-only is not read.
        assert!(!acl.may_subscribe(echo, "c", "ns/a2a/v1/gateway/response/+/+/echo/+"));
        assert!(acl.may_subscribe(None, "c", "public/a/b"));
        assert!(!acl.may_subscribe(None, "c", "$SYS/#"));
    }

    #[test]
    fn patterns_substitute_the_user_and_the_client_id() {
        let acl = acl();
        assert!(acl.may_subscribe(Some("ann"), "c1", "box/ann/#"));
        assert!(!acl.may_subscribe(Some("ann"), "c1", "box/bob/#"));
        assert!(!acl.may_subscribe(None, "c1", "box//#"));
        assert!(acl.may_publish(Some("ann"), "c1", "out/c1"));
        assert!(!acl.may_publish(Some("ann"), "c1", "out/c2"));
        // A user name with a wildcard or a separator gets no pattern.
        assert!(!acl.may_subscribe(Some("+"), "c1", "box/+/#"));
        assert!(!acl.may_subscribe(Some("a/b"), "c1", "box/a/b/x"));
        assert!(!acl.may_publish(Some("ann"), "#", "out/#"));
    }

    #[test]
    fn malformed_lines_are_refused_with_their_number() {
        for (text, says) in [
            ("user", "line 1"),
            ("\nfrobnicate x", "line 2"),
            ("topic read a/#/b", "not a valid topic filter"),
            ("topic read a/b+", "not a valid topic filter"),
            ("topic", "without a topic"),
        ] {
            let error = Acl::parse(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn filter_relations() {
        assert!(matches("a/+/c", "a/b/c"));
        assert!(matches("a/#", "a"));
        assert!(!matches("+/x", "$SYS/x"));
        assert!(contains("a/#", "a/+/c"));
        assert!(contains("a/+", "a/b"));
        assert!(!contains("a/+", "a/#"));
        assert!(!contains("a/b", "a/+"));
        assert!(overlaps("a/+", "+/b"));
        assert!(!overlaps("a/b", "a/c"));
    }
}
