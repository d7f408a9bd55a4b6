//! The production implementations of the engine's ports: the system clock and UUIDv7 ids.

use strata_engine::ports::{Clock, Ids};
use uuid::Uuid;

/// Wall-clock time from the operating system.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> i64 {
        let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
        i64::try_from(now).unwrap_or(i64::MAX)
    }
}

/// Time-ordered random UUIDv7 ids.
#[derive(Clone, Copy, Debug, Default)]
pub struct V7Ids;

impl Ids for V7Ids {
    fn next_id(&mut self) -> Uuid {
        Uuid::now_v7()
    }
}

/// 32 bytes from the operating system's CSPRNG.
pub fn random_seed() -> anyhow::Result<[u8; 32]> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("the operating system's random source failed: {e}"))?;
    Ok(seed)
}

/// This process's peak resident set size in MiB (Linux `VmHWM`), if the platform reports it.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}
