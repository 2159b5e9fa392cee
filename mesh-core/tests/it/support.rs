//! Helpers shared by the bus integration tests: bounded waits and a connected bus.

#![allow(dead_code)]

use bytes::Bytes;
use std::time::Duration;

use mesh_core::bus::{Bus, BusConfig, BusMessage, ConnectionState, Subscription};

pub use mesh_testkit::{WAIT, within};

/// A config for `url` with a short request timeout.
pub fn config(url: &str) -> BusConfig {
    let mut config = BusConfig::new(url).expect("valid url");
    config.request_timeout = WAIT;
    config
}

/// A bus connected to `url`.
pub async fn connect(url: &str) -> Bus {
    within("connect", Bus::connect(config(url)))
        .await
        .expect("connect")
}

/// The next message of `sub`, within [`WAIT`].
pub async fn next(sub: &mut Subscription) -> BusMessage {
    within(&format!("a message on {}", sub.filter()), sub.recv())
        .await
        .expect("subscription ended")
}

/// The next message of `sub` whose payload differs from the previous one (`last`): skips a
/// broker's extra copy (an overlapping subscription, or QoS 1's at least once).
pub async fn next_distinct(sub: &mut Subscription, last: &mut Option<Bytes>) -> BusMessage {
    loop {
        let m = next(sub).await;
        if last.as_ref() != Some(&m.payload) {
            *last = Some(m.payload.clone());
            return m;
        }
    }
}

/// Waits until the bus's state satisfies `pred`.
pub async fn wait_state(bus: &Bus, what: &str, pred: impl FnMut(&ConnectionState) -> bool) {
    let mut state = bus.state();
    within(what, state.wait_for(pred))
        .await
        .expect("state channel closed");
}

/// Waits until `condition` holds, checking every few milliseconds, at most [`WAIT`].
pub async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    within(what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}
