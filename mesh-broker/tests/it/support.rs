//! Helpers shared by the integration tests: MQTT clients (rumqttc, with
//! `TCP_NODELAY`) whose incoming packets arrive on a channel.

#![allow(dead_code)] // Each test binary uses its own subset.

use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;

use mesh_broker::{Access, Acl, Broker, Passwords, hash_password};
use rumqttc::{
    AsyncClient, ConnectionError, Event, EventLoop, LastWill, MqttOptions, NetworkOptions,
    Outgoing, Packet, Publish, QoS,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use mesh_testkit::within;

/// A broker on an ephemeral loopback port.
pub async fn broker() -> Broker {
    Broker::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("broker starts on an ephemeral port")
}

/// Waits until `condition` holds, checking it every 2 ms (for broker state that no
/// MQTT event announces).
pub async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    within(what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
}

/// Waits until `broker` holds exactly `n` sessions.
pub async fn wait_sessions(broker: &Broker, n: usize) {
    wait_until("the session count", || broker.session_count() == n).await
}

/// A connected MQTT client whose incoming packets arrive on `incoming`.
pub struct Peer {
    /// Sends requests to the broker.
    pub client: AsyncClient,
    /// Every packet the broker sent (and `Packet::Disconnect` once this client sent
    /// DISCONNECT), then `Err` once the connection failed.
    pub incoming: mpsc::UnboundedReceiver<Result<Packet, ConnectionError>>,
    /// Drives the connection; aborting it drops the socket without DISCONNECT.
    pub driver: JoinHandle<()>,
}

/// Options for a client of `addr` named `id`.
pub fn options(addr: SocketAddr, id: &str) -> MqttOptions {
    let mut options = MqttOptions::new(id, addr.ip().to_string(), addr.port());
    options.set_keep_alive(Duration::from_secs(30));
    options.set_max_packet_size(1024 * 1024, 1024 * 1024);
    options
}

/// Connects a client named `id` and waits for its CONNACK.
pub async fn connect(addr: SocketAddr, id: &str) -> Peer {
    connect_with(options(addr, id)).await
}

/// Connects a client named `id` with a last will, and waits for its CONNACK.
pub async fn connect_with_will(addr: SocketAddr, id: &str, will: LastWill) -> Peer {
    let mut options = options(addr, id);
    options.set_last_will(will);
    connect_with(options).await
}

/// Connects a client with `options` and waits for its CONNACK.
pub async fn connect_with(options: MqttOptions) -> Peer {
    let (client, eventloop) = AsyncClient::new(options, 64);
    let mut peer = drive(client, eventloop);
    let first = within("CONNACK", peer.incoming.recv()).await;
    match first {
        Some(Ok(Packet::ConnAck(_))) => peer,
        other => panic!("expected CONNACK, got {other:?}"),
    }
}

/// Drives a client's event loop (with `TCP_NODELAY`) without waiting for anything.
pub fn drive(client: AsyncClient, mut eventloop: EventLoop) -> Peer {
    let mut network = NetworkOptions::new();
    network.set_tcp_nodelay(true);
    eventloop.set_network_options(network);
    let (tx, incoming) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(packet)) => {
                    if tx.send(Ok(packet)).is_err() {
                        return;
                    }
                }
                // The broker never sends DISCONNECT to a 3.1.1 client: report our own.
                Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                    if tx.send(Ok(Packet::Disconnect)).is_err() {
                        return;
                    }
                }
                Ok(Event::Outgoing(_)) => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    });
    Peer {
        client,
        incoming,
        driver,
    }
}

impl Peer {
    /// Subscribes to `filter` and waits for the SUBACK.
    pub async fn subscribe(&mut self, filter: &str, qos: QoS) {
        self.client
            .subscribe(filter, qos)
            .await
            .expect("SUBSCRIBE queued");
        loop {
            match self.next_packet().await {
                Packet::SubAck(ack) => {
                    assert!(
                        ack.return_codes
                            .iter()
                            .all(|c| matches!(c, rumqttc::SubscribeReasonCode::Success(_))),
                        "subscription to {filter} refused: {ack:?}"
                    );
                    return;
                }
                Packet::Publish(p) => panic!("PUBLISH on {} before SUBACK", p.topic),
                _ => {}
            }
        }
    }

    /// The next packet from the broker.
    pub async fn next_packet(&mut self) -> Packet {
        match within("a packet from the broker", self.incoming.recv()).await {
            Some(Ok(packet)) => packet,
            Some(Err(e)) => panic!("connection failed: {e}"),
            None => panic!("connection driver ended"),
        }
    }

    /// The next PUBLISH from the broker, skipping acknowledgements; `None` once the
    /// connection has ended (for tasks that outlive their broker).
    pub async fn try_next_publish(&mut self) -> Option<Publish> {
        loop {
            match self.incoming.recv().await? {
                Ok(Packet::Publish(p)) => return Some(p),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// The next PUBLISH from the broker, skipping acknowledgements.
    pub async fn next_publish(&mut self) -> Publish {
        loop {
            if let Packet::Publish(p) = self.next_packet().await {
                return p;
            }
        }
    }

    /// Waits until `n` PUBACKs have arrived (for QoS 1 publishes sent earlier).
    pub async fn wait_pubacks(&mut self, n: usize) {
        let mut acks = 0;
        while acks < n {
            if let Packet::PubAck(_) = self.next_packet().await {
                acks += 1;
            }
        }
    }

    /// Waits until this client has sent DISCONNECT.
    pub async fn wait_sent_disconnect(&mut self) {
        while !matches!(self.next_packet().await, Packet::Disconnect) {}
    }

    /// Waits until the connection fails, e.g. because the broker closed it.
    pub async fn wait_disconnected(&mut self) {
        loop {
            match within("the connection to close", self.incoming.recv()).await {
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    }
}

/// The ACL of [`accounts`]: `echo` reads its requests and writes its replies and card,
/// `spy` reads only its own topics, `admin` everything.
pub const ACL: &str = "\
user echo
topic read t/echo/+
topic write out/echo
topic write cards/echo

user spy
topic read t/spy/+

user admin
topic readwrite #
";

/// Three accounts (`echo`, `spy`, `admin`, each with the password `<name>-pw`) and [`ACL`].
pub fn accounts() -> Arc<Access> {
    let passwords = format!(
        "echo:{}\nspy:{}\nadmin:{}\n",
        hash_password("echo-pw"),
        hash_password("spy-pw"),
        hash_password("admin-pw")
    );
    Arc::new(Access::new(
        Passwords::parse(&passwords).unwrap(),
        Acl::parse(ACL).unwrap(),
    ))
}

/// Client options for `addr` with the credentials of an account.
pub fn account(addr: SocketAddr, id: &str, user: &str, password: &str) -> MqttOptions {
    let mut options = options(addr, id);
    options.set_credentials(user, password);
    options
}

/// Connects with `options` and returns why the broker refused it.
pub async fn refused(options: MqttOptions) -> ConnectionError {
    let (client, eventloop) = rumqttc::AsyncClient::new(options, 8);
    let mut peer = drive(client, eventloop);
    match within("the CONNACK", peer.incoming.recv()).await {
        Some(Err(error)) => error,
        other => panic!("expected a refusal, got {other:?}"),
    }
}
