//! # mesh-broker
//!
//! An MQTT broker that runs inside the process: the default broker of `mesh up` and the
//! broker each test starts for itself on an ephemeral port.
//!
//! It is [rmqtt](https://crates.io/crates/rmqtt) with the glue an embedded broker
//! needs: `TCP_NODELAY` on accepted sockets (no 40 ms Nagle stall on small replies),
//! an enabled in-memory retained-message store, round-robin shared subscriptions
//! (`$share/{group}/{filter}`), typed bind errors, and a [`Broker::stop`] that frees
//! the port.
//!
//! ```
//! use mesh_broker::Broker;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), mesh_broker::BrokerError> {
//! // Port 0: the OS picks a free port.
//! let broker = Broker::start("127.0.0.1:0".parse().unwrap()).await?;
//! let addr = broker.local_addr();
//! assert_ne!(addr.port(), 0);
//!
//! // A client can connect now.
//! tokio::net::TcpStream::connect(addr).await.expect("broker listens");
//!
//! broker.stop().await;
//! assert!(tokio::net::TcpStream::connect(addr).await.is_err());
//! # Ok(())
//! # }
//! ```

mod broker;
mod config;
mod error;
mod retain;
mod shared;

pub use broker::Broker;
pub use config::BrokerConfig;
pub use error::BrokerError;
