//! How the service's answers are shown, the same for the JSON-RPC binding (inside its
//! `result`) and the HTTP+JSON binding (as the body): how much of a task a request asked for
//! ([`task_view`]) and a page of tasks as the codec writes it ([`task_page`]). Both bindings
//! write with the codec of `mesh-core`, so there is one writer of each shape.

use crate::service::TaskList;
use mesh_core::codec::{TaskPage, TaskView};

/// The view of a task that a request's `historyLength` asks for (a negative length keeps no
/// message; none keeps all of them).
pub(crate) fn task_view(history_length: Option<i32>) -> TaskView {
    TaskView::history(history_length.map(|n| usize::try_from(n).unwrap_or(0)))
}

/// A `ListTasks` page: each task with at most the asked `historyLength` of its latest
/// messages, without its artifacts unless asked for.
pub(crate) fn task_page(list: &TaskList) -> TaskPage<'_> {
    TaskPage {
        tasks: list.records.iter().map(|record| &record.task).collect(),
        next_page_token: list.next_page_token.as_deref().unwrap_or_default(),
        page_size: i32::try_from(list.page_size).unwrap_or(i32::MAX),
        total_size: i32::try_from(list.total_size).unwrap_or(i32::MAX),
        view: TaskView {
            artifacts: list.include_artifacts,
            ..task_view(list.history_length)
        },
    }
}
