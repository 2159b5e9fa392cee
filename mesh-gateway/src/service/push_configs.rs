//! The push-notification configs of a task (spec 1.0 §3.1.7–§3.1.10): create (or replace, same
//! id), get, list and delete (idempotent). Configs live on the task's record, at most
//! [`MAX_PUSH_CONFIGS`] a task, and are checked at registration (see [`push`](crate::push)).
//! Each answer names the generation the task was created in, which 0.x bindings answer in.

use super::{A2aService, RequestContext};
use crate::push::{MAX_PUSH_CONFIGS, check_config};
use crate::store::TaskRecord;
use mesh_core::dialect::Dialect;
use mesh_core::error::{A2aError, ErrorKind};
use mesh_core::model::{
    DeleteTaskPushNotificationConfigRequest, GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest, TaskPushNotificationConfig,
};

impl A2aService {
    fn push_enabled(&self) -> Result<(), A2aError> {
        match self.pusher {
            Some(_) => Ok(()),
            None => Err(A2aError::push_notification_not_supported()),
        }
    }

    /// `CreateTaskPushNotificationConfig` (0.x `set`): the config as stored, and the task's
    /// generation.
    pub(crate) async fn set_push_config(
        &self,
        cx: &RequestContext,
        config: TaskPushNotificationConfig,
    ) -> Result<(TaskPushNotificationConfig, Dialect), A2aError> {
        self.push_enabled()?;
        let record = self.find(cx, &config.task_id).await?;
        let field = if cx.dialect == Dialect::V1_0 {
            "params"
        } else {
            "params.pushNotificationConfig"
        };
        check_config(&config, self.allow_private(), field).await?;
        let task_id = config.task_id.clone();
        let mut outcome = Err(A2aError::task_not_found(&task_id));
        let mut config = Some(config);
        self.store()
            .modify(&task_id, &mut |record| {
                if let Some(config) = config.take() {
                    outcome = add(record, config, cx.dialect);
                }
            })
            .await?;
        Ok((outcome?, record.dialect))
    }

    /// `GetTaskPushNotificationConfig`: the config named (a 0.x request naming none gets the
    /// task's first).
    pub(crate) async fn get_push_config(
        &self,
        cx: &RequestContext,
        params: &GetTaskPushNotificationConfigRequest,
    ) -> Result<(TaskPushNotificationConfig, Dialect), A2aError> {
        self.push_enabled()?;
        let record = self.find(cx, &params.task_id).await?;
        let config = pick(&record, &params.id)
            .ok_or_else(|| no_config(cx.dialect, &params.task_id, &params.id))?;
        Ok((config.clone(), record.dialect))
    }

    /// `ListTaskPushNotificationConfigs`: every config of the task (one page: a task has few).
    pub(crate) async fn list_push_configs(
        &self,
        cx: &RequestContext,
        params: &ListTaskPushNotificationConfigsRequest,
    ) -> Result<(Vec<TaskPushNotificationConfig>, Dialect), A2aError> {
        self.push_enabled()?;
        let record = self.find(cx, &params.task_id).await?;
        Ok((record.push_configs.clone(), record.dialect))
    }

    /// `DeleteTaskPushNotificationConfig`: idempotent (spec 1.0 §3.1.10): a config that is not
    /// there (any more) is deleted already.
    pub(crate) async fn delete_push_config(
        &self,
        cx: &RequestContext,
        params: &DeleteTaskPushNotificationConfigRequest,
    ) -> Result<Dialect, A2aError> {
        self.push_enabled()?;
        let record = self.find(cx, &params.task_id).await?;
        if params.id.is_empty() {
            return Err(no_config(cx.dialect, &params.task_id, &params.id));
        }
        if pick(&record, &params.id).is_some() {
            self.store()
                .modify(&params.task_id, &mut |r| {
                    r.push_configs
                        .retain(|c| c.id.as_deref() != Some(params.id.as_str()));
                })
                .await?;
        }
        Ok(record.dialect)
    }
}

/// Adds (or replaces, same id) a checked config on a record; the config as stored.
pub(crate) fn add(
    record: &mut TaskRecord,
    mut config: TaskPushNotificationConfig,
    dialect: Dialect,
) -> Result<TaskPushNotificationConfig, A2aError> {
    config.task_id = record.task.id.clone();
    let id = match config.id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => id.to_owned(),
        // 0.x clients name configs by their task; 1.0 configs get an id of their own.
        None if dialect == Dialect::V1_0 => uuid::Uuid::new_v4().to_string(),
        None => record.task.id.clone(),
    };
    config.id = Some(id.clone());
    let count = record.push_configs.len();
    match record
        .push_configs
        .iter_mut()
        .find(|c| c.id.as_deref() == Some(id.as_str()))
    {
        Some(existing) => *existing = config.clone(),
        None if count >= MAX_PUSH_CONFIGS => {
            return Err(A2aError::invalid_params(format!(
                "task {} already has {MAX_PUSH_CONFIGS} push notification configs; delete one first",
                record.task.id
            )));
        }
        None => record.push_configs.push(config.clone()),
    }
    Ok(config)
}

/// The config of `record` named `config_id`; none named gets the task's own or the first.
fn pick<'a>(record: &'a TaskRecord, config_id: &str) -> Option<&'a TaskPushNotificationConfig> {
    if config_id.is_empty() {
        return record
            .push_configs
            .iter()
            .find(|c| c.id.as_deref() == Some(record.task.id.as_str()))
            .or_else(|| record.push_configs.first());
    }
    record
        .push_configs
        .iter()
        .find(|c| c.id.as_deref() == Some(config_id))
}

/// A config that does not exist: TaskNotFound (spec 1.0 §3.1.8), naming the config.
fn no_config(dialect: Dialect, task_id: &str, config_id: &str) -> A2aError {
    let field = if dialect == Dialect::V1_0 {
        "id"
    } else {
        "pushNotificationConfigId"
    };
    A2aError::new(
        ErrorKind::TaskNotFound,
        format!("task {task_id} has no push notification config {config_id:?}"),
    )
    .with_data(serde_json::json!({ "taskId": task_id, field: config_id }))
}
