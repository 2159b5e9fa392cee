//! Topics reserved to the broker: a client may not publish to a topic that starts with `$`
//! (MQTT 3.1.1, section 4.7.2: such topics are the server's, as `$SYS/…` is).
//!
//! A refused publish is acknowledged and dropped (MQTT 3.1.1 has no way to say no to a
//! publish short of closing the connection, and closing it would make a client that sends it
//! again after every reconnect loop), and logged.

use async_trait::async_trait;
use rmqtt::hook::{Handler, HookResult, Parameter, ReturnType};
use rmqtt::types::PublishAclResult;

/// Refuses client publishes to topics that start with `$`.
pub(crate) struct ReservedTopics;

#[async_trait]
impl Handler for ReservedTopics {
    async fn hook(&self, param: &Parameter, acc: Option<HookResult>) -> ReturnType {
        if let Parameter::MessagePublishCheckAcl(session, publish) = param
            && publish.topic.starts_with('$')
        {
            tracing::warn!(client = %session.id.client_id, topic = %publish.topic,
                    "refused a client publish to a topic reserved to the broker");
            let refused = PublishAclResult::rejected(false, None);
            return (false, Some(HookResult::PublishAclResult(refused)));
        }
        (true, acc)
    }
}
