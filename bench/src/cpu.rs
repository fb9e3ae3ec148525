//! A process's CPU time from `/proc/<pid>/stat` (utime + stime, all its
//! threads), and CPU per call over a run: the figure that holds steady on a
//! noisy machine, where req/s moves with whatever else shares the cores.

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// User plus system CPU time `pid` has used so far; `None` when the process
/// is gone or `/proc` is not there.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    ticks_of(&stat).map(|ticks| ticks_to_duration(ticks, clock_ticks()))
}

/// utime + stime, in clock ticks, from a `/proc/<pid>/stat` line. The
/// command name (field 2) is in parentheses and may hold spaces, so the
/// fields are counted from its closing parenthesis: utime and stime are
/// fields 14 and 15, the 12th and 13th after it.
fn ticks_of(stat: &str) -> Option<u64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_to_duration(ticks: u64, per_second: u64) -> Duration {
    Duration::from_secs(ticks / per_second)
        + Duration::from_nanos((ticks % per_second) * 1_000_000_000 / per_second)
}

/// `sysconf(_SC_CLK_TCK)`, asked of `getconf` once (the kit has no unsafe
/// code); 100, Linux's value everywhere in practice, if that fails.
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .filter(|&ticks| ticks > 0)
            .unwrap_or(100)
    })
}

/// CPU time of one process over a run, started with [`CpuMeter::start`].
#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    pid: u32,
    at_start: Duration,
}

impl CpuMeter {
    pub fn start(pid: u32) -> Option<Self> {
        Some(Self {
            pid,
            at_start: cpu_time(pid)?,
        })
    }

    /// Microseconds of CPU per call since the start.
    pub fn micros_per_call(&self, calls: u64) -> Option<f64> {
        let used = cpu_time(self.pid)?.checked_sub(self.at_start)?;
        // Call counts stay far below 2^53.
        #[allow(clippy::cast_precision_loss)]
        let calls = calls.max(1) as f64;
        Some(used.as_secs_f64() * 1e6 / calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utime_and_stime_are_read_past_a_name_with_spaces_and_parentheses() {
        // Fields 14 and 15 are 7 and 5; a name of "a) b" must not shift them.
        let stat = "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 3 0 1000 \
                    1000000 200 18446744073709551615";
        assert_eq!(ticks_of(stat), Some(12));
        assert_eq!(ticks_of("42 (name) S 1"), None);
        assert_eq!(ticks_of("no name here"), None);
    }

    #[test]
    fn ticks_become_time_at_the_clock_rate() {
        assert_eq!(ticks_to_duration(250, 100), Duration::from_millis(2500));
        assert_eq!(ticks_to_duration(3, 1000), Duration::from_millis(3));
    }

    #[test]
    fn this_process_has_used_some_cpu_and_its_meter_counts_more() {
        let pid = std::process::id();
        let meter = CpuMeter::start(pid).expect("this process is in /proc");
        // Burn about 50 ms of CPU, more than a few 10 ms ticks.
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let micros = meter.micros_per_call(1).expect("still running");
        assert!(micros >= 20_000.0, "{micros} µs");
        assert!(cpu_time(u32::MAX).is_none());
    }
}
