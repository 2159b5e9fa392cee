//! The glue between [`Access`] and rmqtt's hooks: authentication at CONNECT, the ACL at
//! PUBLISH and SUBSCRIBE.

use super::Access;
use async_trait::async_trait;
use rmqtt::codec::v5::SubscribeAckReason;
use rmqtt::hook::{Handler, HookResult, Parameter, ReturnType};
use rmqtt::types::{AuthResult, LastWill, PublishAclResult, SubscribeAclResult};
use std::sync::Arc;

/// Applies an [`Access`] to every CONNECT, PUBLISH and SUBSCRIBE.
pub(crate) struct AccessHook {
    access: Arc<Access>,
}

impl AccessHook {
    pub(crate) fn new(access: Arc<Access>) -> AccessHook {
        AccessHook { access }
    }
}

/// The topic of a last will, whatever the protocol version.
fn will_topic<'a>(will: &LastWill<'a>) -> &'a str {
    match will {
        LastWill::V3(will) => &will.topic,
        LastWill::V5(will) => &will.topic,
    }
}

#[async_trait]
impl Handler for AccessHook {
    async fn hook(&self, param: &Parameter, acc: Option<HookResult>) -> ReturnType {
        match param {
            Parameter::ClientAuthenticate(connect) => {
                let client_id: &str = connect.client_id();
                let result = match (connect.username(), connect.password()) {
                    (None, _) => {
                        tracing::warn!(client = %client_id, "refused an anonymous client");
                        AuthResult::NotAuthorized
                    }
                    (Some(user), password)
                        if !self
                            .access
                            .authenticate(user, password.map_or(&[][..], |p| &p[..])) =>
                    {
                        tracing::warn!(client = %client_id, %user,
                            "refused a client: unknown user or wrong password");
                        AuthResult::BadUsernameOrPassword
                    }
                    (Some(user), _) => match connect.last_will() {
                        Some(will)
                            if !self.access.acl().may_publish(
                                Some(user),
                                client_id,
                                will_topic(&will),
                            ) =>
                        {
                            tracing::warn!(client = %client_id, %user, topic = will_topic(&will),
                                "refused a client whose last will is on a topic it may not publish to");
                            AuthResult::NotAuthorized
                        }
                        _ => AuthResult::Allow(false, None),
                    },
                };
                (false, Some(HookResult::AuthResult(result)))
            }
            Parameter::MessagePublishCheckAcl(session, publish) => {
                let user = session.id.username.as_deref();
                if self
                    .access
                    .acl()
                    .may_publish(user, &session.id.client_id, &publish.topic)
                {
                    return (true, acc);
                }
                tracing::warn!(client = %session.id.client_id, user = user.unwrap_or(""),
                    topic = %publish.topic, "refused a publish the ACL does not allow");
                let refused = PublishAclResult::rejected(false, None);
                (false, Some(HookResult::PublishAclResult(refused)))
            }
            Parameter::ClientSubscribeCheckAcl(session, subscribe) => {
                let user = session.id.username.as_deref();
                if self.access.acl().may_subscribe(
                    user,
                    &session.id.client_id,
                    &subscribe.topic_filter,
                ) {
                    return (true, acc);
                }
                tracing::warn!(client = %session.id.client_id, user = user.unwrap_or(""),
                    filter = %subscribe.topic_filter, "refused a subscription the ACL does not allow");
                let refused = SubscribeAclResult::new_failure(SubscribeAckReason::NotAuthorized);
                (false, Some(HookResult::SubscribeAclResult(refused)))
            }
            _ => (true, acc),
        }
    }
}
