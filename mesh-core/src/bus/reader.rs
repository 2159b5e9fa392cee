//! The network side of a connected rumqttc [`EventLoop`], as the bus's event-loop task reads
//! it: the events rumqttc's state queued, else the next packets read off the socket, else a
//! ping once the keep-alive is due.
//!
//! rumqttc's own `EventLoop::poll` does the same, but its `select!` also waits on rumqttc's
//! request queue, which the bus keeps empty (its driver writes the client's requests itself):
//! every turn of it allocated, queued and removed a waiter on that queue and made and dropped
//! a timer, on the path of every message. The driver still connects through `poll`; once
//! connected it reads through [`next_event`], which also sends again what was in flight when
//! the last connection dropped (rumqttc's `pending`), and keeps the keep-alive's time itself
//! (rumqttc's own timer, started by `poll` as it connects, is never polled after).

use std::pin::Pin;
use std::time::Duration;

use futures_util::FutureExt;
use rumqttc::{ConnectionError, Event, EventLoop, PingReq, Request};
use tokio::time::{Instant, Sleep};

/// When the next ping is due on the connection, and the interval between pings; `None` with
/// no keep-alive or no connection.
pub(crate) struct KeepAlive {
    due: Option<(Pin<Box<Sleep>>, Duration)>,
}

impl KeepAlive {
    /// The keep-alive of a connection just made: the first ping one interval from now (as
    /// rumqttc times it, whatever else is sent or received meanwhile).
    pub(crate) fn start(eventloop: &EventLoop) -> KeepAlive {
        let interval = eventloop.mqtt_options.keep_alive();
        KeepAlive {
            due: (!interval.is_zero()).then(|| (Box::pin(tokio::time::sleep(interval)), interval)),
        }
    }

    /// No connection (or none yet), no ping.
    pub(crate) fn stopped() -> KeepAlive {
        KeepAlive { due: None }
    }

    /// Waits until a ping is due, then sets the next one an interval later; never returns
    /// without a keep-alive.
    async fn tick(&mut self) {
        match self.due.as_mut() {
            Some((due, interval)) => {
                due.as_mut().await;
                due.as_mut().reset(Instant::now() + *interval);
            }
            None => std::future::pending().await,
        }
    }
}

/// The next event of a connected event loop (see the module docs). On an error the
/// connection is cleaned up as rumqttc's `poll` does (what was in flight is kept to be sent
/// again; the caller stops the keep-alive). Cancel-safe as `poll` is: a read dropped halfway keeps
/// what it read in rumqttc's frame buffer.
pub(crate) async fn next_event(
    eventloop: &mut EventLoop,
    keep_alive: &mut KeepAlive,
) -> Result<Event, ConnectionError> {
    loop {
        if let Some(event) = eventloop.state.events.pop_front() {
            return Ok(event);
        }
        if eventloop.network.is_none() {
            // Not connected after all: rumqttc connects.
            return eventloop.poll().await;
        }
        if let Err(e) = read_or_ping(eventloop, keep_alive).await {
            eventloop.clean();
            return Err(e);
        }
    }
}

/// Sends again what was in flight when the last connection dropped, if anything (the
/// driver writes no request of its own until that is done), else reads what the socket
/// holds (at most rumqttc's batch of packets, its answers to them written), or pings when the
/// keep-alive is due: each queues events in rumqttc's state.
async fn read_or_ping(
    eventloop: &mut EventLoop,
    keep_alive: &mut KeepAlive,
) -> Result<(), ConnectionError> {
    let (Some(network), state, pending) = (
        eventloop.network.as_mut(),
        &mut eventloop.state,
        &mut eventloop.pending,
    ) else {
        return Ok(());
    };
    if pending.is_empty() {
        tokio::select! {
            read = network.readb(state) => read?,
            () = keep_alive.tick() => {
                // An error when the last ping is still unanswered: the broker is gone.
                if let Some(ping) = state.handle_outgoing_packet(Request::PingReq(PingReq))? {
                    network.write(ping).await?;
                }
            }
        }
    } else {
        // Not raced by the driver's writes (they wait for an empty `pending`), so a request
        // taken out is written.
        while let Some(request) = pending.pop_front() {
            if let Some(packet) = state.handle_outgoing_packet(request)? {
                network.write(packet).await?;
            }
        }
    }
    // What the read or the ping wrote: usually nothing.
    flush(eventloop).await
}

/// Sends what was written to the connection: at once when the socket takes it all (no timer
/// made for that), else within the connection's timeout.
pub(crate) async fn flush(eventloop: &mut EventLoop) -> Result<(), ConnectionError> {
    let timeout = Duration::from_secs(eventloop.network_options.connection_timeout());
    let Some(network) = eventloop.network.as_mut() else {
        return Ok(());
    };
    if let Some(flushed) = network.flush().now_or_never() {
        return Ok(flushed?);
    }
    match tokio::time::timeout(timeout, network.flush()).await {
        Ok(flushed) => Ok(flushed?),
        Err(_) => Err(ConnectionError::FlushTimeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rumqttc::{Incoming, Outgoing, StateError};
    use tokio::sync::mpsc;

    /// An event loop with `keep_alive`, connected to a peer that sends one QoS 0 publish
    /// (topic `t`, payload `hi`) after the CONNACK, then only reads.
    async fn connected(keep_alive: Duration) -> (EventLoop, mpsc::UnboundedReceiver<Vec<u8>>) {
        let publish = &[0x30, 0x05, 0x00, 0x01, b't', b'h', b'i'];
        super::super::scripted_peer::connected(
            |o| {
                o.set_keep_alive(keep_alive);
            },
            publish,
        )
        .await
    }

    async fn next(
        eventloop: &mut EventLoop,
        keep_alive: &mut KeepAlive,
    ) -> Result<Event, ConnectionError> {
        tokio::time::timeout(Duration::from_secs(5), next_event(eventloop, keep_alive))
            .await
            .expect("an event within 5 s")
    }

    #[tokio::test]
    async fn packets_read_come_out_as_events_and_an_unanswered_ping_ends_the_connection() {
        let (mut eventloop, mut written) = connected(Duration::from_secs(1)).await;
        let mut keep_alive = KeepAlive::start(&eventloop);
        let started = Instant::now();
        match next(&mut eventloop, &mut keep_alive).await.unwrap() {
            Event::Incoming(Incoming::Publish(p)) => {
                assert_eq!((p.topic.as_str(), &p.payload[..]), ("t", &b"hi"[..]));
            }
            other => panic!("the broker's publish first, not {other:?}"),
        }
        // Nothing more comes: the keep-alive's ping, one interval after the connection.
        let ping = next(&mut eventloop, &mut keep_alive).await.unwrap();
        assert_eq!(ping, Event::Outgoing(Outgoing::PingReq));
        assert!(started.elapsed() >= Duration::from_millis(900));
        let bytes = tokio::time::timeout(Duration::from_secs(5), written.recv()).await;
        assert_eq!(
            bytes.unwrap().unwrap(),
            [0xC0, 0x00],
            "a PINGREQ on the wire"
        );
        // The broker never answers it: at the next interval the connection is given up.
        match next(&mut eventloop, &mut keep_alive).await {
            Err(ConnectionError::MqttState(StateError::AwaitPingResp)) => {}
            other => panic!("the unanswered ping is an error, not {other:?}"),
        }
        assert!(started.elapsed() >= Duration::from_millis(1900));
        assert!(
            eventloop.network.is_none(),
            "cleaned up as rumqttc's poll does"
        );
    }

    #[tokio::test]
    async fn without_a_keep_alive_no_ping_is_ever_due() {
        let (mut eventloop, _written) = connected(Duration::ZERO).await;
        let mut keep_alive = KeepAlive::start(&eventloop);
        assert!(matches!(
            next(&mut eventloop, &mut keep_alive).await,
            Ok(Event::Incoming(Incoming::Publish(_)))
        ));
        let waited = tokio::time::timeout(
            Duration::from_millis(300),
            next_event(&mut eventloop, &mut keep_alive),
        )
        .await;
        assert!(waited.is_err(), "nothing to read and no ping: {waited:?}");
    }
}
