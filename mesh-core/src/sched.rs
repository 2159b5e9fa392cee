//! The CPU scheduling policy of a mesh process (Linux), set at its start or following the
//! load of the cores.
//!
//! An agent spends its life waiting on the bus: the broker's write of each request wakes it.
//! Under Linux's default policy the woken agent preempts whatever runs on the core it lands
//! on (the broker mid-way through its batch of deliveries, the gateway mid-request), handles
//! the one request that woke it, writes its answer and sleeps again: a context switch for it
//! and one for the process it preempted, a read and a write, per request. Under
//! `SCHED_BATCH` a woken thread does not preempt (sched(7): "for workloads that want a
//! deterministic scheduling policy without interactivity causing extra preemptions"): it runs
//! on an idle core at once, or when the running process blocks or its slice ends, and then
//! reads every request that arrived meanwhile in one go. Its share of the CPU is the same
//! (the nice value is untouched); only its wake-ups change.
//!
//! That pays while the cores are busy and costs while they are not: a lone request then
//! waits the few microseconds until the process that woke the agent sleeps. So an agent
//! follows the load ([`follow_load`]): batch while the cores are nearly all busy, the default
//! policy once they idle again, decided from the whole machine's idle time (`/proc/stat`)
//! with a gap between the two thresholds so that it does not flap. docs/benchmarks.md has
//! the measurements: on 2 cores at concurrency 64 the echo agent's CPU a request halved and
//! the mesh served a quarter more requests a second; at concurrency 1 batch alone added
//! about 10 µs (5 %) to the round trip.

use std::io;
use std::time::Duration;

/// How the kernel schedules a process's threads when they wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedPolicy {
    /// `SCHED_OTHER`: a woken thread may preempt the one running (the kernel's default).
    Normal,
    /// `SCHED_BATCH`: a woken thread waits for an idle core, or for the running thread to
    /// block or use up its slice.
    Batch,
}

impl SchedPolicy {
    /// The name the command line and the config file use.
    pub fn name(self) -> &'static str {
        match self {
            SchedPolicy::Normal => "normal",
            SchedPolicy::Batch => "batch",
        }
    }
}

/// Puts the calling thread in `policy`; the threads it starts afterwards inherit it, so call
/// it before the async runtime starts its threads. Its nice value stays as it is. Neither
/// policy needs a privilege; a sandbox that forbids the call (a seccomp profile) gives the
/// error, and the process runs on as it was. Elsewhere than on Linux, `Normal` is what there
/// is and `Batch` is [`io::ErrorKind::Unsupported`].
pub fn apply(policy: SchedPolicy) -> io::Result<()> {
    imp::apply(policy)
}

/// How often [`follow_load`] reads the cores' idle time.
pub const LOAD_PERIOD: Duration = Duration::from_millis(100);

/// Below this share of idle time over a period the cores count as busy: batch.
const BUSY_BELOW: f64 = 0.20;
/// Above this share they count as idle again: the default policy.
const IDLE_ABOVE: f64 = 0.35;

/// The choice of [`follow_load`], without its I/O: the policy for each period's idle share,
/// when it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadFollower {
    current: SchedPolicy,
}

impl LoadFollower {
    /// Starts in `current`, the policy the process has.
    pub fn new(current: SchedPolicy) -> LoadFollower {
        LoadFollower { current }
    }

    /// The policy to move to after a period whose cores were idle `idle` of the time (0 to
    /// 1), or `None` to stay.
    pub fn next(&mut self, idle: f64) -> Option<SchedPolicy> {
        let wanted = match self.current {
            SchedPolicy::Normal if idle < BUSY_BELOW => SchedPolicy::Batch,
            SchedPolicy::Batch if idle > IDLE_ABOVE => SchedPolicy::Normal,
            same => same,
        };
        (wanted != self.current).then(|| {
            self.current = wanted;
            wanted
        })
    }
}

/// The cores' time as `/proc/stat`'s first line counts it (clock ticks): idle (with waiting
/// for I/O) and in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    pub idle: u64,
    pub total: u64,
}

impl CpuTimes {
    /// Reads the `cpu ` line of `/proc/stat` (its first, whole: what follows its newline is
    /// not read): user, nice, system, idle, iowait, irq, softirq, steal (guest time is inside
    /// user already); `None` if it is not that.
    pub fn parse(stat: &str) -> Option<CpuTimes> {
        let (line, _) = stat.split_once('\n')?;
        let line = line.strip_prefix("cpu ")?;
        let mut fields = line.split_ascii_whitespace().map(|f| f.parse::<u64>().ok());
        let mut times = [0u64; 8];
        for (i, slot) in times.iter_mut().enumerate() {
            *slot = match fields.next() {
                Some(Some(value)) => value,
                // Old kernels stop after idle or iowait; a garbled field is not a reading.
                None if i >= 4 => 0,
                _ => return None,
            };
        }
        Some(CpuTimes {
            idle: times[3].saturating_add(times[4]),
            total: times.iter().fold(0u64, |sum, t| sum.saturating_add(*t)),
        })
    }

    /// The idle share of the time between `earlier` and `self`; `None` when no time passed.
    pub fn idle_since(self, earlier: CpuTimes) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total).filter(|&t| t > 0)?;
        let idle = self.idle.saturating_sub(earlier.idle).min(total);
        Some(idle as f64 / total as f64)
    }
}

/// Follows the cores' load for as long as it is polled: every [`LOAD_PERIOD`] it reads
/// `/proc/stat` and moves every thread of this process to batch when the cores were busy,
/// back to the default policy when they idled ([`LoadFollower`]). Returns (at once) where
/// there is no `/proc/stat` or the policy cannot be set, saying why: the process keeps the
/// policy it has. Elsewhere than on Linux it returns at once.
pub async fn follow_load() -> io::Result<()> {
    if !cfg!(target_os = "linux") {
        return Ok(());
    }
    // The first line only, into a buffer of its own: the rest of the file (a line per core,
    // every interrupt's count) grows with the machine.
    let mut buffer = [0u8; 512];
    let mut read = || -> io::Result<CpuTimes> {
        use std::io::Read;
        let filled = std::fs::File::open("/proc/stat")?.read(&mut buffer)?;
        std::str::from_utf8(&buffer[..filled])
            .ok()
            .and_then(CpuTimes::parse)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable /proc/stat"))
    };
    let mut earlier = read()?;
    // From a known start, whatever policy the process was started in.
    imp::apply_to_process(SchedPolicy::Normal)?;
    let mut follower = LoadFollower::new(SchedPolicy::Normal);
    let mut ticks = tokio::time::interval(LOAD_PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let now = read()?;
        let Some(idle) = now.idle_since(earlier) else {
            continue;
        };
        earlier = now;
        if let Some(policy) = follower.next(idle) {
            imp::apply_to_process(policy)?;
            tracing::debug!(policy = policy.name(), idle, "CPU scheduling policy");
        }
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::SchedPolicy;
    use std::io;

    /// Puts thread `tid` (0: the calling one) in `policy`.
    fn set(tid: libc::pid_t, policy: SchedPolicy) -> io::Result<()> {
        let code = match policy {
            SchedPolicy::Normal => libc::SCHED_OTHER,
            SchedPolicy::Batch => libc::SCHED_BATCH,
        };
        // Both policies take a static priority of 0 (sched(7)).
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid `sched_param` that outlives the call, which only reads
        // it; `tid` is 0 (the calling thread) or a thread id.
        match unsafe { libc::sched_setscheduler(tid, code, &param) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    pub(super) fn apply(policy: SchedPolicy) -> io::Result<()> {
        set(0, policy)
    }

    /// Every thread of this process (those of /proc/self/task as listed; a thread that
    /// ended meanwhile is skipped).
    pub(super) fn apply_to_process(policy: SchedPolicy) -> io::Result<()> {
        for task in std::fs::read_dir("/proc/self/task")? {
            let Some(tid) = task?
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<libc::pid_t>().ok())
            else {
                continue;
            };
            match set(tid, policy) {
                Err(e) if e.raw_os_error() != Some(libc::ESRCH) => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::SchedPolicy;
    use std::io;

    pub(super) fn apply(policy: SchedPolicy) -> io::Result<()> {
        match policy {
            SchedPolicy::Normal => Ok(()),
            SchedPolicy::Batch => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "SCHED_BATCH is Linux's: this system schedules the agent as any other process",
            )),
        }
    }

    pub(super) fn apply_to_process(policy: SchedPolicy) -> io::Result<()> {
        apply(policy)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The policy of the calling thread, as /proc tells it (field 41 of its stat line).
    fn policy_of_this_thread() -> u32 {
        let tid = std::fs::read_link("/proc/thread-self")
            .expect("/proc/thread-self")
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.parse::<u32>().ok())
            .expect("a thread id");
        let pid = std::process::id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
        // The fields after the command name, which ends with the line's last ')'.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        // Field 3 (state) is the first after the name; policy is field 41.
        after.split(' ').nth(41 - 3).unwrap().parse().unwrap()
    }

    #[test]
    fn a_thread_moves_to_batch_and_back_and_its_children_inherit_it() {
        std::thread::spawn(|| {
            apply(SchedPolicy::Batch).unwrap();
            assert_eq!(policy_of_this_thread(), libc::SCHED_BATCH as u32);
            let child = std::thread::spawn(policy_of_this_thread).join().unwrap();
            assert_eq!(
                child,
                libc::SCHED_BATCH as u32,
                "a thread started after inherits"
            );
            apply(SchedPolicy::Normal).unwrap();
            assert_eq!(policy_of_this_thread(), libc::SCHED_OTHER as u32);
        })
        .join()
        .unwrap();
    }
}

#[cfg(test)]
mod load_tests {
    use super::*;

    #[test]
    fn busy_cores_move_to_batch_and_idle_ones_back_without_flapping_between() {
        let mut follower = LoadFollower::new(SchedPolicy::Normal);
        assert_eq!(follower.next(0.43), None, "a lone request's idle cores");
        assert_eq!(follower.next(0.25), None, "between the thresholds: stay");
        assert_eq!(follower.next(0.06), Some(SchedPolicy::Batch));
        assert_eq!(follower.next(0.02), None);
        assert_eq!(
            follower.next(0.30),
            None,
            "between the thresholds: stay batch"
        );
        assert_eq!(follower.next(0.50), Some(SchedPolicy::Normal));
        assert_eq!(follower.next(0.50), None);
    }

    #[test]
    fn proc_stat_reads_into_idle_and_total_and_garbage_into_none() {
        let stat = "cpu  100 5 50 800 20 3 2 10 7 0\ncpu0 50 2 25 400 10 1 1 5 3 0\n";
        let times = CpuTimes::parse(stat).unwrap();
        assert_eq!(
            times,
            CpuTimes {
                idle: 820,
                total: 990
            }
        );
        let later = CpuTimes {
            idle: 880,
            total: 1_190,
        };
        assert_eq!(later.idle_since(times), Some(0.3));
        assert_eq!(times.idle_since(times), None, "no time passed");
        assert_eq!(times.idle_since(later), None, "a counter that went back");
        // A kernel that stops after idle.
        assert_eq!(
            CpuTimes::parse("cpu 1 2 3 4\n"),
            Some(CpuTimes { idle: 4, total: 10 })
        );
        // A line cut short (by the reader's buffer) is no reading either.
        for bad in [
            "",
            "cpu0 1 2 3 4\n",
            "cpu 1 2 x 4\n",
            "cpu 1 2\n",
            "intr 5\n",
            "cpu 1 2 3 4",
        ] {
            assert_eq!(CpuTimes::parse(bad), None, "{bad:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_has_a_proc_stat_it_can_read() {
        let stat = std::fs::read_to_string("/proc/stat").unwrap();
        let times = CpuTimes::parse(&stat).unwrap();
        assert!(times.total >= times.idle && times.total > 0, "{times:?}");
    }
}
