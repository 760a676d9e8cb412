//! What an A/B experiment found (`sluice serve --ab`): its rows (`store::Spend`, one per
//! session and model) grouped into sessions, summed per arm, and the treatment's difference in
//! cost per session with a bootstrap interval. Pure: the rows and the clock are passed in, so
//! `/ab`, `/stats`, the dashboard and `sluice ab report` show one computation.
//!
//! The analysis is intention-to-treat: a treatment session counts whole, including its turns
//! that sluice left untouched (a bypass, a store outage), because that is what a user who turns
//! sluice on gets.

use std::collections::BTreeMap;

use engine::config::Arm;
use serde::Serialize;
use store::Spend;

/// An output token, in input-token equivalents, where a model has no list price here: Claude's
/// ratio (GPT-5's is 8, GPT-4.1's 4). Cache reads and writes are `engine::savings`'.
const OUTPUT_PRICE: f64 = 5.0;

/// Resamples for the interval: enough that its ends move by well under a percentage point
/// between runs of different seeds at a few dozen sessions an arm.
const RESAMPLES: usize = 2000;

/// One session, its rows summed.
#[derive(Debug, Clone, Default, PartialEq)]
struct Session {
    arm: Option<Arm>,
    agent: String,
    /// Dollars at list price.
    cost: f64,
    /// The same tokens in input-token equivalents (for models without a list price).
    equivalents: f64,
    tokens: u64,
    totals: Totals,
    turns: u64,
    errors: u64,
    no_usage: u64,
    unpriced: u64,
    expand_rounds: u64,
    retries: u64,
    open: bool,
}

impl Session {
    fn add(&mut self, row: &Spend) {
        self.arm = self.arm.or_else(|| Arm::named(&row.arm));
        if self.agent.is_empty() {
            self.agent.clone_from(&row.agent);
        }
        self.cost += row.cost_micros as f64 / 1e6;
        self.equivalents += row.input as f64
            + row.cache_read as f64 * engine::savings::READ_PRICE
            + row.cache_write as f64 * engine::savings::WRITE_PRICE
            + row.output as f64 * OUTPUT_PRICE;
        self.tokens += row.input + row.cache_read + row.cache_write + row.output;
        self.turns += row.turns;
        self.errors += row.errors;
        self.no_usage += row.no_usage;
        self.unpriced += row.unpriced;
        self.expand_rounds += row.expand_rounds;
        self.retries += row.retries;
        self.totals.add(&Totals {
            turns: row.turns,
            input: row.input,
            cache_read: row.cache_read,
            cache_write: row.cache_write,
            output: row.output,
            cost_usd: row.cost_micros as f64 / 1e6,
            expand_rounds: row.expand_rounds,
        });
    }
}

/// One arm of one group.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ArmSummary {
    /// Sessions idle past `experiment.idle_seconds`: they count in the comparison.
    pub sessions: u64,
    /// Sessions still going: shown, not compared.
    pub open: u64,
    /// Finished sessions with a turn whose reply reported no usage: their cost is unknown, so
    /// they are left out of the cost, token and difference figures (counted, never zero).
    pub unknown_cost_sessions: u64,
    pub cost_per_session: f64,
    /// Input-token equivalents per finished session: input 1, a cache read 0.1, a cache write
    /// 1.25, an output token 5 (what the difference is judged on when a model has no price).
    pub equivalents_per_session: f64,
    pub tokens_per_session: f64,
    pub turns_per_session: f64,
    pub expand_rounds_per_session: f64,
    pub retries_per_session: f64,
    /// Turns that ended in an error, of all turns.
    pub error_rate: f64,
    /// Turns answered without a usage report (their cost is unknown, not zero; a refused
    /// request, billed nothing, is an error instead).
    pub no_usage_turns: u64,
    /// Turns of a model without a list price here (tokens counted, dollars not).
    pub unpriced_turns: u64,
    /// What every session of the arm was billed, open ones included.
    pub totals: Totals,
    #[serde(skip)]
    costs: Vec<f64>,
    #[serde(skip)]
    equivalents: Vec<f64>,
}

/// Provider-reported tokens and their list-price dollars, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Totals {
    pub turns: u64,
    /// Input not read from the cache.
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
    pub cost_usd: f64,
    pub expand_rounds: u64,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        self.turns += other.turns;
        self.input += other.input;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.output += other.output;
        self.cost_usd += other.cost_usd;
        self.expand_rounds += other.expand_rounds;
    }
}

impl ArmSummary {
    fn of(sessions: &[&Session]) -> ArmSummary {
        let finished: Vec<&&Session> = sessions.iter().filter(|s| !s.open).collect();
        // A session with a turn of unknown cost (a reply without usage) is counted, and left
        // out of what it cost: an unknown is never zero.
        let known: Vec<&&Session> = finished
            .iter()
            .copied()
            .filter(|s| s.no_usage == 0)
            .collect();
        let average = |of: &[&&Session], f: &dyn Fn(&Session) -> f64| {
            if of.is_empty() {
                0.0
            } else {
                of.iter().map(|s| f(s)).sum::<f64>() / of.len() as f64
            }
        };
        let mean = |f: &dyn Fn(&Session) -> f64| average(&finished, f);
        let known_mean = |f: &dyn Fn(&Session) -> f64| average(&known, f);
        let turns: u64 = finished.iter().map(|s| s.turns).sum();
        let errors: u64 = finished.iter().map(|s| s.errors).sum();
        ArmSummary {
            sessions: finished.len() as u64,
            open: (sessions.len() - finished.len()) as u64,
            unknown_cost_sessions: (finished.len() - known.len()) as u64,
            cost_per_session: known_mean(&|s| s.cost),
            equivalents_per_session: known_mean(&|s| s.equivalents),
            tokens_per_session: known_mean(&|s| s.tokens as f64),
            turns_per_session: mean(&|s| s.turns as f64),
            expand_rounds_per_session: mean(&|s| s.expand_rounds as f64),
            retries_per_session: mean(&|s| s.retries as f64),
            error_rate: if turns == 0 {
                0.0
            } else {
                errors as f64 / turns as f64
            },
            no_usage_turns: finished.iter().map(|s| s.no_usage).sum(),
            unpriced_turns: finished.iter().map(|s| s.unpriced).sum(),
            totals: sessions.iter().fold(Totals::default(), |mut sum, s| {
                sum.add(&s.totals);
                sum
            }),
            costs: known.iter().map(|s| s.cost).collect(),
            equivalents: known.iter().map(|s| s.equivalents).collect(),
        }
    }
}

/// The treatment against the control, in cost per finished session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    /// What is compared per session: `usd` (list prices), or `input_token_equivalents` when
    /// some compared turn's model has no list price here.
    pub basis: &'static str,
    /// Treatment over control, minus one: −0.12 is 12% cheaper.
    pub relative: f64,
    /// The bootstrap 95% interval of `relative`.
    pub low: f64,
    pub high: f64,
    /// Whether the interval excludes zero.
    pub settled: bool,
    /// Finished sessions each arm still needs before the interval should exclude zero, at the
    /// difference seen so far (the interval narrows as one over the square root of the
    /// sessions); 0 once it does, absent when no difference is seen at all.
    pub more_sessions_per_arm: Option<u64>,
}

/// Both arms of one group of sessions (all, one agent, one model).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    pub name: String,
    pub control: ArmSummary,
    pub treatment: ArmSummary,
    /// Absent until each arm has two finished sessions (and the control a cost).
    pub difference: Option<Difference>,
}

impl Group {
    fn of(name: String, sessions: &[&Session]) -> Group {
        let arm = |arm: Arm| -> Vec<&Session> {
            sessions
                .iter()
                .copied()
                .filter(|s| s.arm == Some(arm))
                .collect()
        };
        let control = ArmSummary::of(&arm(Arm::Control));
        let treatment = ArmSummary::of(&arm(Arm::Treatment));
        // Dollars when every compared turn has a list price; else every session in input-token
        // equivalents, so an unpriced model is neither free nor left out.
        let priced = control.unpriced_turns + treatment.unpriced_turns == 0;
        let difference = if priced {
            difference(&control.costs, &treatment.costs, "usd")
        } else {
            difference(
                &control.equivalents,
                &treatment.equivalents,
                "input_token_equivalents",
            )
        };
        Group {
            name,
            control,
            treatment,
            difference,
        }
    }
}

/// What the experiment found so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Findings {
    pub experiment: String,
    /// Every session, each model's tokens at that model's own list price: a cost pooled
    /// across models, and said to be.
    pub overall: Group,
    /// By the agent's family (its user-agent).
    pub by_agent: Vec<Group>,
    /// By model: each session's cost under that model only.
    pub by_model: Vec<Group>,
}

impl Findings {
    /// The report of `rows` at `now_ms`: a session whose last request is older than `idle_ms`
    /// is finished.
    pub fn of(experiment: &str, rows: &[Spend], now_ms: u64, idle_ms: u64) -> Findings {
        let open = |last_ms: u64| now_ms.saturating_sub(last_ms) < idle_ms;
        let mut sessions: BTreeMap<&str, Session> = BTreeMap::new();
        let mut last: BTreeMap<&str, u64> = BTreeMap::new();
        for row in rows {
            sessions.entry(&row.session).or_default().add(row);
            let at = last.entry(&row.session).or_default();
            *at = (*at).max(row.last_ms);
        }
        for (name, session) in &mut sessions {
            session.open = open(last[name]);
        }
        let all: Vec<&Session> = sessions.values().collect();
        let overall = Group::of("all models, each at its own list price".to_owned(), &all);
        let mut agents: BTreeMap<&str, Vec<&Session>> = BTreeMap::new();
        for session in sessions.values() {
            agents.entry(&session.agent).or_default().push(session);
        }
        let by_agent = capped(agents.into_iter().map(|(a, s)| (a.to_owned(), s)).collect())
            .into_iter()
            .map(|(agent, s)| Group::of(agent, &s))
            .collect();
        // A model's group: each session's row for that model, open as its session is.
        let mut models: BTreeMap<&str, Vec<Session>> = BTreeMap::new();
        for row in rows {
            let mut session = Session::default();
            session.add(row);
            session.open = sessions[row.session.as_str()].open;
            models.entry(&row.model).or_default().push(session);
        }
        let models = models
            .iter()
            .map(|(model, s)| {
                let name = if model.is_empty() { "unknown" } else { model };
                (name.to_owned(), s.iter().collect::<Vec<_>>())
            })
            .collect();
        let by_model = capped(models)
            .into_iter()
            .map(|(model, s)| Group::of(model, &s))
            .collect();
        Findings {
            experiment: experiment.to_owned(),
            overall,
            by_agent,
            by_model,
        }
    }
}

/// Groups a report shows at most, by sessions: agents and models are named by their callers,
/// so a caller could otherwise make the report as long as it liked.
const MAX_GROUPS: usize = 24;

/// `groups` (name, sessions), the largest [`MAX_GROUPS`] − 1 kept by name and the rest as
/// one, `other`, when there are more; in name order.
fn capped<'s>(mut groups: Vec<(String, Vec<&'s Session>)>) -> Vec<(String, Vec<&'s Session>)> {
    if groups.len() <= MAX_GROUPS {
        return groups;
    }
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    let rest: Vec<&Session> = groups
        .drain(MAX_GROUPS - 1..)
        .flat_map(|(_, sessions)| sessions)
        .collect();
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    groups.push(("other".to_owned(), rest));
    groups
}

/// The relative difference of the means and its bootstrap interval (percentiles of
/// [`RESAMPLES`] resamples of each arm, a fixed seed so that a report reads the same twice).
fn difference(control: &[f64], treatment: &[f64], basis: &'static str) -> Option<Difference> {
    if control.len() < 2 || treatment.len() < 2 {
        return None;
    }
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let base = mean(control);
    if base <= 0.0 {
        return None;
    }
    let relative = mean(treatment) / base - 1.0;
    let mut random = SplitMix(0x5eed ^ (control.len() as u64) << 32 ^ treatment.len() as u64);
    let mut resample = |xs: &[f64]| {
        let n = xs.len();
        (0..n).map(|_| xs[random.below(n)]).sum::<f64>() / n as f64
    };
    let mut draws: Vec<f64> = (0..RESAMPLES)
        .filter_map(|_| {
            let c = resample(control);
            let t = resample(treatment);
            (c > 0.0).then(|| t / c - 1.0)
        })
        .collect();
    draws.sort_by(f64::total_cmp);
    let at = |q: f64| draws[((draws.len() - 1) as f64 * q).round() as usize];
    let (low, high) = (at(0.025), at(0.975));
    let settled = low > 0.0 || high < 0.0;
    let n = control.len().min(treatment.len()) as f64;
    let half = (high - low) / 2.0;
    let more_sessions_per_arm = if settled {
        Some(0)
    } else if relative == 0.0 {
        None
    } else {
        Some(((n * (half / relative).powi(2)).ceil() - n).max(1.0) as u64)
    };
    Some(Difference {
        basis,
        relative,
        low,
        high,
        settled,
        more_sessions_per_arm,
    })
}

/// A small, seeded generator (SplitMix64): the interval needs uniform draws, not secrecy.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((u128::from(z) * n as u128) >> 64) as usize
    }
}

/// The report as a person reads it (`sluice ab report`).
pub fn render(report: &Findings) -> String {
    use std::fmt::Write;
    let mut out = format!("experiment `{}`\n", report.experiment);
    let group = |out: &mut String, prefix: &str, g: &Group| {
        let _ = writeln!(out, "\n{prefix}{}", g.name);
        let _ = writeln!(
            out,
            "  {:<10} {:>9} {:>5} {:>12} {:>14} {:>8} {:>8} {:>9} {:>9}",
            "arm",
            "sessions",
            "open",
            "$/session",
            "tokens/session",
            "turns",
            "errors",
            "no usage",
            "unpriced"
        );
        for (arm, s) in [("control", &g.control), ("treatment", &g.treatment)] {
            let _ = writeln!(
                out,
                "  {:<10} {:>9} {:>5} {:>12.4} {:>14.0} {:>8.1} {:>7.1}% {:>9} {:>9}",
                arm,
                s.sessions,
                s.open,
                s.cost_per_session,
                s.tokens_per_session,
                s.turns_per_session,
                s.error_rate * 100.0,
                s.no_usage_turns,
                s.unpriced_turns
            );
        }
        let _ = match &g.difference {
            None => writeln!(
                out,
                "  difference: not yet (each arm needs two finished sessions)"
            ),
            Some(d) => writeln!(
                out,
                "  treatment {:+.1}% {} per session, 95% interval {:+.1}% to {:+.1}%: {}",
                d.relative * 100.0,
                match d.basis {
                    "usd" => "cost",
                    _ => "input-token equivalents (a model has no list price here)",
                },
                d.low * 100.0,
                d.high * 100.0,
                match (d.settled, d.more_sessions_per_arm) {
                    (true, _) => "settled".to_owned(),
                    (false, Some(n)) => format!("about {n} more finished sessions per arm"),
                    (false, None) => "no difference seen".to_owned(),
                }
            ),
        };
    };
    group(&mut out, "", &report.overall);
    for g in &report.by_agent {
        group(&mut out, "agent ", g);
    }
    for g in &report.by_model {
        group(&mut out, "model ", g);
    }
    out
}

#[cfg(test)]
mod tests;
