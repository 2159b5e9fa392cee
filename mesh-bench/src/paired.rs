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

/// One round: the raw QoS 1 p50 and the end-to-end p50, measured one after the other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Round {
    pub raw_p50: Duration,
    pub mesh_p50: Duration,
}

impl Round {
    /// End to end over raw.
    pub fn ratio(&self) -> f64 {
        self.mesh_p50.as_secs_f64() / self.raw_p50.as_secs_f64().max(1e-9)
    }
}

/// Every round of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Paired {
    pub rounds: Vec<Round>,
}

impl Paired {
    /// The ratios, smallest first.
    pub fn sorted_ratios(&self) -> Vec<f64> {
        let mut ratios: Vec<f64> = self.rounds.iter().map(Round::ratio).collect();
        ratios.sort_by(f64::total_cmp);
        ratios
    }

    /// The median ratio (the lower middle one for an even count); zero without rounds.
    pub fn median_ratio(&self) -> f64 {
        lower_median(&self.sorted_ratios())
    }
}

/// One round at concurrency 64: raw QoS 1 pipelined replies per second, then the mesh's
/// requests per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateRound {
    pub raw_per_s: f64,
    pub mesh_per_s: f64,
}

impl RateRound {
    /// The mesh's rate as a percentage of raw.
    pub fn share(&self) -> f64 {
        100.0 * self.mesh_per_s / self.raw_per_s.max(1e-9)
    }
}

/// Every round of the concurrency-64 comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedRates {
    pub rounds: Vec<RateRound>,
}

impl PairedRates {
    /// The shares (percent), smallest first.
    pub fn sorted_shares(&self) -> Vec<f64> {
        let mut shares: Vec<f64> = self.rounds.iter().map(RateRound::share).collect();
        shares.sort_by(f64::total_cmp);
        shares
    }

    /// The median share (the lower middle one for an even count); zero without rounds.
    pub fn median_share(&self) -> f64 {
        lower_median(&self.sorted_shares())
    }
}

/// The middle value of `sorted` (the lower middle one for an even count); zero when empty.
fn lower_median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n => sorted[(n - 1) / 2],
    }
}

/// Runs [`ROUNDS`] rounds of `round` each against the broker on `port` and JSON-RPC
/// `message/send` to `agent` at the gateway's `base`. `sent` counts the HTTP answers
/// (request ids stay unique across wrk runs).
pub async fn run(
    wrk: &Path,
    dir: &Path,
    port: u16,
    base: &str,
    agent: &str,
    round: Duration,
    sent: &mut u64,
) -> Result<Paired, String> {
    let mut raw = RawPair::connect(port, QoS::AtLeastOnce).await?; // closed when dropped
    let load = Load::jsonrpc(agent);
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let raw_p50 = raw.rtt(round).await?.percentile(50.0);
        let first = *sent;
        let mesh: LoadResult = e2e::run(wrk, dir, base, &load, 1, round, None, first)?;
        *sent += mesh.responses;
        if mesh.errors > 0 {
            return Err(format!(
                "{} errors in a concurrency-1 round through the mesh",
                mesh.errors
            ));
        }
        let round = Round {
            raw_p50,
            mesh_p50: mesh.p50,
        };
        crate::log(&format!(
            "  round {}: raw {} µs, mesh {} µs ({:.2}×)",
            rounds.len() + 1,
            raw_p50.as_micros(),
            mesh.p50.as_micros(),
            round.ratio()
        ));
        rounds.push(round);
    }
    Ok(Paired { rounds })
}

/// How many concurrency-64 rounds (each one raw case and one HTTP case).
pub const RATE_ROUNDS: usize = 5;

/// Runs [`RATE_ROUNDS`] rounds of `round` each: raw QoS 1 pipelined through the broker on
/// `port`, then JSON-RPC `message/send` to `agent` at the gateway's `base` from 64
/// connections. `sent` counts the HTTP answers.
pub async fn run_pipelined(
    wrk: &Path,
    dir: &Path,
    port: u16,
    base: &str,
    agent: &str,
    round: Duration,
    sent: &mut u64,
) -> Result<PairedRates, String> {
    let mut raw = RawPair::connect(port, QoS::AtLeastOnce).await?; // closed when dropped
    let load = Load::jsonrpc(agent);
    let mut rounds = Vec::with_capacity(RATE_ROUNDS);
    for _ in 0..RATE_ROUNDS {
        let raw_per_s = raw.pipelined(round).await?;
        let mesh: LoadResult = e2e::run(wrk, dir, base, &load, 64, round, None, *sent)?;
        *sent += mesh.responses;
        if mesh.errors > 0 {
            return Err(format!(
                "{} errors in a concurrency-64 round through the mesh",
                mesh.errors
            ));
        }
        let round = RateRound {
            raw_per_s,
            mesh_per_s: mesh.per_s(),
        };
        crate::log(&format!(
            "  round {}: raw {:.0}/s, mesh {:.0}/s ({:.0} %)",
            rounds.len() + 1,
            round.raw_per_s,
            round.mesh_per_s,
            round.share()
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
        let sorted = paired.sorted_ratios();
        let expected = [1.5, 1.9, 2.0, 3.0, 10.0];
        assert!(
            sorted.iter().zip(expected).all(|(&a, b)| close(a, b)),
            "{sorted:?}"
        );
        assert!(close(paired.median_ratio(), 2.0));
        let even = Paired {
            rounds: vec![round(100, 300), round(100, 100)],
        };
        assert!(close(even.median_ratio(), 1.0), "the lower middle one");
        assert_eq!(Paired { rounds: vec![] }.median_ratio(), 0.0);
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
        let sorted = paired.sorted_shares();
        assert!(
            sorted
                .iter()
                .zip([60.0, 75.0, 80.0])
                .all(|(&a, b)| close(a, b)),
            "{sorted:?}"
        );
        assert!(close(paired.median_share(), 75.0));
        assert_eq!(PairedRates { rounds: vec![] }.median_share(), 0.0);
    }
}
