//! The limit: raw MQTT request/reply through the broker under test, with nothing of the mesh
//! in the path. Two rumqttc clients in this process (TCP_NODELAY on both, each on its own
//! task): the requester publishes the 306-byte payload on a request topic, the responder
//! publishes it back on a reply topic as soon as it arrives. Measured sequentially (one in
//! flight: round-trip time, p50/p99) and pipelined (64 in flight: replies per second), at
//! QoS 1 (what the mesh uses) and QoS 0 (for reference).
//!
//! The requester drives its own event loop in one task (publish, then poll until the reply
//! arrives), so no channel or task wake-up sits between the socket and the clock.

use crate::payload;
use crate::stats::Latencies;
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, NetworkOptions, Packet, QoS};
use std::time::{Duration, Instant};

/// How many requests the pipelined case keeps in flight.
pub const PIPELINE_DEPTH: usize = 64;

/// What one QoS level measured.
#[derive(Debug, Clone)]
pub struct RawQos {
    /// Sequential round trips.
    pub rtt: Latencies,
    /// Pipelined replies per second.
    pub pipelined_per_s: f64,
}

/// Both QoS levels.
#[derive(Debug, Clone)]
pub struct RawResult {
    pub qos0: RawQos,
    pub qos1: RawQos,
}

/// Runs the four raw cases against the broker on `port`, each for `case` time.
pub async fn run(port: u16, case: Duration) -> Result<RawResult, String> {
    let qos1 = run_qos(port, QoS::AtLeastOnce, case).await?;
    let qos0 = run_qos(port, QoS::AtMostOnce, case).await?;
    Ok(RawResult { qos0, qos1 })
}

async fn run_qos(port: u16, qos: QoS, case: Duration) -> Result<RawQos, String> {
    let mut pair = RawPair::connect(port, qos).await?;
    let rtt = pair.rtt(case).await?;
    let pipelined_per_s = pair.pipelined(case).await?;
    Ok(RawQos {
        rtt,
        pipelined_per_s,
    })
}

/// A requester and a responder, connected and subscribed, that measure the sequential round
/// trip again whenever asked: what the interleaved comparison with the mesh uses, so that both
/// sides of a ratio are measured within seconds of each other.
pub struct RawPair {
    client: AsyncClient,
    requester: EventLoop,
    responder: tokio::task::JoinHandle<()>,
    req_topic: String,
    qos: QoS,
    body: Vec<u8>,
}

impl RawPair {
    /// Connects both clients to the broker on `port` and subscribes them at `qos`.
    pub async fn connect(port: u16, qos: QoS) -> Result<RawPair, String> {
        let run = uuid::Uuid::new_v4().simple().to_string();
        let req_topic = format!("bench/{run}/req");
        let rep_topic = format!("bench/{run}/rep");
        let responder = start_responder(port, qos, &req_topic, &rep_topic, &run).await?;
        let (client, mut requester) = connect(&format!("bench-req-{run}"), port);
        client
            .subscribe(&rep_topic, qos)
            .await
            .map_err(|e| e.to_string())?;
        wait_suback(&mut requester).await?;
        Ok(RawPair {
            client,
            requester,
            responder,
            req_topic,
            qos,
            body: payload::send(1).into_bytes(),
        })
    }

    /// Sequential round trips for `case`, after 200 to warm up.
    pub async fn rtt(&mut self, case: Duration) -> Result<Latencies, String> {
        sequential(self, case).await
    }

    /// Replies per second with [`PIPELINE_DEPTH`] requests in flight for `case` (after a
    /// tenth of it to warm up).
    pub async fn pipelined(&mut self, case: Duration) -> Result<f64, String> {
        pipelined(self, case).await
    }

    /// What a measurement uses: the requester's client and event loop, the request topic,
    /// the QoS and the payload.
    fn parts(&mut self) -> (&AsyncClient, &mut EventLoop, &str, QoS, &[u8]) {
        (
            &self.client,
            &mut self.requester,
            &self.req_topic,
            self.qos,
            &self.body,
        )
    }
}

impl Drop for RawPair {
    /// Disconnects the requester and stops the responder, whatever ended the measurement.
    fn drop(&mut self) {
        let _ = self.client.try_disconnect();
        self.responder.abort();
    }
}

/// A client with TCP_NODELAY and a short keep-alive, not yet connected (the event loop
/// connects on its first poll).
fn connect(id: &str, port: u16) -> (AsyncClient, EventLoop) {
    let mut opts = MqttOptions::new(id, "127.0.0.1", port);
    opts.set_keep_alive(Duration::from_secs(30));
    opts.set_inflight(200);
    opts.set_max_packet_size(1 << 20, 1 << 20);
    let (client, mut el) = AsyncClient::new(opts, 1024);
    let mut net = NetworkOptions::new();
    net.set_tcp_nodelay(true);
    el.set_network_options(net);
    (client, el)
}

async fn wait_suback(el: &mut EventLoop) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let event = tokio::time::timeout_at(deadline.into(), el.poll())
            .await
            .map_err(|_| "no SUBACK from the broker within 10 s".to_string())?
            .map_err(|e| format!("raw MQTT connection: {e}"))?;
        if let Event::Incoming(Packet::SubAck(_)) = event {
            return Ok(());
        }
    }
}

/// The responder: echoes each request on the reply topic, on its own task.
async fn start_responder(
    port: u16,
    qos: QoS,
    req_topic: &str,
    rep_topic: &str,
    run: &str,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let (client, mut el) = connect(&format!("bench-rep-{run}"), port);
    client
        .subscribe(req_topic, qos)
        .await
        .map_err(|e| e.to_string())?;
    wait_suback(&mut el).await?;
    let rep_topic = rep_topic.to_string();
    Ok(tokio::spawn(async move {
        while let Ok(event) = el.poll().await {
            if let Event::Incoming(Packet::Publish(p)) = event {
                let sent = client.try_publish(rep_topic.as_str(), qos, false, p.payload.to_vec());
                if sent.is_err() {
                    break;
                }
            }
        }
    }))
}

/// Polls until one reply arrives.
async fn next_reply(el: &mut EventLoop) -> Result<(), String> {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), el.poll()).await {
            Err(_) => return Err("no reply within 5 s".into()),
            Ok(Err(e)) => return Err(format!("raw MQTT connection: {e}")),
            Ok(Ok(Event::Incoming(Packet::Publish(_)))) => return Ok(()),
            Ok(Ok(_)) => {}
        }
    }
}

async fn sequential(pair: &mut RawPair, case: Duration) -> Result<Latencies, String> {
    let (client, el, topic, qos, body) = pair.parts();
    let publish = |c: &AsyncClient| {
        c.try_publish(topic, qos, false, body.to_vec())
            .map_err(|e| e.to_string())
    };
    for _ in 0..200 {
        publish(client)?;
        next_reply(el).await?;
    }
    let mut lat = Latencies::default();
    let end = Instant::now() + case;
    while Instant::now() < end {
        let t0 = Instant::now();
        publish(client)?;
        next_reply(el).await?;
        lat.push(t0.elapsed());
    }
    Ok(lat)
}

async fn pipelined(pair: &mut RawPair, case: Duration) -> Result<f64, String> {
    let (client, el, topic, qos, body) = pair.parts();
    let publish = |c: &AsyncClient| {
        c.try_publish(topic, qos, false, body.to_vec())
            .map_err(|e| e.to_string())
    };
    for _ in 0..PIPELINE_DEPTH {
        publish(client)?;
    }
    // Warm up for a tenth of the case, then count.
    let warm = Instant::now() + case / 10;
    while Instant::now() < warm {
        next_reply(el).await?;
        publish(client)?;
    }
    let start = Instant::now();
    let end = start + case;
    let mut replies = 0u64;
    while Instant::now() < end {
        next_reply(el).await?;
        replies += 1;
        publish(client)?;
    }
    let rate = replies as f64 / start.elapsed().as_secs_f64();
    // Drain what is still in flight so the next case starts clean.
    for _ in 0..PIPELINE_DEPTH {
        if next_reply(el).await.is_err() {
            break;
        }
    }
    Ok(rate)
}
