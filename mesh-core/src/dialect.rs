//! Protocol generations ("dialects") and the A2A methods, with the JSON-RPC method names
//! each dialect uses.
//!
//! [`resolve_method`] maps a JSON-RPC method name to its [`Method`] and [`Dialect`];
//! [`method_name`] is the reverse (used when writing a request in a given dialect).
//! Names shared by 0.1 and 0.3 (`tasks/get`, `tasks/cancel`, `tasks/resubscribe`,
//! `tasks/list`) resolve to [`Dialect::V0_3`] with [`MethodInfo::shared`] set: the caller
//! answers those in the dialect that created the task.

use std::fmt;

/// A protocol generation, as seen on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// A2A 0.1 (`tasks/send`, parts tagged `type`, `sessionId`).
    V0_1,
    /// A2A 0.2–0.3 (`message/send`, `kind` tags, lowercase states).
    V0_3,
    /// A2A 1.0 (PascalCase methods, `ROLE_*`/`TASK_STATE_*`, flat parts, wrapped results).
    V1_0,
}

impl Dialect {
    /// All dialects, oldest first.
    pub const ALL: [Dialect; 3] = [Dialect::V0_1, Dialect::V0_3, Dialect::V1_0];

    /// The protocol version string (`"0.1.0"`, `"0.3.0"`, `"1.0"`).
    pub fn version(self) -> &'static str {
        match self {
            Dialect::V0_1 => "0.1.0",
            Dialect::V0_3 => "0.3.0",
            Dialect::V1_0 => "1.0",
        }
    }

    /// The dialect for an `A2A-Version` / `protocolVersion` string (`"0.3"`, `"0.3.0"`,
    /// `"1.0"`, `"1.0.1"`, ...), if known. 0.2.x is read as 0.3.
    pub fn from_version(version: &str) -> Option<Dialect> {
        let v = version.trim();
        if v == "0.1" || v.starts_with("0.1.") {
            Some(Dialect::V0_1)
        } else if v == "0.2" || v == "0.3" || v.starts_with("0.2.") || v.starts_with("0.3.") {
            Some(Dialect::V0_3)
        } else if v == "1" || v == "1.0" || v.starts_with("1.0.") {
            Some(Dialect::V1_0)
        } else {
            None
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.version())
    }
}

/// An A2A operation, whatever the dialect calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Send a message, answer with a task or a message.
    SendMessage,
    /// Send a message, answer with a stream of events.
    SendStreamingMessage,
    /// Read a task.
    GetTask,
    /// List tasks.
    ListTasks,
    /// Cancel a task.
    CancelTask,
    /// Re-attach to a task's event stream.
    SubscribeToTask,
    /// Create (set) a push-notification config.
    SetPushConfig,
    /// Read a push-notification config.
    GetPushConfig,
    /// List a task's push-notification configs.
    ListPushConfigs,
    /// Delete a push-notification config.
    DeletePushConfig,
    /// Read the extended (authenticated) agent card.
    GetExtendedCard,
}

impl Method {
    /// All methods.
    pub const ALL: [Method; 11] = [
        Method::SendMessage,
        Method::SendStreamingMessage,
        Method::GetTask,
        Method::ListTasks,
        Method::CancelTask,
        Method::SubscribeToTask,
        Method::SetPushConfig,
        Method::GetPushConfig,
        Method::ListPushConfigs,
        Method::DeletePushConfig,
        Method::GetExtendedCard,
    ];

    /// Whether the method answers with a stream of events.
    pub fn is_streaming(self) -> bool {
        matches!(self, Method::SendStreamingMessage | Method::SubscribeToTask)
    }
}

/// What a JSON-RPC method name tells: the method, the dialect, and whether the name is
/// shared by 0.1 and 0.3 (then `dialect` is [`Dialect::V0_3`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MethodInfo {
    /// The operation.
    pub method: Method,
    /// The dialect the name belongs to (V0_3 for shared names).
    pub dialect: Dialect,
    /// True for names both 0.1 and 0.3 use.
    pub shared: bool,
}

/// Maps a JSON-RPC method name to its method and dialect; `None` if unknown.
pub fn resolve_method(name: &str) -> Option<MethodInfo> {
    use Dialect::*;
    use Method::*;
    let (method, dialect, shared) = match name {
        // 0.1 (and the seeds' 0.1-era additions)
        "tasks/send" => (SendMessage, V0_1, false),
        "tasks/sendSubscribe" | "tasks/send-streaming" => (SendStreamingMessage, V0_1, false),
        "tasks/pushNotification/set" => (SetPushConfig, V0_1, false),
        "tasks/pushNotification/get" => (GetPushConfig, V0_1, false),
        "tasks/pushNotification/list" => (ListPushConfigs, V0_1, false),
        "tasks/pushNotification/delete" => (DeletePushConfig, V0_1, false),
        // shared by 0.1 and 0.3
        "tasks/get" => (GetTask, V0_3, true),
        "tasks/cancel" => (CancelTask, V0_3, true),
        "tasks/resubscribe" => (SubscribeToTask, V0_3, true),
        "tasks/list" => (ListTasks, V0_3, true),
        // 0.3
        "message/send" => (SendMessage, V0_3, false),
        "message/stream" => (SendStreamingMessage, V0_3, false),
        "tasks/pushNotificationConfig/set" => (SetPushConfig, V0_3, false),
        "tasks/pushNotificationConfig/get" => (GetPushConfig, V0_3, false),
        "tasks/pushNotificationConfig/list" => (ListPushConfigs, V0_3, false),
        "tasks/pushNotificationConfig/delete" => (DeletePushConfig, V0_3, false),
        "agent/getAuthenticatedExtendedCard" => (GetExtendedCard, V0_3, false),
        // 1.0
        "SendMessage" => (SendMessage, V1_0, false),
        "SendStreamingMessage" => (SendStreamingMessage, V1_0, false),
        "GetTask" => (GetTask, V1_0, false),
        "ListTasks" => (ListTasks, V1_0, false),
        "CancelTask" => (CancelTask, V1_0, false),
        "SubscribeToTask" => (SubscribeToTask, V1_0, false),
        "CreateTaskPushNotificationConfig" => (SetPushConfig, V1_0, false),
        "GetTaskPushNotificationConfig" => (GetPushConfig, V1_0, false),
        "ListTaskPushNotificationConfigs" => (ListPushConfigs, V1_0, false),
        "DeleteTaskPushNotificationConfig" => (DeletePushConfig, V1_0, false),
        "GetExtendedAgentCard" => (GetExtendedCard, V1_0, false),
        _ => return None,
    };
    Some(MethodInfo {
        method,
        dialect,
        shared,
    })
}

/// The JSON-RPC method name for `method` in `dialect`.
///
/// 0.1 writes `tasks/sendSubscribe` for streaming and, having no extended-card method,
/// falls back to the 0.3 name `agent/getAuthenticatedExtendedCard`.
pub fn method_name(method: Method, dialect: Dialect) -> &'static str {
    use Dialect::*;
    use Method::*;
    match (dialect, method) {
        (V0_1, SendMessage) => "tasks/send",
        (V0_1, SendStreamingMessage) => "tasks/sendSubscribe",
        (V0_1, SetPushConfig) => "tasks/pushNotification/set",
        (V0_1, GetPushConfig) => "tasks/pushNotification/get",
        (V0_1, ListPushConfigs) => "tasks/pushNotification/list",
        (V0_1, DeletePushConfig) => "tasks/pushNotification/delete",
        (V0_1 | V0_3, GetTask) => "tasks/get",
        (V0_1 | V0_3, CancelTask) => "tasks/cancel",
        (V0_1 | V0_3, SubscribeToTask) => "tasks/resubscribe",
        (V0_1 | V0_3, ListTasks) => "tasks/list",
        (V0_1 | V0_3, GetExtendedCard) => "agent/getAuthenticatedExtendedCard",
        (V0_3, SendMessage) => "message/send",
        (V0_3, SendStreamingMessage) => "message/stream",
        (V0_3, SetPushConfig) => "tasks/pushNotificationConfig/set",
        (V0_3, GetPushConfig) => "tasks/pushNotificationConfig/get",
        (V0_3, ListPushConfigs) => "tasks/pushNotificationConfig/list",
        (V0_3, DeletePushConfig) => "tasks/pushNotificationConfig/delete",
        (V1_0, SendMessage) => "SendMessage",
        (V1_0, SendStreamingMessage) => "SendStreamingMessage",
        (V1_0, GetTask) => "GetTask",
        (V1_0, ListTasks) => "ListTasks",
        (V1_0, CancelTask) => "CancelTask",
        (V1_0, SubscribeToTask) => "SubscribeToTask",
        (V1_0, SetPushConfig) => "CreateTaskPushNotificationConfig",
        (V1_0, GetPushConfig) => "GetTaskPushNotificationConfig",
        (V1_0, ListPushConfigs) => "ListTaskPushNotificationConfigs",
        (V1_0, DeletePushConfig) => "DeleteTaskPushNotificationConfig",
        (V1_0, GetExtendedCard) => "GetExtendedAgentCard",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in Dialect::ALL {
            for m in Method::ALL {
                let name = method_name(m, d);
                let info = resolve_method(name).expect("known name");
                assert_eq!(info.method, m, "{name}");
                if !(d == Dialect::V0_1 && m == Method::GetExtendedCard) {
                    let same = info.dialect == d || (info.shared && d == Dialect::V0_1);
                    assert!(same, "{name} in {d:?}");
                }
            }
        }
    }

    #[test]
    fn shared_and_aliases() {
        let i = resolve_method("tasks/get").expect("known");
        assert!(i.shared);
        assert_eq!(i.dialect, Dialect::V0_3);
        let i = resolve_method("tasks/send-streaming").expect("known");
        assert_eq!(
            (i.method, i.dialect),
            (Method::SendStreamingMessage, Dialect::V0_1)
        );
        assert!(resolve_method("tasks/sendx").is_none());
        assert!(!resolve_method("message/send").expect("known").shared);
    }

    #[test]
    fn versions() {
        assert_eq!(Dialect::from_version("0.3.0"), Some(Dialect::V0_3));
        assert_eq!(Dialect::from_version("0.2.5"), Some(Dialect::V0_3));
        assert_eq!(Dialect::from_version("1.0.1"), Some(Dialect::V1_0));
        assert_eq!(Dialect::from_version("0.1"), Some(Dialect::V0_1));
        assert_eq!(Dialect::from_version("2.0"), None);
    }
}
