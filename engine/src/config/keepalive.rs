//! `cache.keepalive*`: the cache keep-alive's settings, with the reference's names and defaults.
//! The rule that uses them (who gets a ping, when, and what it is worth) is
//! `modes::keepalive`; the pings are sent by the proxy's keeper.

use std::time::Duration;

use super::CacheConfig;

/// Seconds of quiet before a ping (`keepalive_idle_seconds`): inside the provider's 300-second
/// lifetime with 20 s to spare for delivery. A ping that lands after the entry expired writes
/// it again and costs more than doing nothing, whatever the session does next.
const IDLE_SECONDS: u64 = 280;
/// Pings per quiet gap (`keepalive_max_pings`): the reference's 41 days of traffic found "at
/// most two" better than every learned policy tried.
const MAX_PINGS: u64 = 2;
/// The smallest cached prefix worth a ping (`keepalive_min_prefix_tokens`).
const MIN_PREFIX_TOKENS: u64 = 20_000;
/// The most one ping may cost at the model's list price (`keepalive_max_usd_per_ping`).
const MAX_USD_PER_PING: f64 = 0.25;

/// The keep-alive's settings, defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeepAlive {
    /// Quiet before each ping.
    pub idle: Duration,
    pub max_pings: u32,
    pub min_prefix_tokens: u64,
    pub max_usd_per_ping: f64,
}

impl KeepAlive {
    /// The lifetime a ping must land inside: Anthropic's default entry. A request that asks
    /// for the hour-long one needs no ping.
    pub const LIFETIME: Duration = Duration::from_secs(300);
}

impl CacheConfig {
    /// The keep-alive's settings when `cache.keepalive` is on.
    pub fn keepalive(&self) -> Option<KeepAlive> {
        self.keepalive.then(|| KeepAlive {
            idle: Duration::from_secs(self.keepalive_idle_seconds.unwrap_or(IDLE_SECONDS)),
            max_pings: u32::try_from(self.keepalive_max_pings.unwrap_or(MAX_PINGS))
                .unwrap_or(u32::MAX),
            min_prefix_tokens: self
                .keepalive_min_prefix_tokens
                .unwrap_or(MIN_PREFIX_TOKENS),
            max_usd_per_ping: self.keepalive_max_usd_per_ping.unwrap_or(MAX_USD_PER_PING),
        })
    }

    /// What is wrong with the keep-alive's settings, by key.
    pub(super) fn keepalive_problems(&self) -> Vec<(&'static str, &'static str)> {
        let mut problems = Vec::new();
        if let Some(idle) = self.keepalive_idle_seconds
            && !(1..KeepAlive::LIFETIME.as_secs()).contains(&idle)
        {
            problems.push((
                "cache.keepalive_idle_seconds",
                "must be between 1 and 299: a ping must land before the provider's 300-second entry expires",
            ));
        }
        if self.keepalive_max_pings == Some(0) {
            problems.push((
                "cache.keepalive_max_pings",
                "must be at least 1 (to send none, set `keepalive: false`)",
            ));
        }
        if self
            .keepalive_max_usd_per_ping
            .is_some_and(|usd| !(usd.is_finite() && usd > 0.0))
        {
            problems.push(("cache.keepalive_max_usd_per_ping", "must be above 0"));
        }
        problems
    }
}
