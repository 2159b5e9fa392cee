//! The gateway's three task stores side by side, in one run through one broker: a gateway
//! process per store (`--memory-store`; SQLite in a fresh `--data-dir`; PostgreSQL with
//! `--store` on a fresh database of the server at `--postgres`, dropped at the end), each in
//! turn with the same echo and writer agents, measured the same way:
//!
//! - JSON-RPC `message/send` → echo at concurrency 64 (wrk, as [`crate::e2e`]), with the
//!   gateway's CPU per answer;
//! - resuming: a `message/stream` of [`REPLAY_CHUNKS`] chunks from the writer read to its
//!   end, then `tasks/resubscribe` with `Last-Event-ID` set to the stream's first event id,
//!   timed from the request to the last event; every id the first stream carried after that
//!   one must come back once and in order (see [`crate::resume`]); not on the memory store,
//!   which drops a task's event log when the task ends;
//! - the gateway's RSS when ready, and after it has answered `stored_tasks` sends in all;
//! - the RSS of a gateway restarted on that full store (the same data directory and
//!   database), once ready.
//!
//! The durable stores keep in memory only the tasks the gateway bridges (its working set),
//! so their RSS should not grow with the tasks, nor a restarted gateway's with the store.

use crate::e2e::{self, Load, LoadResult};
use crate::memory::{self, Rss};
use crate::procs::{self, BrokerKind, BrokerProc, Store};
use crate::resume::{self, Replay};
use crate::suite::{Figure, Plan};
use crate::{discovery, log};
use std::time::Duration;
use tokio_postgres::NoTls;

/// The chunks of the stream whose missed events a resubscription replays.
pub const REPLAY_CHUNKS: usize = 1_000;

/// Why the memory store has no replay figure.
const MEMORY_KEEPS_NO_LOG: &str = "not measured: the memory store drops a task's event log when \
    the task ends (mesh-gateway's store/memory.rs), so a resubscription to a finished task gets \
    the final task only";

/// Why the memory store has no restart figure.
const MEMORY_KEEPS_NOTHING: &str = "not measured: the memory store keeps nothing across a restart";

/// The chunks of the stream a second gateway follows (one every `follow::PACE_MS`).
pub const FOLLOW_CHUNKS: usize = 200;

/// Why a store of one gateway has no follow figure.
const ONE_GATEWAY: &str = "not measured: a store of one gateway: a subscriber on another \
    gateway cannot see its tasks";

/// How long creating or dropping the database may take.
const DATABASE_WAIT: Duration = Duration::from_secs(20);

/// The longest the gateway may take to answer the sends that fill its store.
const FILL_BOUND: Duration = Duration::from_secs(300);

/// Which task store a gateway runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Sqlite,
    Postgres,
}

impl StoreKind {
    /// Every store, in the table's order.
    pub const ALL: [StoreKind; 3] = [StoreKind::Memory, StoreKind::Sqlite, StoreKind::Postgres];

    /// The column heading.
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "SQLite",
            StoreKind::Postgres => "PostgreSQL",
        }
    }
}

/// What one store's gateway measured.
#[derive(Debug, Clone)]
pub struct StoreFigures {
    pub kind: StoreKind,
    /// JSON-RPC `message/send` → echo at concurrency 64, with the gateway's CPU.
    pub c64: Figure<LoadResult>,
    /// `tasks/resubscribe` replaying the missed events of a finished stream.
    pub replay: Figure<Replay>,
    /// The gateway's RSS once ready.
    pub idle: Figure<Rss>,
    /// The gateway's RSS after the sends that filled its store, and how many it answered.
    pub full: Figure<(Rss, u64)>,
    /// The RSS of a gateway restarted on that full store, once ready.
    pub restarted: Figure<Rss>,
    /// A shared store: an event's delay to a subscriber on a second gateway.
    pub follow: Figure<crate::follow::FollowDelay>,
}

impl StoreFigures {
    fn failed(kind: StoreKind, why: String) -> StoreFigures {
        StoreFigures {
            kind,
            c64: Err(why.clone()),
            replay: Err(why.clone()),
            idle: Err(why.clone()),
            full: Err(why.clone()),
            restarted: Err(why.clone()),
            follow: Err(why),
        }
    }
}

/// The stores' run.
#[derive(Debug, Clone)]
pub struct StoresRun {
    pub broker: BrokerKind,
    pub stores: Vec<StoreFigures>,
}

/// Runs each store's cases through a fresh broker of `kind`.
pub async fn run(kind: BrokerKind, plan: &Plan) -> StoresRun {
    let failed = |why: String| StoresRun {
        broker: kind,
        stores: StoreKind::ALL
            .iter()
            .map(|&s| StoreFigures::failed(s, why.clone()))
            .collect(),
    };
    let broker = match BrokerProc::start(kind, &plan.dir, &plan.mesh) {
        Ok(b) => b,
        Err(e) => return failed(e),
    };
    let http = match reqwest::Client::builder().no_proxy().build() {
        Ok(h) => h,
        Err(e) => return failed(e.to_string()),
    };
    let ns = format!("stores{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let url = broker.url();
    // The agents answer whichever gateway asks: they stay up across the stores.
    let agents =
        ["echo", "writer"].map(|name| procs::spawn_agent(&plan.dir, &plan.mesh, name, &url, &ns));
    let _agents = match agents {
        [Ok(echo), Ok(writer)] => (echo, writer),
        [Err(e), _] | [_, Err(e)] => return failed(e),
    };
    let mut stores = Vec::new();
    for store in StoreKind::ALL {
        log(&format!("[stores, {}] {}", kind.label(), store.label()));
        let figures = match store {
            StoreKind::Memory => one_store(plan, &http, &broker, &ns, store, Store::Memory).await,
            StoreKind::Sqlite => one_store(plan, &http, &broker, &ns, store, Store::Durable).await,
            StoreKind::Postgres => match Database::create(&plan.postgres).await {
                Err(e) => StoreFigures::failed(store, e),
                Ok(db) => {
                    let shared = Store::Shared {
                        url: db.url.clone(),
                    };
                    let figures = one_store(plan, &http, &broker, &ns, store, shared).await;
                    db.drop_now().await;
                    figures
                }
            },
        };
        stores.push(figures);
    }
    StoresRun {
        broker: kind,
        stores,
    }
}

/// One store's cases through a gateway of its own (killed on return).
async fn one_store(
    plan: &Plan,
    http: &reqwest::Client,
    broker: &BrokerProc,
    ns: &str,
    kind: StoreKind,
    store: Store,
) -> StoreFigures {
    let shared_url = match &store {
        Store::Shared { url } => Some(url.clone()),
        _ => None,
    };
    let (gateway, base) =
        match procs::start_gateway(&plan.dir, &plan.mesh, &broker.url(), ns, store, http).await {
            Ok(g) => g,
            Err(e) => return StoreFigures::failed(kind, e),
        };
    for agent in ["echo", "writer"] {
        if discovery::wait_listed(http, &base, agent, true, Duration::from_secs(10))
            .await
            .is_none()
        {
            return StoreFigures::failed(
                kind,
                format!("the {agent} agent was not listed within 10 s"),
            );
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = memory::of(&gateway);
    let label = kind.label();

    let load = Load::jsonrpc("echo");
    let mut sent = 0u64;
    log(&format!(
        "[stores, {label}] JSON-RPC message/send, concurrency 64"
    ));
    let c64 = crate::suite::with_cpu(&gateway, || {
        wrk_case(plan, &base, &load, &mut sent, plan.case, None)
    });

    log(&format!(
        "[stores, {label}] tasks/resubscribe after a stream of {REPLAY_CHUNKS} chunks"
    ));
    let replay = if kind == StoreKind::Memory {
        Err(MEMORY_KEEPS_NO_LOG.to_owned())
    } else {
        let replay = resume::run(http, &base, REPLAY_CHUNKS, Duration::from_secs(60)).await;
        sent += 1;
        replay
    };

    let follow = match shared_url.clone() {
        Some(url) => {
            log(&format!(
                "[stores, {label}] a {FOLLOW_CHUNKS}-chunk stream followed through a second gateway"
            ));
            let shared = Store::Shared { url };
            match procs::start_gateway(&plan.dir, &plan.mesh, &broker.url(), ns, shared, http).await
            {
                Ok((_second, second)) => {
                    crate::follow::run(http, &base, &second, FOLLOW_CHUNKS, Duration::from_secs(60))
                        .await
                }
                Err(e) => Err(e),
            }
        }
        None => Err(ONE_GATEWAY.to_owned()),
    };

    log(&format!(
        "[stores, {label}] filling the store to {} tasks",
        plan.stored_tasks
    ));
    let missing = plan.stored_tasks.saturating_sub(sent);
    let fill = if missing > 0 {
        wrk_case(plan, &base, &load, &mut sent, FILL_BOUND, Some(missing)).and_then(|r| {
            if r.errors > 0 {
                Err(format!(
                    "{} of the sends filling the store failed",
                    r.errors
                ))
            } else {
                Ok(())
            }
        })
    } else {
        Ok(())
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let full = fill
        .and_then(|()| memory::of(&gateway))
        .map(|rss| (rss, sent));

    let restarted = match (&full, kind) {
        (Err(e), _) => Err(e.clone()),
        (Ok(_), StoreKind::Memory) => Err(MEMORY_KEEPS_NOTHING.to_owned()),
        (Ok(_), _) => {
            log(&format!(
                "[stores, {label}] a gateway restarted on the full store"
            ));
            let again = Store::Again {
                data_dir: procs::data_dir(&plan.dir, &base),
                url: shared_url.clone(),
            };
            drop(gateway);
            match procs::start_gateway(&plan.dir, &plan.mesh, &broker.url(), ns, again, http).await
            {
                Ok((restarted, _)) => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    memory::of(&restarted)
                }
                Err(e) => Err(e),
            }
        }
    };
    StoreFigures {
        kind,
        c64,
        replay,
        idle,
        full,
        restarted,
        follow,
    }
}

/// One wrk run at concurrency 64; `sent` counts its answers (the tasks stored).
fn wrk_case(
    plan: &Plan,
    base: &str,
    load: &Load,
    sent: &mut u64,
    bound: Duration,
    limit: Option<u64>,
) -> Figure<LoadResult> {
    let result = match &plan.wrk {
        None => Err(e2e::WRK_MISSING.to_string()),
        Some(wrk) => e2e::run(wrk, &plan.dir, base, load, 64, bound, limit, *sent),
    };
    if let Ok(r) = &result {
        *sent += r.responses;
    }
    result
}

/// A database made for the run on the server at the `--postgres` URL, dropped (with its
/// connections) by [`Database::drop_now`], or when dropped.
struct Database {
    server: String,
    name: String,
    url: String,
    dropped: bool,
}

impl Database {
    async fn create(server: &str) -> Result<Database, String> {
        let name = format!("mesh_bench_{}", uuid::Uuid::new_v4().simple());
        let url = with_database(server, &name)?;
        execute(server, &format!("CREATE DATABASE {name}")).await?;
        log(&format!("created database {name}"));
        Ok(Database {
            server: server.to_owned(),
            name,
            url,
            dropped: false,
        })
    }

    fn drop_statement(&self) -> String {
        format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)
    }

    async fn drop_now(mut self) {
        if let Err(e) = execute(&self.server, &self.drop_statement()).await {
            log(&format!("cannot drop database {}: {e}", self.name));
        }
        self.dropped = true;
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let server = self.server.clone();
        let statement = self.drop_statement();
        // A runtime of its own: this may run inside the bench's.
        let _ = std::thread::spawn(move || {
            if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                let _ = runtime.block_on(execute(&server, &statement));
            }
        })
        .join();
    }
}

/// Runs `statement` on `server`, within [`DATABASE_WAIT`].
async fn execute(server: &str, statement: &str) -> Result<(), String> {
    let work = async {
        let (client, connection) = tokio_postgres::connect(server, NoTls)
            .await
            .map_err(|e| format!("PostgreSQL at {server} (--postgres): {e}"))?;
        let connection = tokio::spawn(connection);
        let result = client
            .batch_execute(statement)
            .await
            .map_err(|e| format!("{statement}: {e}"));
        drop(client);
        let _ = connection.await;
        result
    };
    tokio::time::timeout(DATABASE_WAIT, work)
        .await
        .map_err(|_| format!("PostgreSQL at {server} did not answer within 20 s"))?
}

/// `server` (a `postgres://…/db` URL, query string kept) naming database `name` instead.
fn with_database(server: &str, name: &str) -> Result<String, String> {
    let (base, query) = match server.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (server, None),
    };
    let authority_start = base
        .find("://")
        .map(|i| i + 3)
        .ok_or_else(|| format!("--postgres {server:?} is not a postgres:// URL"))?;
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut url = format!("{}/{name}", &base[..path_start]);
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_url_names_the_new_database() {
        assert_eq!(
            with_database("postgres://root@127.0.0.1:5432/postgres", "b1").as_deref(),
            Ok("postgres://root@127.0.0.1:5432/b1")
        );
        assert_eq!(
            with_database("postgres://u:p@db:5432", "b1").as_deref(),
            Ok("postgres://u:p@db:5432/b1")
        );
        assert_eq!(
            with_database("postgresql://h/x?sslmode=disable", "b1").as_deref(),
            Ok("postgresql://h/b1?sslmode=disable")
        );
        assert!(with_database("127.0.0.1:5432", "b1").is_err());
    }
}
