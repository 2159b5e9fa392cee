//! What the machine charges for the two things every hop of a request is made of: a system
//! call, and a wake-up through the kernel's loopback (one thread writes a byte on a TCP
//! connection, another blocked on reading it wakes and answers). Measured at the start of a
//! run, before anything else is started, and printed in the header of its tables: the
//! mesh's ratios against raw MQTT depend on these more than on anything in the mesh (a
//! request crosses six processes where a raw round trip crosses four), so two tables from
//! different machines are read side by side through these figures.

use crate::stats::Latencies;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The machine's costs, as [`measure`] found them.
#[derive(Debug, Clone, Copy)]
pub struct MachineCosts {
    /// One system call that does no work (`getpid`), the median of batches.
    pub syscall: Duration,
    /// A 1-byte round trip between two threads over a loopback TCP connection with
    /// `TCP_NODELAY` (two writes, two reads, two wake-ups): p50.
    pub loopback_round_trip: Duration,
}

impl MachineCosts {
    /// How the header says it.
    pub fn describe(&self) -> String {
        format!(
            "a system call {:.2} µs, a 1-byte loopback TCP round trip between two threads {:.1} µs (p50)",
            self.syscall.as_secs_f64() * 1e6,
            self.loopback_round_trip.as_secs_f64() * 1e6
        )
    }
}

/// Measures the machine: `batches` batches of 10,000 system calls, then `round_trips`
/// loopback round trips (after a tenth as many unmeasured ones). With 10 and 5,000 it takes
/// a fraction of a second.
pub fn measure(batches: usize, round_trips: usize) -> io::Result<MachineCosts> {
    Ok(MachineCosts {
        syscall: syscall_cost(batches.max(1)),
        loopback_round_trip: loopback_round_trip(round_trips.max(1))?,
    })
}

/// The median over `batches` of the mean time of one `getpid` (a system call each time:
/// glibc has not cached the pid since 2.25).
fn syscall_cost(batches: usize) -> Duration {
    const CALLS: u32 = 10_000;
    let mut means: Vec<Duration> = (0..batches)
        .map(|_| {
            let began = Instant::now();
            for _ in 0..CALLS {
                std::hint::black_box(std::process::id());
            }
            began.elapsed() / CALLS
        })
        .collect();
    means.sort_unstable();
    means[means.len() / 2]
}

/// The p50 of `rounds` 1-byte round trips to a thread that echoes each byte back.
fn loopback_round_trip(rounds: usize) -> io::Result<Duration> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut client = TcpStream::connect(listener.local_addr()?)?;
    let (mut server, _) = listener.accept()?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    // A hang fails the measure instead of the run.
    let limit = Some(Duration::from_secs(5));
    client.set_read_timeout(limit)?;
    server.set_read_timeout(limit)?;
    let warm_up = rounds / 10;
    let echo = std::thread::Builder::new()
        .name("mesh-bench-echo".into())
        .spawn(move || -> io::Result<()> {
            let mut byte = [0u8; 1];
            for _ in 0..warm_up + rounds {
                server.read_exact(&mut byte)?;
                server.write_all(&byte)?;
            }
            Ok(())
        })?;
    let mut latencies = Latencies::default();
    let mut byte = [7u8; 1];
    for round in 0..warm_up + rounds {
        let began = Instant::now();
        client.write_all(&byte)?;
        client.read_exact(&mut byte)?;
        if round >= warm_up {
            latencies.push(began.elapsed());
        }
    }
    echo.join()
        .map_err(|_| io::Error::other("the echoing thread panicked"))??;
    Ok(latencies.percentile(50.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_is_measured_with_figures_that_can_be_true() {
        // A read that waits over 5 s fails the measure: a hang cannot stall the test.
        let costs = measure(3, 200).expect("loopback works");
        // A system call takes more than nothing and far less than a millisecond; a round
        // trip through the kernel twice takes longer than one system call.
        assert!(costs.syscall > Duration::ZERO, "{costs:?}");
        assert!(costs.syscall < Duration::from_millis(1), "{costs:?}");
        assert!(costs.loopback_round_trip > costs.syscall, "{costs:?}");
        let said = costs.describe();
        assert!(said.starts_with("a system call "), "{said}");
        assert!(said.contains("loopback TCP round trip"), "{said}");
    }
}
