//! `GetTask`, `ListTasks`, `CancelTask` and `SubscribeToTask`: answered from the task store,
//! except a cancel of a running task, which asks its agent on the bus first.

use super::{A2aService, RequestContext, TaskEvents};
use crate::bridge::{LiveEvent, Seq, set_status};
use crate::store::EVENT_LOG_EVENTS;
use crate::store::{StoreError, TaskQuery, TaskRecord};
use mesh_core::dialect::Dialect;
use mesh_core::error::A2aError;
use mesh_core::model::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, SubscribeToTaskRequest, TaskState,
    TaskStatus,
};
use mesh_core::rpc::Reply;
use std::sync::Arc;

/// The default and largest page of `ListTasks`.
pub(crate) const DEFAULT_PAGE_SIZE: usize = 50;
/// See [`DEFAULT_PAGE_SIZE`].
pub(crate) const MAX_PAGE_SIZE: usize = 100;

/// One page of `ListTasks`.
pub(crate) struct TaskList {
    /// The tasks of the page, newest first.
    pub records: Vec<Arc<TaskRecord>>,
    /// The token of the next page; `None` on the last one.
    pub next_page_token: Option<String>,
    /// The page size used.
    pub page_size: usize,
    /// How many tasks match in all.
    pub total_size: usize,
    /// Whether the tasks keep their artifacts (the request's `includeArtifacts`; 0.x
    /// listings always do).
    pub include_artifacts: bool,
    /// How many of each task's latest messages to keep, when limited.
    pub history_length: Option<i32>,
}

impl A2aService {
    /// `GetTask`: the stored task (the caller trims its history to `historyLength`).
    pub(crate) async fn get_task(
        &self,
        cx: &RequestContext,
        params: &GetTaskRequest,
    ) -> Result<Arc<TaskRecord>, A2aError> {
        self.find(cx, &params.id).await
    }

    /// `ListTasks`: a page of the agent's tasks the caller may see.
    pub(crate) async fn list_tasks(
        &self,
        cx: &RequestContext,
        params: ListTasksRequest,
    ) -> Result<TaskList, A2aError> {
        let page_size = match params.page_size {
            None | Some(0) => DEFAULT_PAGE_SIZE,
            Some(n) if n < 0 || n as usize > MAX_PAGE_SIZE => {
                return Err(A2aError::invalid_params_at(
                    "pageSize",
                    format!("must be between 1 and {MAX_PAGE_SIZE}"),
                ));
            }
            Some(n) => n as usize,
        };
        let query = TaskQuery {
            agent: Some(cx.agent.clone()),
            context_id: params.context_id.filter(|c| !c.is_empty()),
            state: params.status.filter(|s| *s != TaskState::Unspecified),
            owner: self.owner_filter(cx.principal()),
            page_size,
            page_token: params.page_token,
        };
        let page = match self.store().list(&query).await {
            Ok(page) => page,
            Err(e @ StoreError::InvalidPageToken(_)) => {
                return Err(A2aError::invalid_params_at("pageToken", e));
            }
            Err(e) => return Err(e.into()),
        };
        Ok(TaskList {
            records: page.records,
            next_page_token: page.next_page_token,
            page_size,
            total_size: page.total_size,
            include_artifacts: params
                .include_artifacts
                .unwrap_or(cx.dialect != Dialect::V1_0),
            history_length: params.history_length,
        })
    }

    /// `CancelTask`: a task waiting at the gateway is canceled here; a running one is asked
    /// of its agent, and canceled here when no instance answers in time.
    pub(crate) async fn cancel_task(
        &self,
        cx: &RequestContext,
        params: CancelTaskRequest,
    ) -> Result<Arc<TaskRecord>, A2aError> {
        let record = self.find(cx, &params.id).await?;
        if record.task.status.state.is_terminal() {
            return Err(A2aError::task_not_cancelable(&params.id));
        }
        let live = self.bridge.live(&params.id);
        // Submitted or working without a pump here: another gateway sharing the store
        // bridges it, and its agent is asked as when it runs here.
        let elsewhere = live.is_none()
            && self.store().shared()
            && matches!(
                record.task.status.state,
                TaskState::Submitted | TaskState::Working
            );
        if live.is_none() && !elsewhere {
            // No instance runs it (it waits for input at the gateway): cancel it here.
            return self.cancel_here(&params.id).await;
        }
        let asked = if self.bus.is_connected() {
            self.requester
                .cancel(&cx.agent, &params.id, self.settings.cancel_wait)
                .await
        } else {
            Ok(None)
        };
        match asked {
            Ok(Some(Ok(mut task))) => {
                mesh_core::meta::MeshMeta::take(&mut task.metadata);
                let updated = self
                    .store()
                    .modify(&params.id, &mut |r| {
                        if !r.task.status.state.is_terminal() {
                            set_status(&mut r.task, task.status.clone());
                        }
                    })
                    .await?;
                match updated {
                    Some(record) => {
                        self.bridge.notify_push(&record);
                        Ok(record)
                    }
                    None => Ok(Arc::new(TaskRecord::new(task, &cx.agent, record.dialect))),
                }
            }
            Ok(Some(Err(e))) => Err(e),
            // No instance answered in time (or the bus is down): the gateway cancels it itself.
            Ok(None) | Err(_) => match live {
                Some(live) => self
                    .bridge
                    .cancel_locally(&params.id, &live)
                    .ok_or_else(|| A2aError::task_not_found(&params.id)),
                None => self.cancel_here(&params.id).await,
            },
        }
    }

    /// Cancels a task no instance runs (or none answered for) in the store.
    async fn cancel_here(&self, id: &str) -> Result<Arc<TaskRecord>, A2aError> {
        let canceled = self
            .store()
            .modify(id, &mut |r| {
                if !r.task.status.state.is_terminal() {
                    set_status(
                        &mut r.task,
                        TaskStatus {
                            state: TaskState::Canceled,
                            message: None,
                            timestamp: Some(chrono::Utc::now()),
                        },
                    );
                }
            })
            .await?;
        match canceled {
            Some(record) => {
                self.bridge.notify_push(&record);
                self.bridge.release_waiting(&record);
                Ok(record)
            }
            None => Err(A2aError::task_not_found(id)),
        }
    }

    /// `SubscribeToTask`: the task now, then its events until it reaches a terminal state
    /// (across interrupted states: spec 1.0 §3.1.6). The record is the one subscribed to.
    ///
    /// `resume_after` (a client's `Last-Event-ID`) resumes a stream it lost: instead of the
    /// task, the events after that sequence number as the task's log has them, then the live
    /// ones, each once and in order; a task that ended meanwhile is resumed too, to its
    /// final event. When the log no longer holds them all (it keeps a task's latest events),
    /// the task as it stands takes their place.
    pub(crate) async fn subscribe(
        &self,
        cx: &RequestContext,
        params: SubscribeToTaskRequest,
        resume_after: Option<Seq>,
    ) -> Result<(Arc<TaskRecord>, TaskEvents), A2aError> {
        let record = self.find(cx, &params.id).await?;
        let terminal = record.task.status.state.is_terminal();
        let shared = self.store().shared();
        // A client that saw more events than the log holds (a gateway that died streamed
        // them before it wrote them, and another ended the task) is resumed to the task as
        // it stands, with a shared store: the follower hands it out.
        let diverged = |after: Seq| after > record.seq && shared;
        if terminal && resume_after.is_none_or(|after| after >= record.seq && !diverged(after)) {
            return Err(A2aError::unsupported_operation(format!(
                "task {} is {}: there is nothing to subscribe to",
                params.id,
                mesh_core::model::state_name(&record.task.status.state)
            )));
        }
        // Another gateway sharing the store may bridge it: follow its log.
        if !self.bridge.is_live(&params.id)
            && let Some(changes) = self.store().changes()
        {
            let after = resume_after.unwrap_or(record.seq);
            let first = match resume_after {
                None => vec![(record.seq, Ok(Arc::new(Reply::Task(record.task.clone()))))],
                Some(_) => Vec::new(),
            };
            let live = super::follow::follow(
                self.store().clone(),
                changes,
                params.id.clone(),
                after,
                resume_after.is_some(),
                self.shutdown.clone(),
            );
            let mut events = self.events(params.id, first, Some(live), true);
            events.resumed = resume_after.is_some();
            return Ok((record, events));
        }
        let Some((snapshot, live)) = self.bridge.attach(&params.id, true, Some(&record))? else {
            return Err(A2aError::task_not_found(&params.id));
        };
        let task = || -> (Seq, LiveEvent) {
            (
                snapshot.seq,
                Ok(Arc::new(Reply::Task(snapshot.task.clone()))),
            )
        };
        let first = match resume_after {
            None => vec![task()],
            Some(after) if after >= snapshot.seq => Vec::new(),
            Some(after) => {
                let missed = usize::try_from(snapshot.seq - after).unwrap_or(usize::MAX);
                let logged = self
                    .store()
                    .events_after(&params.id, after, missed.min(EVENT_LOG_EVENTS))
                    .await;
                match logged {
                    Ok(events)
                        if events.first().map(|e| e.seq) == Some(after + 1)
                            && events.last().map(|e| e.seq) >= Some(snapshot.seq) =>
                    {
                        events
                            .into_iter()
                            .take_while(|e| e.seq <= snapshot.seq)
                            .map(|e| (e.seq, e.reply().map(Arc::new).map_err(Arc::new)))
                            .collect()
                    }
                    // Forgotten (or not logged whole): the task as it stands.
                    _ => vec![task()],
                }
            }
        };
        let mut events = self.events(params.id, first, live, true);
        events.resumed = resume_after.is_some();
        Ok((record, events))
    }
}
