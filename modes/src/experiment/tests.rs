use super::*;

const MINUTE: u64 = 60_000;

/// A session's row: `cost` dollars over `turns` turns, last seen at `last_ms`.
fn row(session: &str, arm: Arm, model: &str, cost: f64, turns: u64, last_ms: u64) -> Spend {
    Spend {
        session: session.to_owned(),
        model: model.to_owned(),
        arm: arm.name().to_owned(),
        agent: "claude-code".to_owned(),
        turns,
        input: 1000 * turns,
        output: 100 * turns,
        cost_micros: (cost * 1e6).round() as u64,
        first_ms: 0,
        last_ms,
        ..Spend::default()
    }
}

/// `n` finished sessions an arm, costs spread evenly around `mean` by ±`spread`.
fn arms(n: usize, control: f64, treatment: f64, spread: f64) -> Vec<Spend> {
    let mut rows = Vec::new();
    for i in 0..n {
        let wobble = spread * ((i % 5) as f64 - 2.0) / 2.0;
        rows.push(row(
            &format!("c{i}"),
            Arm::Control,
            "m",
            control + wobble,
            10,
            0,
        ));
        rows.push(row(
            &format!("t{i}"),
            Arm::Treatment,
            "m",
            treatment + wobble,
            9,
            0,
        ));
    }
    rows
}

/// A clear 20% saving over 30 sessions an arm is settled, its interval around it.
#[test]
fn a_clear_saving_is_settled() {
    let report = Findings::of("ab", &arms(30, 1.0, 0.8, 0.1), 100 * MINUTE, 30 * MINUTE);
    let g = &report.overall;
    assert_eq!((g.control.sessions, g.treatment.sessions), (30, 30));
    assert!((g.control.cost_per_session - 1.0).abs() < 1e-9);
    assert!((g.treatment.turns_per_session - 9.0).abs() < 1e-9);
    let d = g.difference.clone().expect("both arms have sessions");
    assert!((d.relative + 0.2).abs() < 1e-9, "{d:?}");
    assert!(d.low < -0.2 && d.high > -0.2 && d.high < 0.0, "{d:?}");
    assert!(d.settled);
    assert_eq!(d.more_sessions_per_arm, Some(0));
}

/// A small difference in noisy costs is not settled, and says how many more sessions it needs
/// (more for a smaller difference); a report reads the same twice.
#[test]
fn a_small_difference_asks_for_more_sessions() {
    let rows = arms(10, 1.0, 0.97, 0.8);
    let report = Findings::of("ab", &rows, 100 * MINUTE, 30 * MINUTE);
    let d = report.overall.difference.clone().unwrap();
    assert!(!d.settled && d.low < 0.0 && d.high > 0.0, "{d:?}");
    let more = d.more_sessions_per_arm.unwrap();
    let bigger = Findings::of("ab", &arms(10, 1.0, 0.9, 0.8), 100 * MINUTE, 30 * MINUTE);
    let fewer = bigger
        .overall
        .difference
        .unwrap()
        .more_sessions_per_arm
        .unwrap();
    assert!(more > fewer && fewer > 0, "{more} vs {fewer}");
    assert_eq!(report, Findings::of("ab", &rows, 100 * MINUTE, 30 * MINUTE));
}

/// Open sessions are counted as open and left out of the comparison; an arm with fewer than
/// two finished sessions has no difference yet.
#[test]
fn open_sessions_are_shown_not_compared() {
    let mut rows = arms(2, 1.0, 0.5, 0.0);
    rows.push(row("c-open", Arm::Control, "m", 50.0, 3, 95 * MINUTE));
    let report = Findings::of("ab", &rows, 100 * MINUTE, 30 * MINUTE);
    let control = &report.overall.control;
    assert_eq!((control.sessions, control.open), (2, 1));
    // The totals count every session, open ones too.
    assert_eq!(control.totals.turns, 23);
    assert!((control.totals.cost_usd - 52.0).abs() < 1e-9);
    assert!((control.cost_per_session - 1.0).abs() < 1e-9);
    let one = Findings::of("ab", &rows[..3], 100 * MINUTE, 30 * MINUTE);
    assert!(one.overall.difference.is_none());
    assert!(render(&one).contains("not yet"));
}

/// A session that used two models is one session overall (its costs added, each at its own
/// price) and a session in each model's group, with that model's cost only; agents group too.
#[test]
fn models_and_agents_are_reported_apart() {
    let mut rows = vec![
        row("s1", Arm::Treatment, "claude-sonnet-4-5", 2.0, 5, 0),
        row("s1", Arm::Treatment, "claude-haiku-4-5", 0.01, 2, 0),
        row("s2", Arm::Control, "claude-sonnet-4-5", 3.0, 6, 0),
    ];
    rows[2].agent = "codex".to_owned();
    let report = Findings::of("ab", &rows, 100 * MINUTE, 30 * MINUTE);
    assert_eq!(report.overall.treatment.sessions, 1);
    assert!((report.overall.treatment.cost_per_session - 2.01).abs() < 1e-9);
    let names: Vec<&str> = report.by_model.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["claude-haiku-4-5", "claude-sonnet-4-5"]);
    assert!((report.by_model[1].treatment.cost_per_session - 2.0).abs() < 1e-9);
    let agents: Vec<(&str, u64, u64)> = report
        .by_agent
        .iter()
        .map(|g| (g.name.as_str(), g.control.sessions, g.treatment.sessions))
        .collect();
    assert_eq!(agents, [("claude-code", 0, 1), ("codex", 1, 0)]);
    let text = render(&report);
    assert!(
        text.contains("all models, each at its own list price"),
        "{text}"
    );
    assert!(text.contains("model claude-haiku-4-5"), "{text}");
}

/// Sessions of a model without a list price are compared in input-token equivalents, never
/// as free: here the treatment reads from the cache what the control pays in full.
#[test]
fn unpriced_models_are_compared_in_input_token_equivalents() {
    let mut rows = Vec::new();
    for i in 0..6 {
        let mut control = row(&format!("c{i}"), Arm::Control, "new-model", 0.0, 4, 0);
        control.input = 100_000;
        control.unpriced = 4;
        let mut treatment = row(&format!("t{i}"), Arm::Treatment, "new-model", 0.0, 4, 0);
        treatment.input = 10_000 + i as u64;
        treatment.cache_read = 90_000;
        treatment.unpriced = 4;
        rows.push(control);
        rows.push(treatment);
    }
    let report = Findings::of("ab", &rows, 100 * MINUTE, 30 * MINUTE);
    let d = report
        .overall
        .difference
        .clone()
        .expect("compared all the same");
    assert_eq!(d.basis, "input_token_equivalents");
    // (10,000 + 9,000 + 2,000 output) against (100,000 + 2,000): about -79%.
    assert!((d.relative + 0.794).abs() < 0.01, "{d:?}");
    assert!(d.settled);
    assert!(render(&report).contains("input-token equivalents"));
    assert_eq!(report.overall.control.unpriced_turns, 24);
}

/// A session with a turn of unknown cost is counted and left out of the cost, never averaged in
/// as free: here it would have pulled the control's mean from 1.0 to 0.75.
#[test]
fn a_session_of_unknown_cost_is_left_out_of_the_cost() {
    let mut rows = arms(3, 1.0, 0.5, 0.0);
    let mut unknown = row("c-cut", Arm::Control, "m", 0.0, 5, 0);
    unknown.no_usage = 1;
    rows.push(unknown);
    let report = Findings::of("ab", &rows, 100 * MINUTE, 30 * MINUTE);
    let control = &report.overall.control;
    assert_eq!((control.sessions, control.unknown_cost_sessions), (4, 1));
    assert_eq!(control.no_usage_turns, 1);
    assert!((control.cost_per_session - 1.0).abs() < 1e-9, "{control:?}");
    assert!((report.overall.difference.unwrap().relative + 0.5).abs() < 1e-9);
    // Its turns still count.
    assert!((control.turns_per_session - 35.0 / 4.0).abs() < 1e-9);
}

/// Callers name agents and models: past 24 groups, the smaller ones are one, `other`.
#[test]
fn groups_are_capped() {
    let rows: Vec<Spend> = (0..40)
        .map(|i| {
            row(
                &format!("s{i}"),
                Arm::Control,
                &format!("model-{i:02}"),
                1.0,
                1,
                0,
            )
        })
        .collect();
    let report = Findings::of("ab", &rows, 100 * MINUTE, 30 * MINUTE);
    assert_eq!(report.by_model.len(), 24);
    let other = report.by_model.last().unwrap();
    assert_eq!((other.name.as_str(), other.control.sessions), ("other", 17));
}
