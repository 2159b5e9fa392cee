//! Latency samples and their percentiles.

use std::time::Duration;

/// Round-trip samples of one case.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    samples: Vec<Duration>,
}

impl Latencies {
    /// Records one sample.
    pub fn push(&mut self, d: Duration) {
        self.samples.push(d);
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Takes in every sample of `other`.
    pub fn merge(&mut self, other: Latencies) {
        self.samples.extend(other.samples);
    }

    /// The `p`-th percentile (0–100), nearest rank; zero without samples.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        let mut sorted = self.samples.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut l = Latencies::default();
        for us in 1..=100 {
            l.push(Duration::from_micros(us));
        }
        assert_eq!(l.percentile(50.0), Duration::from_micros(50));
        assert_eq!(l.percentile(99.0), Duration::from_micros(99));
        assert_eq!(l.percentile(100.0), Duration::from_micros(100));
        assert_eq!(Latencies::default().percentile(50.0), Duration::ZERO);
    }

    #[test]
    fn merged_samples_count_in_the_percentiles() {
        let mut a = Latencies::default();
        let mut b = Latencies::default();
        for us in 1..=50 {
            a.push(Duration::from_micros(us));
            b.push(Duration::from_micros(us + 50));
        }
        a.merge(b);
        assert_eq!(a.len(), 100);
        assert!(!a.is_empty());
        assert_eq!(a.percentile(99.0), Duration::from_micros(99));
        assert!(Latencies::default().is_empty());
    }
}
