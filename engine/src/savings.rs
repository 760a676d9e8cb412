//! The savings figures sluice reports, defined here once for every place that shows them
//! (`/stats` and `/metrics` through `modes::stats`, the dashboard's API and page, and `sluice
//! replay`'s report, JSON and charts). They live in the pure core because it is the one crate
//! all of those depend on, so none of them can define a figure a second time.
//!
//! **Billed input saved, net** ([`BilledSaving`]) is the headline: what the provider billed
//! with sluice against what it would have billed without, in input-token equivalents (fresh
//! input 1, a cache read [`READ_PRICE`], a cache write [`WRITE_PRICE`]), expand rounds
//! included. The bill with sluice is the provider's own report for each request; the bill
//! without it is that report plus what the cuts kept off it, less what sluice added and
//! caused. Every term but the rounds is settled by the session's cost guard (`modes::guard`)
//! from the provider's report for the same request; a round is charged as the expand loop
//! counts it (its whole prompt re-read, the originals sent), from the last report's prompt. The
//! proxy and `sluice replay` (whose cost model plays the provider) add the same terms the same
//! way:
//!
//! ```text
//! without = billed + cut − declared − missed
//! billed input saved, net = (cut − declared − missed − rounds) / without
//! ```
//!
//! **Content tokens saved, net** ([`NetSaving`]) is the pipeline's own figure beside it: the
//! content tokens sluice kept out of requests the upstream completed, less everything its way
//! back cost them, over the content tokens those requests would have sent. It counts tokens,
//! not their price, and most of an agent's prompt is read from the cache at a tenth of the
//! price, so it reads well above the bill's change:
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
//! Savings are positive and a loss is negative, everywhere. Each figure has one secondary
//! form, **before expand rounds**: the same without the rounds' terms.

/// The price of a prompt token an expand round sends again, against a fresh one.
pub const REREAD_PRICE: f64 = READ_PRICE;

/// A cache read, in input-token equivalents: a tenth of a fresh token (Anthropic's, and the
/// cost model's, rate; OpenAI's and Gemini's lie between a tenth and a half).
pub const READ_PRICE: f64 = 0.1;

/// A cache write, in input-token equivalents (Anthropic's five-minute rate). A provider that
/// reports no cache writes (OpenAI, Gemini) bills new input as fresh, 1.
pub const WRITE_PRICE: f64 = 1.25;

/// The billed saving's sums, in input-token equivalents (see the module docs). Each turn that
/// ran the pipeline adds its terms when the provider's report for its request settles it, and
/// each expand round adds its cost; a request the upstream did not complete reports no usage
/// and adds nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BilledSaving {
    /// Requests settled: each added the provider's bill for it.
    pub requests: u64,
    /// What the provider billed for those requests as sluice forwarded them: fresh input, cache
    /// reads and cache writes (output is the model's, the same with sluice or without).
    pub billed: f64,
    /// What the cuts kept off the bill: content cut from messages the provider had cached, at
    /// the read price, and from messages new to its cache, at the write price (fresh input's
    /// where the provider bills no writes).
    pub cut: f64,
    /// The expand tool's declaration sluice added, at the price its request paid for it: the
    /// read price when the request read its prefix from the cache, else the write price.
    pub declared: f64,
    /// Cache writes sluice caused: on a warm turn that re-wrote part of the cached prefix, what
    /// the provider read back short of what it had cached, at the write price less the read.
    pub missed: f64,
    /// Expand rounds: each round's prompt read again, and the originals it restored written.
    pub rounds: f64,
}

impl BilledSaving {
    /// Adds another set of sums (a request, a round, a session).
    pub fn add(&mut self, other: &BilledSaving) {
        self.requests += other.requests;
        self.billed += other.billed;
        self.cut += other.cut;
        self.declared += other.declared;
        self.missed += other.missed;
        self.rounds += other.rounds;
    }

    /// What was added to these sums since they were `before` (a session's ledger before and
    /// after one settled request or round).
    pub fn since(&self, before: &BilledSaving) -> BilledSaving {
        BilledSaving {
            requests: self.requests - before.requests,
            billed: self.billed - before.billed,
            cut: self.cut - before.cut,
            declared: self.declared - before.declared,
            missed: self.missed - before.missed,
            rounds: self.rounds - before.rounds,
        }
    }

    /// What the same requests would have been billed without sluice: the bill, plus what the
    /// cuts kept off it, less what sluice added to it (the declaration, the re-writes it
    /// caused). Expand rounds are sluice's own calls: without sluice there are none.
    pub fn baseline(&self) -> f64 {
        (self.billed + self.cut - self.declared - self.missed).max(0.0)
    }

    /// Saved before expand rounds, in input-token equivalents.
    pub fn gross(&self) -> f64 {
        self.cut - self.declared - self.missed
    }

    /// Saved net: before expand rounds, less them. Below zero when sluice cost more than it
    /// saved.
    pub fn net(&self) -> f64 {
        self.gross() - self.rounds
    }

    /// The headline, billed input saved, net, in percent of [`BilledSaving::baseline`] (0
    /// without data).
    pub fn net_pct(&self) -> f64 {
        percent_of(self.net(), self.baseline())
    }

    /// Billed input saved before expand rounds, in percent (0 without data).
    pub fn gross_pct(&self) -> f64 {
        percent_of(self.gross(), self.baseline())
    }
}

/// What a provider billed a request's input, split by tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InputBill {
    /// Input billed at the fresh price (neither read from the cache nor written to it).
    pub fresh: u64,
    pub read: u64,
    /// `None` where the provider reports no cache writes (OpenAI, Gemini): its new input is in
    /// `fresh`.
    pub written: Option<u64>,
}

impl InputBill {
    /// Its price in input-token equivalents.
    pub fn cost(&self) -> f64 {
        self.fresh as f64
            + self.read as f64 * READ_PRICE
            + self.written.unwrap_or(0) as f64 * WRITE_PRICE
    }

    /// The price of a token new to the cache on this provider: a write where it bills writes,
    /// else fresh input.
    pub fn new_price(&self) -> f64 {
        if self.written.is_some() {
            WRITE_PRICE
        } else {
            1.0
        }
    }
}

fn percent_of(part: f64, whole: f64) -> f64 {
    if whole <= 0.0 {
        0.0
    } else {
        100.0 * part / whole
    }
}

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

    #[test]
    fn billed_net_is_the_bill_against_the_bill_without_sluice() {
        assert_eq!(BilledSaving::default().net_pct(), 0.0, "no data reads 0");
        let anthropic = InputBill {
            fresh: 10,
            read: 9_000,
            written: Some(1_000),
        };
        assert_eq!(anthropic.cost(), 10.0 + 900.0 + 1_250.0);
        assert_eq!(anthropic.new_price(), WRITE_PRICE);
        let openai = InputBill {
            fresh: 1_000,
            read: 9_000,
            written: None,
        };
        assert_eq!(openai.cost(), 1_000.0 + 900.0);
        assert_eq!(openai.new_price(), 1.0);
        let mut s = BilledSaving {
            requests: 1,
            billed: 2_000.0,
            cut: 550.0,
            declared: 50.0,
            missed: 0.0,
            rounds: 0.0,
        };
        // Without sluice: 2,000 billed + 550 kept off − 50 declared = 2,500.
        assert_eq!(s.baseline(), 2_500.0);
        assert_eq!(s.gross_pct(), 20.0);
        assert_eq!(s.net_pct(), 20.0, "no round: net is the gross");
        s.add(&BilledSaving {
            rounds: 250.0,
            ..BilledSaving::default()
        });
        assert_eq!(s.net_pct(), 10.0, "a round is sluice's own call");
        assert_eq!(s.baseline(), 2_500.0, "and no part of the bill without it");
        s.add(&BilledSaving {
            rounds: 500.0,
            ..BilledSaving::default()
        });
        assert_eq!(s.net_pct(), -10.0, "a loss reads negative");
    }
}
