//! The keep-alive on the recorded clock (`cache.keepalive`): after each turn worth a ping
//! (`crate::keepalive::eligible`), the next quiet gap gets the pings the rule sends, the
//! session's tracker hears of each as the proxy's keeper tells it, and a gap the pings kept
//! bills its turn's prefix as read. What the pings cost and spared goes on the session's own
//! ledger ([`Ledger`]), not into the headline: live, the headline is what each turn's report
//! says, and a ping is not a turn.

use std::time::Duration;

use engine::config::KeepAlive;
use engine::wire::Dialect;

use super::bill::{Billable, bill};
use crate::keepalive::{After, Gap, Ledger, asks_for_the_hour, eligible, gap, thinking_enabled};
use crate::session::SessionState;
use crate::turn::{Forward, TurnService};

/// The keep-alive of one replayed session.
pub(super) struct Pinger {
    rule: KeepAlive,
    dialect: Dialect,
    /// After the latest turn, when it was worth a ping: its session and the prefix a ping reads.
    after: Option<(String, u64)>,
    pub(super) ledger: Ledger,
}

impl Pinger {
    pub(super) fn new(rule: KeepAlive, dialect: Dialect) -> Pinger {
        Pinger {
            rule,
            dialect,
            after: None,
            ledger: Ledger::default(),
        }
    }

    /// The quiet gap from `last_at` to `now`, before the turn that ends it runs: the pings go
    /// to the session's tracker at their own times.
    async fn quiet(&mut self, service: &TurnService, last_at: Duration, now: Duration) -> Gap {
        let Some((session, _)) = &self.after else {
            return Gap::default();
        };
        // The pinged turn's entry: the five-minute one (`eligible` leaves the hour's out).
        let gap = gap(&self.rule, now.saturating_sub(last_at), KeepAlive::LIFETIME);
        if let Some(sessions) = service.sessions() {
            for i in 1..=gap.pings {
                let at = last_at + self.rule.idle * i;
                sessions.apply(session, move |state: &mut SessionState| {
                    state.tracker.kept_alive(at);
                });
            }
        }
        gap
    }

    /// Books `gap`, ended by a turn that forwarded `forwarded` after `previous`.
    fn book(&mut self, gap: Gap, forwarded: &Billable, previous: Option<&Billable>) {
        let Some((_, prefix)) = self.after else {
            return;
        };
        let kept = if gap.kept {
            bill(forwarded, previous, true).cache_read as u64
        } else {
            0
        };
        self.ledger.add_gap(gap, prefix, kept);
    }

    /// After turn `k` (from 0) of `session` forwarded `body` (`forwarded` as billed): whether
    /// the next gap gets pings.
    fn after_turn(&mut self, session: &str, k: usize, body: &[u8], forwarded: &Billable) {
        let turn = After {
            dialect: self.dialect,
            turns: k as u64 + 1,
            prefix_tokens: forwarded.tokens() as u64,
            thinking: thinking_enabled(body),
            hour: asks_for_the_hour(body),
            // Replay's prices are relative: a ping is judged on its prefix alone.
            ping_usd: None,
        };
        self.after = eligible(&self.rule, &turn)
            .ok()
            .map(|()| (session.to_owned(), turn.prefix_tokens));
    }
}

/// The quiet gap before a turn at `now` (nothing without the keep-alive, or on a first turn).
pub(super) async fn quiet(
    pinger: &mut Option<Pinger>,
    service: &TurnService,
    last_at: Option<Duration>,
    now: Duration,
) -> Gap {
    match (pinger, last_at) {
        (Some(pinger), Some(last_at)) => pinger.quiet(service, last_at, now).await,
        _ => Gap::default(),
    }
}

/// Books the gap turn `k` ended, and whether the gap after it gets pings.
pub(super) fn turned(
    pinger: &mut Option<Pinger>,
    gap: Gap,
    k: usize,
    applied: &Forward,
    forwarded: &Billable,
    previous: Option<&Billable>,
) {
    if let Some(pinger) = pinger {
        pinger.book(gap, forwarded, previous);
        pinger.after_turn(&applied.session, k, &applied.body, forwarded);
    }
}
