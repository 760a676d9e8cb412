//! The system clock handed to the engine: monotonic time since the process started.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use engine::clock::Clock;

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed()
    }
}
