//! How the durable stores write a task's times, counts and push configs in their columns
//! (one encoding for SQLite and PostgreSQL), and what every store's page tokens say.

use super::{StoreError, TaskRecord};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A time as milliseconds since the Unix epoch (0 before it).
pub(super) fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The time [`millis`] wrote.
pub(super) fn from_millis(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

/// A count as a signed 64-bit integer column (saturating).
pub(super) fn sql_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A record's push configs as their column holds them: none is NULL.
pub(super) fn push_json(record: &TaskRecord) -> Option<String> {
    (!record.push_configs.is_empty())
        .then(|| serde_json::to_string(&record.push_configs).unwrap_or_default())
}

/// Where a listing's page starts: the offset a page token carries (none or empty: 0).
pub(super) fn page_offset(token: Option<&str>) -> Result<usize, StoreError> {
    match token {
        None | Some("") => Ok(0),
        Some(token) => token
            .parse::<usize>()
            .map_err(|_| StoreError::InvalidPageToken(token.to_owned())),
    }
}
