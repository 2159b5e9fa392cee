//! How the service's answers are written as JSON, the same for the JSON-RPC binding (inside
//! its `result`) and the HTTP+JSON binding (as the body): both use the codec of `mesh-core`,
//! so there is one writer of each shape.

use crate::service::TaskList;
use mesh_core::codec;
use mesh_core::dialect::Dialect;
use mesh_core::model::Task;
use serde_json::{Map, Value};

/// A `historyLength` as the codec takes it (a negative length keeps nothing).
pub(crate) fn history_tail(history_length: Option<i32>) -> Option<usize> {
    history_length.map(|n| usize::try_from(n).unwrap_or(0))
}

/// A `ListTasks` result in `dialect`: each task with at most `history_length` of its latest
/// messages, without its artifacts unless asked for.
pub(crate) fn task_list(dialect: Dialect, list: TaskList) -> Value {
    let tasks: Vec<Value> = list
        .records
        .iter()
        .map(|record| {
            let mut task = task_value(&record.task, dialect, list.history_length);
            if !list.include_artifacts
                && let Some(o) = task.as_object_mut()
            {
                o.remove("artifacts");
            }
            task
        })
        .collect();
    let mut result = Map::new();
    result.insert("tasks".into(), Value::Array(tasks));
    result.insert(
        "nextPageToken".into(),
        list.next_page_token.unwrap_or_default().into(),
    );
    result.insert("pageSize".into(), list.page_size.into());
    result.insert("totalSize".into(), list.total_size.into());
    Value::Object(result)
}

/// A task in `dialect` with at most `history_length` of its latest messages.
fn task_value(task: &Task, dialect: Dialect, history_length: Option<i32>) -> Value {
    let mut value = codec::write_task(task, dialect);
    if let (Some(keep), Some(Value::Array(history))) = (
        history_tail(history_length),
        value.as_object_mut().and_then(|o| o.get_mut("history")),
    ) && history.len() > keep
    {
        history.drain(..history.len() - keep);
    }
    value
}
