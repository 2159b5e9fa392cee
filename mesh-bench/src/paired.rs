//! The ratios the targets are checked against, measured in interleaved rounds: at
//! concurrency 1, raw MQTT QoS 1 round trips, then HTTP `message/send` through the mesh, then
//! raw again, and so on, each round giving one ratio of the two medians; at concurrency 64,
//! raw QoS 1 pipelined (64 in flight) and the mesh's requests per second, each round giving
//! one share of the two rates.
//!
//! On a shared VM the speed of everything drifts by a fifth within minutes, and the raw case
//! runs minutes before the HTTP cases; a ratio of two figures taken that far apart measures
//! the drift as much as the mesh. Rounds a second long, side by side, see the same machine,
//! and the median of their ratios is the figure the target is checked against.

use crate::e2e::{self, Load, LoadResult};
use crate::raw_mqtt::RawPair;
use rumqttc::QoS;
use std::path::Path;
use std::time::Duration;

/// How many rounds (each one raw case and one HTTP case).
pub const ROUNDS: usize = 9;

/// A round of a comparison: the figure its target is checked against.
pub trait Compared {
    /// The mesh against raw in this round.
    fn figure(&self) -> f64;
}

/// One round: the raw QoS 1 p50 and the end-to-end p50, measured one after the other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Round {
    pub raw_p50: Duration,
    pub mesh_p50: Duration,
}

impl Compared for Round {
    /// End to end over raw.
    fn figure(&self) -> f64 {
        self.mesh_p50.as_secs_f64() / self.raw_p50.as_secs_f64().max(1e-9)
    }
}

/// One round at concurrency 64: raw QoS 1 pipelined replies per second, then the mesh's
/// requests per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateRound {
    pub raw_per_s: f64,
    pub mesh_per_s: f64,
}

impl Compared for RateRound {
    /// The mesh's rate as a percentage of raw.
    fn figure(&self) -> f64 {
        100.0 * self.mesh_per_s / self.raw_per_s.max(1e-9)
    }
}

/// Every round of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Rounds<R> {
    pub rounds: Vec<R>,
}

impl<R: Compared> Rounds<R> {
    /// The rounds' figures, smallest first.
    pub fn sorted(&self) -> Vec<f64> {
        let mut figures: Vec<f64> = self.rounds.iter().map(R::figure).collect();
        figures.sort_by(f64::total_cmp);
        figures
    }

    /// The median figure (the lower middle one for an even count); zero without rounds.
    pub fn median(&self) -> f64 {
        let sorted = self.sorted();
        match sorted.len() {
            0 => 0.0,
            n => sorted[(n - 1) / 2],
        }
    }
}

/// The concurrency-1 comparison: p50 ratios.
pub type Paired = Rounds<Round>;

/// The concurrency-64 comparison: shares of raw's rate, in percent.
pub type PairedRates = Rounds<RateRound>;

/// What a comparison runs against: wrk (writing its scripts into `dir`), the broker on
/// `port`, the gateway at `base` and its `agent`, each case of a round `round` long.
pub struct Setup<'a> {
    pub wrk: &'a Path,
    pub dir: &'a Path,
    pub port: u16,
    pub base: &'a str,
    pub agent: &'a str,
    pub round: Duration,
}

impl Setup<'_> {
    /// The raw pair (closed when dropped) and the mesh's side, JSON-RPC `message/send` to
    /// the agent, counting its answers in `sent`.
    async fn sides<'s>(&'s self, sent: &'s mut u64) -> Result<(RawPair, MeshSide<'s>), String> {
        let raw = RawPair::connect(self.port, QoS::AtLeastOnce).await?;
        let mesh = MeshSide {
            wrk: self.wrk,
            dir: self.dir,
            base: self.base,
            load: Load::jsonrpc(self.agent),
            sent,
        };
        Ok((raw, mesh))
    }
}

/// The mesh's side of a round: wrk against the gateway at `base`, each answer counted in
/// `sent` (so that request ids stay unique across wrk runs).
struct MeshSide<'a> {
    wrk: &'a Path,
    dir: &'a Path,
    base: &'a str,
    load: Load,
    sent: &'a mut u64,
}

impl MeshSide<'_> {
    /// One wrk run of `length` from `connections` connections; an answer that is not a
    /// completed task fails the comparison.
    fn round(&mut self, connections: usize, length: Duration) -> Result<LoadResult, String> {
        let (wrk, dir, base, load) = (self.wrk, self.dir, self.base, &self.load);
        let mesh = e2e::run(wrk, dir, base, load, connections, length, None, *self.sent)?;
        *self.sent += mesh.responses;
        if mesh.errors > 0 {
            return Err(format!(
                "{} errors in a concurrency-{connections} round through the mesh",
                mesh.errors
            ));
        }
        Ok(mesh)
    }
}

/// Runs [`ROUNDS`] rounds of `setup`: raw QoS 1 round trips, then JSON-RPC `message/send`
/// from one connection. `sent` counts the HTTP answers (request ids stay unique across wrk
/// runs).
pub async fn run(setup: &Setup<'_>, sent: &mut u64) -> Result<Paired, String> {
    let (mut raw, mut mesh_side) = setup.sides(sent).await?;
    let round = setup.round;
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let raw_p50 = raw.rtt(round).await?.percentile(50.0);
        let mesh = mesh_side.round(1, round)?;
        let round = Round {
            raw_p50,
            mesh_p50: mesh.p50,
        };
        crate::log(&format!(
            "  round {}: raw {} µs, mesh {} µs ({:.2}×)",
            rounds.len() + 1,
            raw_p50.as_micros(),
            mesh.p50.as_micros(),
            round.figure()
        ));
        rounds.push(round);
    }
    Ok(Paired { rounds })
}

/// How many concurrency-64 rounds (each one raw case and one HTTP case).
pub const RATE_ROUNDS: usize = 5;

/// Runs [`RATE_ROUNDS`] rounds of `setup`: raw QoS 1 pipelined, then JSON-RPC
/// `message/send` from 64 connections. `sent` counts the HTTP answers.
pub async fn run_pipelined(setup: &Setup<'_>, sent: &mut u64) -> Result<PairedRates, String> {
    let (mut raw, mut mesh_side) = setup.sides(sent).await?;
    let round = setup.round;
    let mut rounds = Vec::with_capacity(RATE_ROUNDS);
    for _ in 0..RATE_ROUNDS {
        let raw_per_s = raw.pipelined(round).await?;
        let mesh = mesh_side.round(64, round)?;
        let round = RateRound {
            raw_per_s,
            mesh_per_s: mesh.per_s(),
        };
        crate::log(&format!(
            "  round {}: raw {:.0}/s, mesh {:.0}/s ({:.0} %)",
            rounds.len() + 1,
            round.raw_per_s,
            round.mesh_per_s,
            round.figure()
        ));
        rounds.push(round);
    }
    Ok(PairedRates { rounds })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(raw_us: u64, mesh_us: u64) -> Round {
        Round {
            raw_p50: Duration::from_micros(raw_us),
            mesh_p50: Duration::from_micros(mesh_us),
        }
    }

    #[test]
    fn the_median_ratio_is_the_middle_round() {
        let paired = Paired {
            rounds: vec![
                round(100, 300),
                round(100, 150),
                round(100, 200),
                round(50, 500),
                round(100, 190),
            ],
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let sorted = paired.sorted();
        let expected = [1.5, 1.9, 2.0, 3.0, 10.0];
        assert!(
            sorted.iter().zip(expected).all(|(&a, b)| close(a, b)),
            "{sorted:?}"
        );
        assert!(close(paired.median(), 2.0));
        let even = Paired {
            rounds: vec![round(100, 300), round(100, 100)],
        };
        assert!(close(even.median(), 1.0), "the lower middle one");
        assert_eq!(Paired { rounds: vec![] }.median(), 0.0);
    }

    #[test]
    fn the_median_share_is_the_middle_round() {
        let rate = |raw_per_s: f64, mesh_per_s: f64| RateRound {
            raw_per_s,
            mesh_per_s,
        };
        let paired = PairedRates {
            rounds: vec![
                rate(20_000.0, 15_000.0),
                rate(10_000.0, 8_000.0),
                rate(20_000.0, 12_000.0),
            ],
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let sorted = paired.sorted();
        assert!(
            sorted
                .iter()
                .zip([60.0, 75.0, 80.0])
                .all(|(&a, b)| close(a, b)),
            "{sorted:?}"
        );
        assert!(close(paired.median(), 75.0));
        assert_eq!(PairedRates { rounds: vec![] }.median(), 0.0);
    }
}
