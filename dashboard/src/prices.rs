//! What a request cost, priced when its row is written, and what sluice saved on it.
//!
//! One table of list prices (US dollars per million tokens), matched on the longest model-name
//! prefix. A model the table does not know, or a reply that did not report its usage, is priced
//! as unknown (NULL), never as $0.
//!
//! The money model, per request:
//! - `cost`: what the request was billed (fresh input, cache reads, cache writes, output), plus
//!   the expand rounds it ran, each re-reading the forwarded prompt at the cache-read price and
//!   writing the restored originals at the cache-write price (the rounds' own replies are not
//!   read, so this part is an estimate, the same one `sluice replay` bills).
//! - `saved`: the content tokens sluice removed, priced at the tier the request's new suffix
//!   paid (a cache write when it wrote one, else fresh input): without sluice they would have
//!   been in that suffix. Later turns re-read them at the cache-read price too; that is not
//!   counted here, so the figure is a floor per request. Less the expand tool's declaration
//!   sluice added, at the cache-read price when the request read its prefix from the cache
//!   (the declaration opens it, in `tools`), else at the suffix's.
//! - `net = saved − expand cost`; `baseline = cost + net` (what the same turn would have cost
//!   without sluice). In observe mode `saved` is what sync would have saved (`projected`).
//!
//! These are the terms of the net saving (`engine::savings`), each priced at its tier: the
//! dollars say what the headline's tokens were worth, and no percentage is made of them (the
//! one savings percentage is the token figure, `net_savings_pct`).

/// List prices of one model family, US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    /// OpenAI bills no cache writes: its entry is the input price.
    pub cache_write: f64,
}

const fn anthropic(input: f64, output: f64) -> Price {
    Price {
        input,
        output,
        cache_read: input * 0.1,
        cache_write: input * 1.25,
    }
}

const fn openai(input: f64, cached: f64, output: f64) -> Price {
    Price {
        input,
        output,
        cache_read: cached,
        cache_write: input,
    }
}

/// Model-name prefixes and their prices (list prices, December 2026), longest match wins.
pub const PRICES: &[(&str, Price)] = &[
    // Longer names first where a family's short name is a prefix of another model's.
    ("o3-pro", openai(20.0, 20.0, 80.0)),
    ("o3-mini", openai(1.1, 0.55, 4.4)),
    ("gpt-5-pro", openai(15.0, 15.0, 120.0)),
    ("gpt-4.5", openai(75.0, 37.5, 150.0)),
    ("gpt-4o-audio", openai(2.5, 2.5, 10.0)),
    ("gpt-4o-realtime", openai(5.0, 2.5, 20.0)),
    ("claude-opus-4-5", anthropic(5.0, 25.0)),
    ("claude-opus-4", anthropic(15.0, 75.0)),
    ("claude-sonnet-4", anthropic(3.0, 15.0)),
    ("claude-3-7-sonnet", anthropic(3.0, 15.0)),
    ("claude-3-5-sonnet", anthropic(3.0, 15.0)),
    ("claude-haiku-4", anthropic(1.0, 5.0)),
    ("claude-3-5-haiku", anthropic(0.8, 4.0)),
    ("claude-3-haiku", anthropic(0.25, 1.25)),
    ("gpt-5-nano", openai(0.05, 0.005, 0.4)),
    ("gpt-5-mini", openai(0.25, 0.025, 2.0)),
    ("gpt-5", openai(1.25, 0.125, 10.0)),
    ("gpt-4.1-nano", openai(0.1, 0.025, 0.4)),
    ("gpt-4.1-mini", openai(0.4, 0.1, 1.6)),
    ("gpt-4.1", openai(2.0, 0.5, 8.0)),
    ("gpt-4o-mini", openai(0.15, 0.075, 0.6)),
    ("gpt-4o", openai(2.5, 1.25, 10.0)),
    ("o4-mini", openai(1.1, 0.275, 4.4)),
    ("o3", openai(2.0, 0.5, 8.0)),
    ("gpt-4-turbo", openai(10.0, 10.0, 30.0)),
    ("gpt-4", openai(30.0, 30.0, 60.0)),
    // Google bills no cache write for implicit caching either.
    ("gemini-3-pro", openai(2.0, 0.2, 12.0)),
    ("gemini-2.5-pro", openai(1.25, 0.125, 10.0)),
    ("gemini-2.5-flash", openai(0.3, 0.03, 2.5)),
];

/// The price of `model`. A provider prefix is skipped: `anthropic/` (a gateway), and Bedrock's
/// `anthropic.` or `us.anthropic.` (a region).
pub fn price(model: &str) -> Option<Price> {
    let name = model.rsplit('/').next().unwrap_or(model);
    let name = name
        .find("anthropic.")
        .map_or(name, |at| &name[at + "anthropic.".len()..]);
    PRICES
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, price)| *price)
}

/// A priced request, US dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Priced {
    pub cost: f64,
    pub baseline: f64,
    pub saved: f64,
    pub expand_cost: f64,
    pub net: f64,
}

/// Tokens a request was billed, split by tier (`fresh` excludes cached input).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Billed {
    pub fresh: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
}

/// What sluice did to the request, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    pub saved_tokens: u64,
    /// The expand tool's declaration sluice added.
    pub declared_tokens: u64,
    /// Prompt tokens the request's expand rounds sent again.
    pub reread_tokens: u64,
    /// Tokens of originals those rounds restored.
    pub expand_tokens: u64,
}

/// Prices one request (see the module docs).
pub fn priced(price: &Price, billed: &Billed, work: &Work) -> Priced {
    let per = |tokens: u64, rate: f64| tokens as f64 * rate / 1e6;
    let paid = per(billed.fresh, price.input)
        + per(billed.cache_read, price.cache_read)
        + per(billed.cache_write, price.cache_write)
        + per(billed.output, price.output);
    let suffix_rate = if billed.cache_write > 0 {
        price.cache_write
    } else {
        price.input
    };
    let declared_rate = if billed.cache_read > 0 {
        price.cache_read
    } else {
        suffix_rate
    };
    let saved = per(work.saved_tokens, suffix_rate) - per(work.declared_tokens, declared_rate);
    let expand_cost =
        per(work.reread_tokens, price.cache_read) + per(work.expand_tokens, price.cache_write);
    let net = saved - expand_cost;
    let cost = paid + expand_cost;
    Priced {
        cost,
        baseline: cost + net,
        saved,
        expand_cost,
        net,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins_and_unknown_models_have_no_price() {
        assert_eq!(
            price("claude-opus-4-5-20251101"),
            Some(anthropic(5.0, 25.0))
        );
        assert_eq!(
            price("claude-opus-4-1-20250805"),
            Some(anthropic(15.0, 75.0))
        );
        assert_eq!(
            price("gpt-4o-mini-2024-07-18"),
            Some(openai(0.15, 0.075, 0.6))
        );
        assert_eq!(price("openai/gpt-4o"), Some(openai(2.5, 1.25, 10.0)));
        assert_eq!(price("mock-model"), None);
        assert_eq!(price("o3-mini-2025-01-31"), Some(openai(1.1, 0.55, 4.4)));
        assert_eq!(price("gpt-4.5-preview"), Some(openai(75.0, 37.5, 150.0)));
        assert_eq!(
            price("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            Some(anthropic(3.0, 15.0))
        );
    }

    #[test]
    fn cost_baseline_and_net_add_up() {
        let sonnet = price("claude-sonnet-4-5").unwrap();
        let billed = Billed {
            fresh: 1_000,
            cache_read: 100_000,
            cache_write: 10_000,
            output: 500,
        };
        let work = Work {
            saved_tokens: 20_000,
            declared_tokens: 0,
            reread_tokens: 0,
            expand_tokens: 0,
        };
        let p = priced(&sonnet, &billed, &work);
        // 1k×3 + 100k×0.3 + 10k×3.75 + 500×15, per million.
        assert!((p.cost - 0.078).abs() < 1e-9, "{p:?}");
        // 20k tokens at the cache-write price: the suffix this request wrote.
        assert!((p.saved - 0.075).abs() < 1e-9);
        assert!((p.baseline - (p.cost + p.saved)).abs() < 1e-12);
        let with_round = priced(
            &sonnet,
            &billed,
            &Work {
                reread_tokens: 111_000,
                expand_tokens: 2_000,
                ..work
            },
        );
        // One round: the prompt re-read (111k × 0.3) and 2k written (× 3.75).
        assert!((with_round.expand_cost - (0.0333 + 0.0075)).abs() < 1e-9);
        assert!((with_round.net - (with_round.saved - with_round.expand_cost)).abs() < 1e-12);
        assert!(with_round.net < p.net);
        // The declaration opens the cached prefix: this request read it at 0.3 $/MTok.
        let declared = priced(
            &sonnet,
            &billed,
            &Work {
                declared_tokens: 100,
                ..work
            },
        );
        assert!((p.saved - declared.saved - 100.0 * 0.3 / 1e6).abs() < 1e-12);
    }
}
