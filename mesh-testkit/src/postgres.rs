//! A fresh PostgreSQL database per test, on the server at `MESH_TEST_POSTGRES` (default
//! `postgres://root@127.0.0.1:5432/postgres`, trust authentication), dropped with the value:
//! tests that share the server never see each other's tables.

use std::time::Duration;
use tokio_postgres::NoTls;

/// The server the databases are made on, unless `MESH_TEST_POSTGRES` names another (a URL of
/// a database that exists there, used only to create and drop the test's own).
pub const DEFAULT_SERVER: &str = "postgres://root@127.0.0.1:5432/postgres";

/// How long creating or dropping a database may take.
const WAIT: Duration = Duration::from_secs(20);

/// A database made for one test; dropped (with its connections) when this is.
pub struct TestDatabase {
    server: String,
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates an empty database with a fresh name. Panics when the server cannot be reached:
    /// the test needs it.
    pub async fn create() -> TestDatabase {
        let server = std::env::var("MESH_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_SERVER.into());
        let name = format!("mesh_test_{}", uuid::Uuid::new_v4().simple());
        execute(&server, &format!("CREATE DATABASE {name}")).await;
        let url = match server.rfind('/') {
            Some(slash) if slash > "postgres://".len() => format!("{}/{name}", &server[..slash]),
            _ => panic!("MESH_TEST_POSTGRES {server:?} names no database"),
        };
        TestDatabase { server, name, url }
    }

    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let server = self.server.clone();
        let statement = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // A runtime of its own: the test's may be gone or be the caller.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(execute(&server, &statement));
        })
        .join();
    }
}

async fn execute(server: &str, statement: &str) {
    let work = async {
        let (client, connection) = tokio_postgres::connect(server, NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {server} (MESH_TEST_POSTGRES): {e}"));
        let connection = tokio::spawn(connection);
        client
            .batch_execute(statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        drop(client);
        let _ = connection.await;
    };
    tokio::time::timeout(WAIT, work)
        .await
        .unwrap_or_else(|_| panic!("PostgreSQL at {server} did not answer in time"));
}
