//! A running A/B experiment in `/stats` (`ab_*`) and `/metrics` (`cg_ab_*`): each arm's
//! sessions, cost, tokens, turns and errors, and the treatment's difference with its interval,
//! as last read from the store (`crate::experiment::Book`, every ten seconds). One table
//! ([`AB_FIELDS`]), like the other sections. Per agent and per model: `GET /ab`.

use std::sync::Arc;

use modes::experiment::{ArmSummary, Findings};
use modes::stats::table::{Field, MetricType, Num};

use crate::store_stats::count;

/// What the rows read: the latest report, and the book's own write counts.
#[derive(Debug, Default)]
pub struct AbView {
    pub report: Option<Arc<Findings>>,
    pub running: bool,
    pub written: u64,
    pub lost: u64,
}

impl AbView {
    fn control(&self) -> ArmSummary {
        self.report
            .as_ref()
            .map(|r| r.overall.control.clone())
            .unwrap_or_default()
    }

    fn treatment(&self) -> ArmSummary {
        self.report
            .as_ref()
            .map(|r| r.overall.treatment.clone())
            .unwrap_or_default()
    }

    /// Whether the report has a difference yet (each arm two finished sessions).
    fn known(&self) -> bool {
        self.report
            .as_ref()
            .is_some_and(|r| r.overall.difference.is_some())
    }

    /// A field of the difference; 0 while there is none (`ab_difference_known` says which).
    fn difference(&self, f: fn(&modes::experiment::Difference) -> f64) -> Num {
        Num::Real(
            self.report
                .as_ref()
                .and_then(|r| r.overall.difference.as_ref())
                .map_or(0.0, f),
        )
    }
}

const fn row(
    json: &'static str,
    metric: &'static str,
    labels: &'static str,
    kind: MetricType,
    unit: &'static str,
    help: &'static str,
    value: fn(&AbView) -> Num,
) -> Field<AbView> {
    Field {
        json: Some(json),
        metric: Some(metric),
        labels,
        kind,
        unit,
        help,
        value,
    }
}

use MetricType::{Counter, Gauge};

/// One arm's row of a series labelled by arm, read from the arm's summary.
macro_rules! arm_row {
    ($arm:ident, $json:literal, $metric:literal, $unit:literal, $help:expr, $value:expr) => {
        row(
            $json,
            $metric,
            concat!("arm=\"", stringify!($arm), "\""),
            Gauge,
            $unit,
            $help,
            |v| ($value)(&v.$arm()),
        )
    };
}

const SESSIONS: &str =
    "Finished sessions (idle past `experiment.idle_seconds`), by arm: the ones compared.";
const OPEN: &str = "Sessions still going, by arm: shown, not compared.";
const COST: &str = "Provider-reported usage per finished session at list price, each model at its own and pooled across models, by arm.";
const TOKENS: &str = "Provider-reported tokens (input, cache reads and writes, output) per finished session, by arm.";
const TURNS: &str = "The agent's requests per finished session, by arm.";
const ERRORS: &str = "Turns that ended in an error, of all turns of finished sessions, by arm.";
const NO_USAGE: &str =
    "Turns whose reply reported no usage (cost unknown, never counted as zero), by arm.";
const DIFFERENCE: &str = "The treatment's cost per finished session over the control's, minus one (-0.12: 12% cheaper), and the ends of its bootstrap 95% interval; 0 until each arm has two finished sessions.";

fn sessions(s: &ArmSummary) -> Num {
    count(s.sessions)
}
fn open(s: &ArmSummary) -> Num {
    count(s.open)
}
fn cost(s: &ArmSummary) -> Num {
    Num::Real(s.cost_per_session)
}
fn tokens(s: &ArmSummary) -> Num {
    Num::Real(s.tokens_per_session)
}
fn turns(s: &ArmSummary) -> Num {
    Num::Real(s.turns_per_session)
}
fn errors(s: &ArmSummary) -> Num {
    Num::Real(s.error_rate)
}
fn no_usage(s: &ArmSummary) -> Num {
    count(s.no_usage_turns)
}

/// Rows sharing a series stand together: the series' help and type come from its first row.
pub static AB_FIELDS: &[Field<AbView>] = &[
    row(
        "ab_running",
        "cg_ab_running",
        "",
        Gauge,
        "0/1",
        "1 while an experiment splits sessions and records them (`--ab`, `experiment:`); 0 without one, or once it has ended with a winner (its report still shown).",
        |v| count(u64::from(v.running)),
    ),
    arm_row!(
        control,
        "ab_control_sessions",
        "cg_ab_sessions",
        "sessions",
        SESSIONS,
        sessions
    ),
    arm_row!(
        treatment,
        "ab_treatment_sessions",
        "cg_ab_sessions",
        "sessions",
        SESSIONS,
        sessions
    ),
    arm_row!(
        control,
        "ab_control_open_sessions",
        "cg_ab_open_sessions",
        "sessions",
        OPEN,
        open
    ),
    arm_row!(
        treatment,
        "ab_treatment_open_sessions",
        "cg_ab_open_sessions",
        "sessions",
        OPEN,
        open
    ),
    arm_row!(
        control,
        "ab_control_cost_per_session_usd",
        "cg_ab_cost_per_session_usd",
        "USD",
        COST,
        cost
    ),
    arm_row!(
        treatment,
        "ab_treatment_cost_per_session_usd",
        "cg_ab_cost_per_session_usd",
        "USD",
        COST,
        cost
    ),
    arm_row!(
        control,
        "ab_control_tokens_per_session",
        "cg_ab_tokens_per_session",
        "tokens",
        TOKENS,
        tokens
    ),
    arm_row!(
        treatment,
        "ab_treatment_tokens_per_session",
        "cg_ab_tokens_per_session",
        "tokens",
        TOKENS,
        tokens
    ),
    arm_row!(
        control,
        "ab_control_turns_per_session",
        "cg_ab_turns_per_session",
        "turns",
        TURNS,
        turns
    ),
    arm_row!(
        treatment,
        "ab_treatment_turns_per_session",
        "cg_ab_turns_per_session",
        "turns",
        TURNS,
        turns
    ),
    arm_row!(
        control,
        "ab_control_error_rate",
        "cg_ab_error_rate",
        "ratio",
        ERRORS,
        errors
    ),
    arm_row!(
        treatment,
        "ab_treatment_error_rate",
        "cg_ab_error_rate",
        "ratio",
        ERRORS,
        errors
    ),
    arm_row!(
        control,
        "ab_control_no_usage_turns",
        "cg_ab_no_usage_turns",
        "turns",
        NO_USAGE,
        no_usage
    ),
    arm_row!(
        treatment,
        "ab_treatment_no_usage_turns",
        "cg_ab_no_usage_turns",
        "turns",
        NO_USAGE,
        no_usage
    ),
    row(
        "ab_difference_known",
        "cg_ab_difference_known",
        "",
        Gauge,
        "0/1",
        "1 once each arm has two finished sessions and the difference below means something; 0 before (the difference rows then read 0).",
        |v| count(u64::from(v.known())),
    ),
    row(
        "ab_difference",
        "cg_ab_difference",
        "bound=\"estimate\"",
        Gauge,
        "ratio",
        DIFFERENCE,
        |v| v.difference(|d| d.relative),
    ),
    row(
        "ab_difference_low",
        "cg_ab_difference",
        "bound=\"low\"",
        Gauge,
        "ratio",
        DIFFERENCE,
        |v| v.difference(|d| d.low),
    ),
    row(
        "ab_difference_high",
        "cg_ab_difference",
        "bound=\"high\"",
        Gauge,
        "ratio",
        DIFFERENCE,
        |v| v.difference(|d| d.high),
    ),
    row(
        "ab_more_sessions_per_arm",
        "cg_ab_more_sessions_per_arm",
        "",
        Gauge,
        "sessions",
        "Finished sessions each arm still needs before the interval should exclude zero, at the difference seen so far: 0 when it does already (or, with `ab_difference_known` 0, when nothing is known yet, or no difference is seen).",
        |v| {
            count(
                v.report
                    .as_ref()
                    .and_then(|r| r.overall.difference.as_ref())
                    .and_then(|d| d.more_sessions_per_arm)
                    .unwrap_or(0),
            )
        },
    ),
    row(
        "ab_rows_written",
        "cg_ab_rows_written_total",
        "",
        Counter,
        "requests",
        "Requests this process added to their session's experiment row.",
        |v| count(v.written),
    ),
    row(
        "ab_rows_lost",
        "cg_ab_rows_lost_total",
        "",
        Counter,
        "requests",
        "Requests whose row the store did not take (their measurement is lost, nothing else).",
        |v| count(v.lost),
    ),
];
