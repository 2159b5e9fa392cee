//! Memory: the resident set (`VmRSS` of `/proc/<pid>/status`) of an idle `mesh agent echo`,
//! of an idle `mesh gateway`, and of the gateway holding the stored tasks of 100,000
//! `message/send` requests (sent by wrk; the store keeps 100,000 by default).

use std::fmt;

/// A resident set size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rss {
    pub kib: u64,
}

impl Rss {
    /// In mebibytes.
    pub fn mib(self) -> f64 {
        self.kib as f64 / 1024.0
    }
}

impl fmt::Display for Rss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} MiB", self.mib())
    }
}

/// The RSS of `proc`, or why not.
pub fn of(proc: &crate::procs::Proc) -> Result<Rss, String> {
    proc.rss_kib()
        .map(|kib| Rss { kib })
        .ok_or_else(|| format!("cannot read /proc/{}/status", proc.pid()))
}
