//! The net saving: the one savings figure sluice reports, defined here once for every place that
//! shows it (`/stats` and `/metrics` through `modes::stats`, the dashboard's API and page, and
//! `sluice replay`'s report, JSON and charts). It lives in the pure core because it is the one
//! crate all of them depend on, so none of them can define it a second time.
//!
//! **Net saved** is the content tokens sluice kept out of requests the upstream completed, less
//! everything its way back cost them, over the content tokens those requests would have sent:
//!
//! ```text
//! net saved = (tokens_before − tokens_after − declared − restored − 0.1 × reread) / tokens_before
//! ```
//!
//! - `declared`: the expand tool's declaration sluice added to a request, sent on every turn of
//!   an agent a lossy pipeline may cut (a session where nothing was cut reads a small loss).
//! - `restored`: the originals expand rounds sent back.
//! - `reread`: the prompt each expand round sent again, at the cache-read price (0.1 of a fresh
//!   token): the round follows the request's own call, which has just cached it.
//!
//! Savings are positive and a loss is negative, everywhere. **Saved before expand rounds** (the
//! one secondary figure) is the same without `restored` and `reread`.
//!
//! Why tokens, not money: the live proxy can measure every term (the pipeline's report, the
//! declaration it spliced in, the rounds its expand loop ran), while a money figure needs the
//! bill of a request that was never sent (what the provider would have cached without sluice),
//! which only `sluice replay`'s cost model can simulate. Replay still bills both arms on that
//! model and reports the billed change beside the headline, as a secondary figure.

/// The price of a prompt token an expand round sends again, against a fresh one.
pub const REREAD_PRICE: f64 = 0.1;

/// The sums the net saving is computed from. Every host adds the same terms: a request the
/// upstream completed adds its report's counts and its declaration, and each expand round adds
/// what it restored and re-read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct NetSaving {
    /// Content tokens of the requests as the agent sent them.
    pub tokens_before: u64,
    /// Content tokens of the requests as sluice forwarded them.
    pub tokens_after: u64,
    /// Tokens of the expand tool's declaration sluice added to them.
    pub declared_tokens: u64,
    /// Tokens of originals expand rounds restored.
    pub restored_tokens: u64,
    /// Prompt tokens expand rounds sent upstream again.
    pub reread_tokens: u64,
}

impl NetSaving {
    /// Adds another set of sums (a request, a round, a session).
    pub fn add(&mut self, other: &NetSaving) {
        self.tokens_before += other.tokens_before;
        self.tokens_after += other.tokens_after;
        self.declared_tokens += other.declared_tokens;
        self.restored_tokens += other.restored_tokens;
        self.reread_tokens += other.reread_tokens;
    }

    /// Content tokens the cuts kept out (the pipeline's own saving, before any cost).
    pub fn cut_tokens(&self) -> u64 {
        self.tokens_before.saturating_sub(self.tokens_after)
    }

    /// What the way back cost after the declaration: the rounds' restored originals and their
    /// re-read prompts, in input-token equivalents.
    pub fn rounds_cost(&self) -> f64 {
        self.restored_tokens as f64 + REREAD_PRICE * self.reread_tokens as f64
    }

    /// Tokens saved before expand rounds: the cut less the declaration. Below zero when the
    /// declaration cost more than the cuts saved.
    pub fn gross_tokens(&self) -> f64 {
        self.cut_tokens() as f64 - self.declared_tokens as f64
    }

    /// Net saved, in input-token equivalents; below zero when sluice cost more than it saved.
    pub fn net_tokens(&self) -> f64 {
        self.gross_tokens() - self.rounds_cost()
    }

    /// The headline: net saved, in percent of `tokens_before` (0 without data, never a made-up
    /// 100%).
    pub fn net_pct(&self) -> f64 {
        percent(self.net_tokens(), self.tokens_before)
    }

    /// Saved before expand rounds, in percent of `tokens_before` (0 without data).
    pub fn gross_pct(&self) -> f64 {
        percent(self.gross_tokens(), self.tokens_before)
    }
}

fn percent(part: f64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_is_the_cut_less_the_declaration_and_the_rounds() {
        let none = NetSaving::default();
        assert_eq!((none.net_pct(), none.gross_pct()), (0.0, 0.0));
        let mut s = NetSaving {
            tokens_before: 4000,
            tokens_after: 3600,
            declared_tokens: 100,
            restored_tokens: 0,
            reread_tokens: 0,
        };
        assert_eq!(s.gross_pct(), 7.5);
        assert_eq!(s.net_pct(), 7.5, "no round: net is the gross");
        s.add(&NetSaving {
            restored_tokens: 100,
            reread_tokens: 1000,
            ..NetSaving::default()
        });
        // 400 cut − 100 declared − 100 restored − 0.1 × 1000 re-read = 100 of 4000.
        assert_eq!(s.net_pct(), 2.5);
        assert_eq!(s.gross_pct(), 7.5);
        // Nothing cut: the declaration alone is a loss, and it reads negative.
        let idle = NetSaving {
            tokens_before: 1000,
            tokens_after: 1000,
            declared_tokens: 4,
            ..NetSaving::default()
        };
        assert_eq!(idle.net_pct(), -0.4);
    }
}
