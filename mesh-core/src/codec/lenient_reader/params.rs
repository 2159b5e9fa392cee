//! Request params per dialect, read leniently (any spelling); the codec's writer writes them.

use serde_json::{Map, Value};

use super::{Obj, R};
use crate::dialect::{Dialect, Method};
use crate::error::A2aError;
use crate::model::{
    CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest,
    ListTasksRequest, SendMessageConfiguration, SendMessageRequest, SubscribeToTaskRequest,
};
use crate::rpc::Call;

fn params_obj(params: Option<Value>) -> R<Obj> {
    Obj::new(
        params.unwrap_or_else(|| Value::Object(Map::new())),
        "params",
    )
}

/// Reads the params of `method` written in `dialect`.
pub(crate) fn read_call(method: Method, dialect: Dialect, params: Option<Value>) -> R<Call> {
    if method == Method::GetExtendedCard {
        return Ok(Call::GetExtendedCard);
    }
    let mut o = params_obj(params)?;
    Ok(match method {
        Method::SendMessage | Method::SendStreamingMessage => Call::Send(read_send(o, dialect)?),
        Method::GetTask => Call::GetTask(GetTaskRequest {
            id: o.str_req(&["id", "taskId", "task_id"])?,
            history_length: o.i32_opt(&["historyLength", "history_length"])?,
            tenant: o.str_opt(&["tenant"])?,
        }),
        Method::ListTasks => Call::ListTasks(ListTasksRequest {
            context_id: o.str_opt(&["contextId", "context_id", "sessionId", "session_id"])?,
            status: match o.opt(&["status", "state"]) {
                Some((p, v)) => Some(super::read_state(v, &p)?),
                None => None,
            },
            page_size: o.i32_opt(&["pageSize", "page_size"])?,
            page_token: o.str_opt(&["pageToken", "page_token"])?,
            history_length: o.i32_opt(&["historyLength", "history_length"])?,
            status_timestamp_after: match o.opt(&["statusTimestampAfter", "status_timestamp_after"])
            {
                Some((p, v)) => Some(super::read_timestamp(v, &p)?),
                None => None,
            },
            include_artifacts: o.bool_opt(&["includeArtifacts", "include_artifacts"])?,
            tenant: o.str_opt(&["tenant"])?,
        }),
        Method::CancelTask => Call::CancelTask(CancelTaskRequest {
            id: o.str_req(&["id", "taskId", "task_id"])?,
            metadata: o.metadata_verbatim()?,
            tenant: o.str_opt(&["tenant"])?,
        }),
        Method::SubscribeToTask => Call::Subscribe(SubscribeToTaskRequest {
            id: o.str_req(&["id", "taskId", "task_id"])?,
            tenant: o.str_opt(&["tenant"])?,
        }),
        Method::SetPushConfig => {
            let v = Value::Object(std::mem::take(o.map_mut()));
            let cfg = super::read_push_config(v, "params")?;
            if cfg.task_id.is_empty() {
                return Err(A2aError::invalid_params_at("params.taskId", "missing"));
            }
            Call::SetPushConfig(cfg)
        }
        Method::GetPushConfig => {
            let (task_id, id) = task_and_config(&mut o, dialect, false)?;
            Call::GetPushConfig(GetTaskPushNotificationConfigRequest {
                task_id,
                id,
                tenant: o.str_opt(&["tenant"])?,
            })
        }
        Method::DeletePushConfig => {
            let (task_id, id) = task_and_config(&mut o, dialect, true)?;
            Call::DeletePushConfig(DeleteTaskPushNotificationConfigRequest {
                task_id,
                id,
                tenant: o.str_opt(&["tenant"])?,
            })
        }
        Method::ListPushConfigs => {
            let task_id = if dialect == Dialect::V1_0 {
                o.str_req(&["taskId", "task_id", "id"])?
            } else {
                o.str_req(&["id", "taskId", "task_id"])?
            };
            Call::ListPushConfigs(ListTaskPushNotificationConfigsRequest {
                task_id,
                page_size: o.i32_opt(&["pageSize", "page_size"])?,
                page_token: o.str_opt(&["pageToken", "page_token"])?,
                tenant: o.str_opt(&["tenant"])?,
            })
        }
        Method::GetExtendedCard => Call::GetExtendedCard,
    })
}

/// (task id, config id): 1.0 `{taskId, id}`; 0.x `{id, pushNotificationConfigId}` (a
/// missing config id reads as `""` unless `require_config`).
fn task_and_config(o: &mut Obj, dialect: Dialect, require_config: bool) -> R<(String, String)> {
    if dialect == Dialect::V1_0 {
        let task_id = o.str_req(&["taskId", "task_id"])?;
        let id = o.str_req(&[
            "id",
            "pushNotificationConfigId",
            "push_notification_config_id",
        ])?;
        return Ok((task_id, id));
    }
    let task_id = o.str_req(&["id", "taskId", "task_id"])?;
    let names = &[
        "pushNotificationConfigId",
        "push_notification_config_id",
        "configId",
    ];
    let id = if require_config {
        o.str_req(names)?
    } else {
        o.str_opt(names)?.unwrap_or_default()
    };
    Ok((task_id, id))
}

fn read_send(mut o: Obj, dialect: Dialect) -> R<SendMessageRequest> {
    let (mp, mv) = o.req(&["message"])?;
    let mut message = super::read_message(mv, &mp, dialect != Dialect::V0_1)?;
    // 0.1 (and mixed 0.1 payloads): task and session ids at params level.
    let task_id = o.str_opt(&["id", "taskId", "task_id"])?;
    let session = o.str_opt(&["sessionId", "session_id", "contextId", "context_id"])?;
    if message.task_id.is_none() {
        message.task_id = task_id;
    }
    if message.context_id.is_none() {
        message.context_id = session;
    }
    let mut cfg = SendMessageConfiguration {
        accepted_output_modes: None,
        task_push_notification_config: None,
        history_length: None,
        return_immediately: None,
    };
    if let Some((cp, cv)) = o.opt(&["configuration", "config"]) {
        let mut c = Obj::new(cv, &cp)?;
        read_config_fields(&mut c, &mut cfg)?;
    }
    // 0.1 puts these at params level.
    read_config_fields(&mut o, &mut cfg)?;
    if let Some((pp, pv)) = o.opt(&["pushNotification", "push_notification"]) {
        cfg.task_push_notification_config = Some(super::read_push_config(pv, &pp)?);
    }
    let configuration = (cfg.accepted_output_modes.is_some()
        || cfg.task_push_notification_config.is_some()
        || cfg.history_length.is_some()
        || cfg.return_immediately.is_some())
    .then_some(cfg);
    Ok(SendMessageRequest {
        message,
        configuration,
        metadata: o.metadata_verbatim()?,
        tenant: o.str_opt(&["tenant"])?,
    })
}

fn read_config_fields(c: &mut Obj, cfg: &mut SendMessageConfiguration) -> R<()> {
    if let Some(m) = c.strings_opt(&["acceptedOutputModes", "accepted_output_modes"])? {
        cfg.accepted_output_modes = Some(m);
    }
    if let Some(h) = c.i32_opt(&["historyLength", "history_length"])? {
        cfg.history_length = Some(h);
    }
    if let Some(b) = c.bool_opt(&["blocking"])? {
        cfg.return_immediately = Some(!b);
    }
    if let Some(r) = c.bool_opt(&["returnImmediately", "return_immediately"])? {
        cfg.return_immediately = Some(r);
    }
    if let Some((p, v)) = c.opt(&[
        "pushNotificationConfig",
        "push_notification_config",
        "taskPushNotificationConfig",
        "task_push_notification_config",
    ]) {
        cfg.task_push_notification_config = Some(super::read_push_config(v, &p)?);
    }
    Ok(())
}
