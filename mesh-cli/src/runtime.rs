//! The async runtimes the commands run on: one for a command's process, and for `mesh up`
//! one per part, each on a thread of its own ([`on_own_thread`]: the broker, the gateway),
//! or a part started on another's ([`on_thread_of`]: the agents on the embedded broker's),
//! so that the parts of one process schedule their work as separate processes would, or
//! share a thread where that saves a request a crossing.

use crate::exit::Failure;
use std::future::Future;
use tokio::sync::oneshot;

/// A runtime of `workers` worker threads (0: one per core). One worker is tokio's
/// current-thread scheduler: everything runs on the thread that drives the runtime (see
/// `Settings::runtime_threads` for why that is the default of the parts).
pub fn build(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match workers {
        0 => tokio::runtime::Builder::new_multi_thread(),
        1 => tokio::runtime::Builder::new_current_thread(),
        threads => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(threads);
            builder
        }
    };
    builder.enable_all().build()
}

/// A part running on a thread and runtime of its own ([`on_own_thread`]), or on another
/// part's ([`on_thread_of`]); [`OwnThread::stop`] shuts it down and waits until it has.
pub struct OwnThread<I> {
    /// What the part said of itself once started (its address, its names).
    pub info: I,
    stop: oneshot::Sender<()>,
    stopped: oneshot::Receiver<()>,
    /// The part's runtime, where [`on_thread_of`] starts its guests.
    runtime: tokio::runtime::Handle,
}

impl<I> OwnThread<I> {
    /// Asks the part to shut down and waits until it has and its runtime is gone.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.stopped.await;
    }
}

/// Starts a part on a new thread named `mesh-<name>` with a runtime of `workers` workers:
/// `start` runs there and returns the part and what to say of it; once [`OwnThread::stop`]
/// is called (or the handle is dropped), `shut_down` runs there too. Resolves when the part
/// is up, or with the failure that kept it from starting.
pub async fn on_own_thread<I, P, Start, Started, ShutDown, Down>(
    name: &str,
    workers: usize,
    start: Start,
    shut_down: ShutDown,
) -> Result<OwnThread<I>, Failure>
where
    I: Send + 'static,
    Start: FnOnce() -> Started + Send + 'static,
    Started: Future<Output = Result<(I, P), Failure>>,
    ShutDown: FnOnce(P) -> Down + Send + 'static,
    Down: Future<Output = ()>,
{
    let (ready_tx, ready_rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (stopped_tx, stopped_rx) = oneshot::channel();
    let runtime = build(workers)
        .map_err(|e| Failure::Other(format!("cannot start the {name}'s async runtime: {e}")))?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name(format!("mesh-{name}"))
        .spawn(move || {
            runtime.block_on(run_part(start, shut_down, ready_tx, stop_rx));
            drop(runtime);
            let _ = stopped_tx.send(());
        })
        .map_err(|e| Failure::Other(format!("cannot start the {name}'s thread: {e}")))?;
    started(name, handle, ready_rx, stop_tx, stopped_rx).await
}

/// Starts a part on the runtime, and so the thread(s), of `host`, as [`on_own_thread`]
/// starts one on a thread of its own. The host is stopped after its guests: stopping the
/// host first drops a guest unannounced.
pub async fn on_thread_of<H, I, P, Start, Started, ShutDown, Down>(
    host: &OwnThread<H>,
    name: &str,
    start: Start,
    shut_down: ShutDown,
) -> Result<OwnThread<I>, Failure>
where
    I: Send + 'static,
    P: Send + 'static,
    Start: FnOnce() -> Started + Send + 'static,
    Started: Future<Output = Result<(I, P), Failure>> + Send + 'static,
    ShutDown: FnOnce(P) -> Down + Send + 'static,
    Down: Future<Output = ()> + Send + 'static,
{
    let (ready_tx, ready_rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (stopped_tx, stopped_rx) = oneshot::channel();
    let handle = host.runtime.clone();
    handle.spawn(async move {
        run_part(start, shut_down, ready_tx, stop_rx).await;
        let _ = stopped_tx.send(());
    });
    started(name, handle, ready_rx, stop_tx, stopped_rx).await
}

/// A part's life on its runtime: started, then (once asked to stop, or once its handle is
/// dropped) shut down.
async fn run_part<I, P, Started, Down>(
    start: impl FnOnce() -> Started,
    shut_down: impl FnOnce(P) -> Down,
    ready: oneshot::Sender<Result<I, Failure>>,
    stop: oneshot::Receiver<()>,
) where
    Started: Future<Output = Result<(I, P), Failure>>,
    Down: Future<Output = ()>,
{
    match start().await {
        Ok((info, part)) => {
            if ready.send(Ok(info)).is_ok() {
                // Sent, or the handle dropped: either way the part goes.
                let _ = stop.await;
            }
            shut_down(part).await;
        }
        Err(failure) => {
            let _ = ready.send(Err(failure));
        }
    }
}

/// Waits until the part `name` is up (or failed to start) and gives its handle.
async fn started<I>(
    name: &str,
    runtime: tokio::runtime::Handle,
    ready: oneshot::Receiver<Result<I, Failure>>,
    stop: oneshot::Sender<()>,
    stopped: oneshot::Receiver<()>,
) -> Result<OwnThread<I>, Failure> {
    match ready.await {
        Ok(Ok(info)) => Ok(OwnThread {
            info,
            stop,
            stopped,
            runtime,
        }),
        Ok(Err(failure)) => Err(failure),
        Err(_) => Err(Failure::Other(format!(
            "the {name}'s thread ended before it started"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn a_part_runs_on_its_own_thread_until_stopped() {
        let down = Arc::new(AtomicBool::new(false));
        let seen = down.clone();
        let part = on_own_thread(
            "probe",
            1,
            || async { Ok((std::thread::current().name().map(str::to_owned), 7)) },
            move |value: i32| async move {
                assert_eq!(value, 7);
                seen.store(true, Ordering::SeqCst);
            },
        )
        .await
        .unwrap();
        assert_eq!(part.info.as_deref(), Some("mesh-probe"));
        assert!(!down.load(Ordering::SeqCst));
        part.stop().await;
        assert!(
            down.load(Ordering::SeqCst),
            "shut down before stop returned"
        );
    }

    #[tokio::test]
    async fn a_guest_runs_on_its_hosts_thread_and_stops_there() {
        let host = on_own_thread("host", 1, || async { Ok(((), ())) }, |()| async {})
            .await
            .unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let seen = down.clone();
        let guest = on_thread_of(
            &host,
            "guest",
            || async { Ok((std::thread::current().name().map(str::to_owned), 7)) },
            move |value: i32| async move {
                assert_eq!(value, 7);
                let thread = std::thread::current().name().map(str::to_owned);
                seen.store(thread.as_deref() == Some("mesh-host"), Ordering::SeqCst);
            },
        )
        .await
        .unwrap();
        assert_eq!(guest.info.as_deref(), Some("mesh-host"));
        guest.stop().await;
        assert!(
            down.load(Ordering::SeqCst),
            "shut down on the host's thread before stop returned"
        );
        let failed = on_thread_of(
            &host,
            "guest",
            || async { Err::<((), ()), _>(Failure::Usage("no".into())) },
            |()| async {},
        )
        .await;
        assert!(matches!(failed, Err(Failure::Usage(why)) if why == "no"));
        host.stop().await;
    }

    #[tokio::test]
    async fn a_part_that_fails_to_start_says_why() {
        let failed = on_own_thread(
            "probe",
            1,
            || async { Err::<((), ()), _>(Failure::Usage("no".into())) },
            |()| async {},
        )
        .await;
        assert!(matches!(failed, Err(Failure::Usage(why)) if why == "no"));
    }
}
