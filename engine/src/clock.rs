//! The only way the engine learns the time: a clock handed in by the host.
//!
//! The proxy passes a monotonic system clock; `sluice replay` and tests pass a [`ManualClock`]
//! they advance themselves, so TTLs, idle gaps and durations are reproducible.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonic clock: `now` never goes backwards and its origin is arbitrary.
pub trait Clock: Send + Sync {
    fn now(&self) -> Duration;
}

/// A clock that only moves when told to. Resolution is one microsecond.
#[derive(Debug, Default)]
pub struct ManualClock {
    micros: AtomicU64,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    pub fn advance(&self, by: Duration) {
        let micros = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        self.micros.fetch_add(micros, Ordering::SeqCst);
    }

    pub fn set(&self, to: Duration) {
        let micros = u64::try_from(to.as_micros()).unwrap_or(u64::MAX);
        self.micros.fetch_max(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::SeqCst))
    }
}
