//! Replay tests on small hand-checked sessions.

use super::*;
use serde_json::json;

fn body(outputs: &[&str], answers: &[&str]) -> Vec<u8> {
    let commands = vec!["cat src/serializer.py"; outputs.len()];
    body_of(outputs, &commands, answers)
}

/// A session whose `i`th call runs `commands[i]`.
fn body_of(outputs: &[&str], commands: &[&str], answers: &[&str]) -> Vec<u8> {
    let mut messages =
        vec![json!({"role": "user", "content": "fix the failing test in src/serializer.py"})];
    for (i, out) in outputs.iter().enumerate() {
        messages.push(json!({"role": "assistant", "content": answers.get(i).copied().unwrap_or("looking"), "tool_calls": [{
            "id": format!("c{i}"), "type": "function", "function": {"name": "bash", "arguments": json!({"command": commands[i]}).to_string()}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": *out}));
    }
    messages
        .push(json!({"role": "assistant", "content": answers.last().copied().unwrap_or("done")}));
    serde_json::to_vec(&json!({"model": "gpt-4.1", "messages": messages})).unwrap()
}

fn replay(yaml: &str, body: &[u8], options: &Options) -> SessionReport {
    let config = Config::parse(yaml).unwrap();
    let pipeline = config.build_pipeline().unwrap();
    let turns = turns_of(body).unwrap();
    replay_session(
        "s",
        &turns,
        Dialect::OpenAi,
        &config,
        Arc::new(pipeline),
        options,
    )
    .unwrap()
}

fn big(tag: &str) -> String {
    format!("{tag}\n") + &format!("def dump_{tag}(value): return value.isoformat()\n").repeat(60)
}

#[test]
fn the_cost_tiers_add_up_on_a_hand_checked_session() {
    let outputs = [big("a").leak() as &str, big("b").leak(), big("c").leak()];
    let report = replay("pipeline: []", &body(&outputs, &[]), &Options::default());
    // Turn 0: the first user message alone, all written. Every later turn reads what the
    // previous one sent and writes the rest.
    for (k, turn) in report.turns.iter().enumerate() {
        let b = turn.baseline;
        assert_eq!(
            b.cache_read + b.cache_write + b.fresh,
            b.content_tokens,
            "turn {k}"
        );
        assert_eq!(
            turn.baseline, turn.sluice,
            "no pipeline: both arms bill the same"
        );
    }
    let t = &report.turns;
    assert_eq!(t[1].baseline.cache_read, t[0].baseline.content_tokens);
    assert_eq!(t[0].baseline.cache_read, 0);
    let total = totals(std::slice::from_ref(&report), &Prices::default());
    let expected =
        total.baseline.cache_read as f64 * 0.1 + total.baseline.cache_write as f64 * 1.25;
    assert!((total.baseline_cost - expected).abs() < 1e-6);
    // Past the cache TTL nothing is read.
    let slow = replay(
        "pipeline: []",
        &body(&outputs, &[]),
        &Options {
            gap: Duration::from_secs(7200),
            ..Options::default()
        },
    );
    assert!(slow.turns.iter().all(|t| t.baseline.cache_read == 0));
}

#[test]
fn an_injected_flip_is_detected() {
    use engine::pipeline::{ApplyCx, ComponentError, Offload, Stage, StashKey, Transcript};
    /// Rewrites the first tool output once the transcript is long enough: it claims to be
    /// stateless (so no guard stops it) while its decision depends on later history, which is
    /// exactly the bug a flip is.
    struct LateRewrite;
    impl Offload for LateRewrite {
        fn offload(
            &self,
            m: &mut Transcript<'_, '_>,
            cx: &mut ApplyCx<'_>,
        ) -> Result<Vec<StashKey>, ComponentError> {
            if m.len() < 7 || m[2].content.contains("<<cg:") {
                return Ok(Vec::new());
            }
            let key = cx.stash(&m[2].content)?;
            m.get_mut(2).content = key.marker();
            Ok(vec![key])
        }
    }
    let outputs = [
        big("a").leak() as &str,
        big("b").leak(),
        big("c").leak(),
        big("d").leak(),
    ];
    let turns = turns_of(&body(&outputs, &[])).unwrap();
    let config = Config::parse("pipeline: []").unwrap();
    let broken = Pipeline::new(vec![Stage::offload("late_rewrite", LateRewrite)]);
    let report = replay_session(
        "s",
        &turns,
        Dialect::OpenAi,
        &config,
        Arc::new(broken),
        &Options::default(),
    )
    .unwrap();
    let flipped: Vec<usize> = report.turns.iter().map(|t| t.flipped_messages).collect();
    assert_eq!(flipped.iter().sum::<usize>(), 1, "{flipped:?}");
    assert_eq!(totals(&[report], &Prices::default()).flips, 1);
    let clean = replay(
        "pipeline: [mask]",
        &body(&outputs, &[]),
        &Options::default(),
    );
    assert!(clean.turns.iter().all(|t| t.flipped_messages == 0));
}

/// A session whose first output hides a traceback in a long log, and whose last answer names
/// the error, the path and the number from it (the path is also in the task).
fn traceback_session() -> (String, Vec<u8>) {
    let needed = "filler line of a long log that nobody needs\n".repeat(60)
        + "Traceback (most recent call last):\n  File \"src/serializer.py\", line 88, in dump\nValueError: naive datetime 1700000123\n";
    let (b, c, d, e) = (big("b"), big("c"), big("d"), big("e"));
    let outputs = [needed.as_str(), &b, &c, &d, &e];
    let answers = [
        "looking",
        "b",
        "c",
        "d",
        "e",
        "the ValueError at src/serializer.py line 88 comes from 1700000123",
    ];
    let session = body(&outputs, &answers);
    (needed, session)
}

#[test]
fn recall_drops_when_a_needed_output_is_masked_and_recovers_behind_a_marker() {
    let (_, body) = traceback_session();
    let report = replay(
        "pipeline: [mask]\ncomponents:\n  mask: {keep_recent: 1}",
        &body,
        &Options {
            gap: Duration::from_secs(7200),
            ..Options::default()
        },
    );
    let last = report.turns.last().unwrap().recall;
    assert!(last.referenced >= 3, "{last:?}");
    // The path is also in the task, so it stays visible; the error name and the number were
    // only in the masked output.
    assert_eq!(last.visible, 1, "{last:?}");
    assert_eq!(
        last.behind_marker,
        last.referenced - 1,
        "the rest is one expand away"
    );
    assert!((last.share() - 1.0).abs() < 1e-9);
    let plain = replay("pipeline: []", &body, &Options::default());
    let last = plain.turns.last().unwrap().recall;
    assert_eq!(last.visible, last.referenced);
}

#[test]
fn the_report_totals_are_the_sum_of_its_items() {
    let outputs = [
        big("a").leak() as &str,
        big("b").leak(),
        big("c").leak(),
        big("d").leak(),
        big("e").leak(),
    ];
    let options = Options {
        gap: Duration::from_secs(7200),
        ..Options::default()
    };
    let reports = vec![
        replay("pipeline: [mask]", &body(&outputs, &[]), &options),
        replay(
            "pipeline: [mask, collapse]",
            &body(&outputs[..3], &[]),
            &options,
        ),
    ];
    let t = totals(&reports, &Prices::default());
    let turns: Vec<&TurnRecord> = reports.iter().flat_map(|r| &r.turns).collect();
    assert_eq!(t.turns, turns.len());
    assert_eq!(
        t.baseline.content_tokens,
        turns
            .iter()
            .map(|x| x.baseline.content_tokens)
            .sum::<usize>()
    );
    assert_eq!(
        t.sluice.cache_write,
        turns.iter().map(|x| x.sluice.cache_write).sum::<usize>()
    );
    assert_eq!(
        t.flips,
        turns.iter().map(|x| x.flipped_messages).sum::<usize>()
    );
    assert_eq!(
        t.recall.referenced,
        turns.iter().map(|x| x.recall.referenced).sum::<usize>()
    );
    let saved: usize = reports
        .iter()
        .flat_map(|r| r.components.values())
        .map(|c| c.saved_tokens)
        .sum();
    // The bodies declare no tools of their own, so the expand tool arrives with the first
    // marker and is billed on every turn that carries one.
    let declared = engine::tokens::count(&format!(
        "[{}]",
        engine::way_back::tool_json(Dialect::OpenAi)
    ));
    let declarations = saved - (t.baseline.content_tokens - t.sluice.content_tokens);
    assert!(
        declarations > 0 && declarations.is_multiple_of(declared),
        "per-component savings add up to the total, less {declarations} tokens of declarations ({declared} each)"
    );
    assert!((t.sluice_cost - t.sluice.cost(&Prices::default())).abs() < 1e-6);
    // Per session: how many lost (billed saving below zero, rounds counted), and the worst,
    // each session's bill summed here from its turns at the default prices (1, 0.1, 1.25).
    let units = |b: &Bill| b.fresh as f64 + 0.1 * b.cache_read as f64 + 1.25 * b.cache_write as f64;
    let nets: Vec<f64> = reports
        .iter()
        .map(|r| {
            let base: f64 = r.turns.iter().map(|x| units(&x.baseline)).sum();
            let paid: f64 = r
                .turns
                .iter()
                .map(|x| units(&x.sluice) + units(&x.expand))
                .sum();
            100.0 * (base - paid) / base
        })
        .collect();
    assert_eq!(t.losing_sessions, nets.iter().filter(|n| **n < 0.0).count());
    let (_, worst) = t.worst_session.clone().unwrap();
    let lowest = nets.iter().copied().fold(f64::MAX, f64::min);
    assert!((worst - lowest).abs() < 1e-9, "{worst} against {lowest}");
    // The headline sums the turns' own savings, what `/stats` would have summed for them.
    let before: u64 = turns.iter().map(|x| x.saving.tokens_before).sum();
    let declared: u64 = turns.iter().map(|x| x.saving.declared_tokens).sum();
    assert_eq!(
        (t.net.tokens_before, t.net.declared_tokens),
        (before, declared)
    );
    assert!(
        declared > 0,
        "the expand tool is charged where it was declared"
    );
    // The content-token figure, from the turns' own terms by the formula `docs/stats.md` gives.
    let sum = |f: fn(&TurnRecord) -> u64| turns.iter().map(|x| f(x)).sum::<u64>() as f64;
    let cut = sum(|x| x.saving.tokens_before) - sum(|x| x.saving.tokens_after);
    let net = cut
        - sum(|x| x.saving.declared_tokens)
        - sum(|x| x.saving.restored_tokens)
        - 0.1 * sum(|x| x.saving.reread_tokens);
    let expected = 100.0 * net / sum(|x| x.saving.tokens_before);
    assert!(
        (t.net_savings_pct - expected).abs() < 1e-9,
        "{} against {expected}",
        t.net_savings_pct
    );
    assert_eq!(t.sessions, 2);
    assert_eq!(t.dialects.get("openai"), Some(&2));
}

#[test]
fn recordings_and_dialects_are_counted_apart() {
    assert_eq!(
        recording("corpus/public/run-1/openai.json.gz"),
        "corpus/public/run-1"
    );
    assert_eq!(
        recording("corpus/public/run-1/turns.anthropic.jsonl"),
        "corpus/public/run-1"
    );
    assert_eq!(recording("sessions/a.json"), "sessions/a.json");
    assert_eq!(recording("openai.json"), "openai.json");
    let session = |name: &str, dialect: &str| SessionReport {
        name: name.into(),
        dialect: dialect.into(),
        ..SessionReport::default()
    };
    let t = totals(
        &[
            session("p/r1/openai.json", "openai"),
            session("p/r1/anthropic.json.gz", "anthropic"),
            session("p/r2/openai.json", "openai"),
        ],
        &Prices::default(),
    );
    assert_eq!((t.recordings, t.sessions), (2, 3));
    assert_eq!(t.dialects.get("openai"), Some(&2));
    assert_eq!(t.dialects.get("anthropic"), Some(&1));
}

#[test]
fn a_session_that_cost_more_says_why() {
    // One turn billed on the cost model: what the baseline and sluice wrote, and the round.
    let turn = |baseline: usize, sluice: usize, expand: usize| TurnRecord {
        baseline: Bill {
            content_tokens: baseline,
            cache_write: baseline,
            ..Bill::default()
        },
        sluice: Bill {
            content_tokens: sluice,
            cache_write: sluice,
            ..Bill::default()
        },
        expand: Bill {
            content_tokens: expand,
            cache_read: expand,
            ..Bill::default()
        },
        expand_rounds: usize::from(expand > 0),
        expand_repeats: 0,
        cold: false,
        amortized: false,
        flipped_messages: 0,
        recall: Recall::default(),
        saving: NetSaving::default(),
        // The same turn on the guard's ledger: everything written at 1.25, the round's read
        // at 0.1.
        billed: engine::savings::BilledSaving {
            requests: 1,
            billed: sluice as f64 * 1.25,
            cut: baseline.saturating_sub(sluice) as f64 * 1.25,
            declared: sluice.saturating_sub(baseline) as f64 * 1.25,
            missed: 0.0,
            rounds: expand as f64 * 0.1,
        },
    };
    let session = |name: &str, record: TurnRecord| SessionReport {
        name: name.into(),
        dialect: "anthropic".into(),
        turns: vec![record],
        ..SessionReport::default()
    };
    let sessions = [
        // Nothing cut: the declaration alone wrote 4 more tokens than the baseline, -0.4%.
        session("a", turn(1000, 1004, 0)),
        // 100 cut (+10%), then a round re-read 2000 tokens at 0.1 (-16%): -6%.
        session("b", turn(1000, 900, 2000)),
        // 200 cut and no round: +20%.
        session("c", turn(1000, 800, 0)),
    ];
    let t = totals(&sessions, &Prices::default());
    assert_eq!(t.losing_sessions, 2);
    assert!((t.losing_sessions_pct - 200.0 / 3.0).abs() < 1e-9);
    assert_eq!(t.losses["declaration"].sessions, 1);
    assert!((t.losses["declaration"].worst_pct + 0.4).abs() < 1e-9);
    assert_eq!(t.losses["expand_rounds"].sessions, 1);
    let (worst, pct) = t.worst_session.clone().unwrap();
    assert_eq!(worst, "b");
    assert!((pct + 6.0).abs() < 1e-9, "{pct}");
    let billed = session_billed(&sessions[2]);
    assert!((billed.net_pct() - 20.0).abs() < 1e-9);
    assert!((billed.gross_pct() - 20.0).abs() < 1e-9);
    // Both arms on the cost model read the same here: the check agrees with the ledger.
    assert!(
        (t.two_arm_savings_pct - t.billed_savings_pct).abs() < 1e-9,
        "{t:?}"
    );
}

/// The way back is billed: the turn whose answer needs an identifier only a marker kept pays
/// one expand round (its prompt re-read, the original written), the turns that need nothing
/// hidden pay none, and the net figure is the cost change with those rounds counted.
#[test]
fn a_turn_that_needs_a_hidden_identifier_pays_one_expand_round() {
    let (needed, body) = traceback_session();
    let options = Options {
        gap: Duration::from_secs(7200),
        expand: ExpandAsk::Whole,
        ..Options::default()
    };
    let masked = replay(
        "pipeline: [mask]\ncomponents:\n  mask: {keep_recent: 1}",
        &body,
        &options,
    );
    let rounds: Vec<usize> = masked.turns.iter().map(|t| t.expand_rounds).collect();
    let last = masked.turns.last().unwrap();
    assert_eq!(rounds.iter().sum::<usize>(), 1, "{rounds:?}");
    assert_eq!(
        last.expand_rounds, 1,
        "the answer that needs the masked output"
    );
    assert_eq!(
        last.expand.cache_read, last.sluice.content_tokens,
        "the round re-reads the prompt it followed"
    );
    assert!(
        last.expand.cache_write >= engine::tokens::count(&needed),
        "and writes the original back: {:?}",
        last.expand
    );
    for turn in &masked.turns[..masked.turns.len() - 1] {
        assert_eq!(turn.expand, Bill::default(), "nothing hidden was needed");
    }
    let prices = Prices::default();
    let t = totals(std::slice::from_ref(&masked), &prices);
    assert_eq!(t.expand_rounds, 1);
    assert!((t.expand_cost - last.expand.cost(&prices)).abs() < 1e-9);
    let two_arm = 100.0 * (t.baseline_cost - t.sluice_cost - t.expand_cost) / t.baseline_cost;
    assert!((t.two_arm_savings_pct - two_arm).abs() < 1e-9);
    assert!(t.two_arm_savings_pct < t.two_arm_savings_pct_gross);
    // The ledger charges the round too.
    assert!(last.billed.rounds > 0.0, "{:?}", last.billed);
    assert!(t.billed_savings_pct < t.billed_savings_pct_gross);
    // The headline charges the round as the proxy's expand loop counts one: the original it
    // restored, and the forwarded prompt's content tokens re-read.
    assert!(last.saving.restored_tokens > 0);
    assert!((last.saving.restored_tokens as usize) < last.expand.cache_write);
    assert_eq!(last.saving.reread_tokens, last.saving.tokens_after);
    assert!(t.net_savings_pct < t.savings_pct_gross);
    // Visible recall counts only what the forwarded body showed.
    assert!(t.visible_recall_pct < t.recall_pct, "{t:?}");
    assert!((t.recall_pct - 100.0).abs() < 1e-9);

    let plain = replay("pipeline: []", &body, &options);
    let t = totals(std::slice::from_ref(&plain), &prices);
    assert_eq!(t.expand_rounds, 0);
    assert_eq!(t.billed_savings_pct, t.billed_savings_pct_gross);
    assert_eq!(t.two_arm_savings_pct, t.two_arm_savings_pct_gross);
    assert_eq!(t.net_savings_pct, t.savings_pct_gross);
    assert!((t.visible_recall_pct - 100.0).abs() < 1e-9);
}

/// A long `cat` output with two facts in the middle that collapse cuts (neither reports a
/// failure, which collapse would keep in view).
fn long_read(tag: &str, stamp: u64) -> String {
    let mut lines: Vec<String> = (0..400)
        .map(|i| format!("line {i} of the {tag} listing, nothing to see"))
        .collect();
    lines[200] = format!("request routed to {tag}_handler");
    lines[201] = format!("offending timestamp {stamp}");
    lines.join("\n")
}

/// A long text of distinct words: the bulk of the prompt a round re-reads.
fn wide_output(lines: usize) -> String {
    (0..lines)
        .map(|l| {
            (0..400)
                .map(|w| format!("w{}", (l * 7919 + w * 104_729) % 100_003))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A large prompt, three long logs and a fourth with four facts in the middle, whose answers
/// need one fact each on four turns running (see the tests below).
fn restore_session() -> Vec<u8> {
    let mut lines: Vec<String> = (0..400)
        .map(|i| format!("line {i} of the alpha listing, nothing to see"))
        .collect();
    for k in 0..4 {
        lines[198 + k] = format!("fact_{k} is 17000000{k}{k}");
    }
    // The bulk of the prompt is the model's own long first answer, which collapse leaves as it
    // is (it cuts tool outputs); three earlier logs collapse cuts are the savings a restore is
    // staked on.
    let (wide, alpha) = (wide_output(100), lines.join("\n"));
    let logs = [
        long_read("beta", 1),
        long_read("gamma", 2),
        long_read("delta", 3),
    ];
    let outputs = [
        logs[0].as_str(),
        &logs[1],
        &logs[2],
        &alpha,
        "ok",
        "ok",
        "ok",
        "ok",
    ];
    let commands = [
        "cat beta.log",
        "cat gamma.log",
        "cat delta.log",
        "cat alpha.log",
        "ls",
        "pwd",
        "ls -a",
        "pwd -P",
    ];
    let answers = [
        wide.as_str(),
        "looking",
        "looking",
        "looking",
        "the first is 1700000000",
        "the second is 1700000011",
        "the third is 1700000022",
        "the fourth is 1700000033",
        "done",
    ];
    body_of(&outputs, &commands, &answers)
}

#[test]
fn a_marker_the_model_keeps_expanding_is_restored_once_and_stops_costing_rounds() {
    // A large prompt, then a long `cat` with four facts in the middle that collapse hides. The
    // answers need one each on four turns running: the first two pay a round each, after which
    // one re-write of the prompt from that output on costs less than the round the marker is
    // still expected to cost (one per repeat so far, each re-reading the whole prompt), so it
    // goes back whole and the next answers find their facts in view.
    let session = restore_session();
    let report = replay(
        "pipeline: [collapse]",
        &session,
        &Options {
            keep_bodies: true,
            ..Options::default()
        },
    );
    let rounds: Vec<usize> = report.turns.iter().map(|t| t.expand_rounds).collect();
    assert_eq!(rounds, [0, 0, 0, 0, 1, 1, 0, 0, 0], "two rounds, then none");
    let collapse = &report.components["collapse"];
    assert_eq!(
        collapse.gates.get("restored_in_place"),
        Some(&3),
        "put back on the turn that restored it and every later one: {:?}",
        collapse.gates
    );
    let shown: Vec<bool> = report
        .bodies
        .iter()
        .map(|b| String::from_utf8_lossy(b).contains("fact_3 is 1700000033"))
        .collect();
    assert_eq!(
        shown,
        [false, false, false, false, false, false, true, true, true]
    );
    let flips: usize = report.turns.iter().map(|t| t.flipped_messages).sum();
    assert_eq!(flips, 0, "one deliberate re-write, then the same bytes");
    assert_eq!(report.frozen_flips, 0);
    // Without the restore the same session pays a round on every one of those turns.
    let never = replay(
        "pipeline: [collapse]",
        &session,
        &Options {
            learn_from_rounds: false,
            ..Options::default()
        },
    );
    let rounds: Vec<usize> = never.turns.iter().map(|t| t.expand_rounds).collect();
    assert_eq!(rounds, [0, 0, 0, 0, 1, 1, 1, 1, 0]);
}

/// The same with `mask`, whose cuts are frozen and replayed: the restore undoes the replay too.
#[test]
fn a_restore_undoes_a_frozen_decision_s_replay() {
    let report = replay(
        "pipeline: [mask]\ncomponents:\n  mask: {keep_recent: 1}",
        &restore_session(),
        &Options {
            keep_bodies: true,
            // Past the cache's lifetime: mask makes new decisions at depth only on cold turns.
            gap: Duration::from_secs(7200),
            ..Options::default()
        },
    );
    let rounds: Vec<usize> = report.turns.iter().map(|t| t.expand_rounds).collect();
    let restored = report.components["mask"].gates.get("restored_in_place");
    assert!(restored.is_some_and(|n| *n >= 1), "{rounds:?}");
    let last = report.bodies.last().unwrap();
    assert!(String::from_utf8_lossy(last).contains("fact_3 is 1700000033"));
    assert!(rounds.iter().sum::<usize>() < 4, "{rounds:?}");
    let flips: usize = report.turns.iter().map(|t| t.flipped_messages).sum();
    assert_eq!((flips, report.frozen_flips), (0, 0));
}

#[test]
fn an_expand_round_teaches_the_session_as_the_proxy_would() {
    // The answers after the first output need two facts collapse hid from it, one per turn:
    // two rounds expand the same marker, which the expand loop tells the session, so the next
    // long `cat` output is left whole.
    let (first, later) = (
        long_read("alpha", 1_700_000_005),
        long_read("omega", 1_700_000_009),
    );
    let outputs = [first.as_str(), "ok", "ok", later.as_str()];
    let answers = [
        "looking",
        "the request goes to alpha_handler",
        "and the timestamp is 1700000005",
        "d",
        "done",
    ];
    // Each call reads another file: none re-issues an earlier one, so no retry is detected.
    let commands = ["cat alpha.log", "ls", "pwd", "cat omega.log"];
    // The cost guard stays out of it (no replies settled): this is the retries' lesson alone.
    let report = replay(
        "pipeline: [collapse]",
        &body_of(&outputs, &commands, &answers),
        &Options {
            settle_replies: false,
            ..Options::default()
        },
    );
    let rounds: Vec<usize> = report.turns.iter().map(|t| t.expand_rounds).collect();
    assert_eq!(rounds, [0, 1, 1, 0, 0], "the same marker, expanded twice");
    let collapse = &report.components["collapse"];
    assert_eq!(collapse.gates.get("retried_after_compaction"), Some(&1));
    let last = report.turns.last().unwrap();
    assert_eq!(
        last.sluice.content_tokens,
        last.baseline.content_tokens - report.turns[3].baseline.content_tokens
            + report.turns[3].sluice.content_tokens,
        "the new output goes whole; only the first stays collapsed"
    );
}

#[test]
fn the_preamble_is_billed_on_every_turn_in_both_arms() {
    let outputs = [big("a").leak() as &str, big("b").leak()];
    let body = body(&outputs, &[]);
    let plain = replay("pipeline: []", &body, &Options::default());
    let with = replay(
        "pipeline: []",
        &body,
        &Options {
            preamble_tokens: 5_000,
            ..Options::default()
        },
    );
    for (k, (p, w)) in plain.turns.iter().zip(&with.turns).enumerate() {
        let added = w.baseline.content_tokens - p.baseline.content_tokens;
        assert!(
            (4_900..5_300).contains(&added),
            "turn {k}: {added} tokens added"
        );
        assert_eq!(w.baseline, w.sluice, "no pipeline: both arms bill the same");
        if k > 0 {
            assert_eq!(
                w.baseline.cache_read - p.baseline.cache_read,
                added,
                "turn {k}: a warm turn reads the preamble from the cache"
            );
        }
    }
    // And the stand-in is a `tools` entry the proxy would see too.
    let stood_in = with_preamble(&turns_of(&body).unwrap()[0], 300);
    let value: serde_json::Value = serde_json::from_slice(&stood_in).unwrap();
    assert_eq!(value["tools"][0]["name"], "agent_preamble_stand_in");
}

#[test]
fn a_preamble_read_from_the_recording_replaces_the_stand_in_turn_by_turn() {
    let outputs = [big("a").leak() as &str, big("b").leak()];
    let body = body(&outputs, &[]);
    let plain = replay("pipeline: []", &body, &Options::default());
    let read = replay(
        "pipeline: []",
        &body,
        &Options {
            preamble_tokens: 5_000,
            // The first turn's own; the rest, shorter than the turns, keep the stand-in.
            preambles: vec![1_000],
            ..Options::default()
        },
    );
    let added: Vec<usize> = plain
        .turns
        .iter()
        .zip(&read.turns)
        .map(|(p, r)| r.baseline.content_tokens - p.baseline.content_tokens)
        .collect();
    assert!(added.len() > 1, "{added:?}");
    assert!((900..1_300).contains(&added[0]), "{added:?}");
    assert!(
        added[1..].iter().all(|a| (4_900..5_300).contains(a)),
        "{added:?}"
    );
}

#[test]
fn a_tool_list_that_changes_mid_session_costs_a_full_write() {
    // No tools of its own: the expand tool arrives with the first marker, and that turn reads
    // nothing from the cache.
    let outputs = [long_read("alpha", 1_700_000_005).leak() as &str, "ok", "ok"];
    let report = replay(
        "pipeline: [collapse]",
        &body(&outputs, &[]),
        &Options::default(),
    );
    let marked = report
        .turns
        .iter()
        .position(|t| t.sluice.content_tokens < t.baseline.content_tokens);
    let k = marked.expect("collapse cut the long read");
    assert_eq!(
        report.turns[k].sluice.cache_read, 0,
        "the tools changed on turn {k}"
    );
    // With tools of its own the agent's list carries the expand tool from the first turn, so
    // the later turns read it from the cache.
    let mut value: serde_json::Value = serde_json::from_slice(&body(&outputs, &[])).unwrap();
    value["tools"] = json!([{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]);
    let report = replay(
        "pipeline: [collapse]",
        &serde_json::to_vec(&value).unwrap(),
        &Options::default(),
    );
    for turn in &report.turns[1..] {
        assert!(turn.sluice.cache_read > 0, "{turn:?}");
    }
}

/// A session whose every answer needs another fact collapse hid from its first output (`cat`):
/// the same marker expanded turn after turn, while each later output (`tail`) is cut too: a
/// 400-line log, and from turn 6 on a 3,200-line one on odd turns.
fn repeating_session(turns: usize) -> Vec<u8> {
    let first: String = (0..400)
        .map(|i| format!("row {i}: checksum {}", 1_800_000_000 + i))
        .collect::<Vec<_>>()
        .join("\n");
    let mut reads = vec![first];
    reads.extend((1..turns).map(|i| {
        let read = long_read(&format!("f{i}"), 1_700_000_000 + i as u64);
        if i > 5 && i % 2 == 1 {
            read.repeat(8)
        } else {
            read
        }
    }));
    let outputs: Vec<&str> = reads.iter().map(String::as_str).collect();
    let answers: Vec<String> = std::iter::once("looking".to_owned())
        .chain((0..turns).map(|i| format!("row {} has checksum {}", 100 + i, 1_800_000_100 + i)))
        .collect();
    let answers: Vec<&str> = answers.iter().map(String::as_str).collect();
    let commands: Vec<String> = (0..turns)
        .map(|i| match i {
            0 => "cat f0.log".to_owned(),
            _ => format!("tail -n 3000 f{i}.log"),
        })
        .collect();
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    body_of(&outputs, &commands, &answers)
}

#[test]
fn the_reply_half_settles_the_cost_guard_and_a_session_whose_rounds_repeat_keeps_the_cuts_that_pay()
{
    let body = repeating_session(12);
    // A 100,000-token preamble, as an agent's system prompt and tools: every round re-reads it,
    // which the early 400-line cuts do not pay for, and the guard's floor (one round's re-read,
    // written: 0.1 / 1.25 of the prompt) is over 8,000 tokens, more than cutting a 400-line log
    // saves and less than a 3,200-line one.
    let options = Options {
        preamble_tokens: 100_000,
        keep_bodies: true,
        ..Options::default()
    };
    let settled = replay("pipeline: [collapse]", &body, &options);
    let unsettled = replay(
        "pipeline: [collapse]",
        &body,
        &Options {
            settle_replies: false,
            ..options.clone()
        },
    );
    let gates = |r: &SessionReport| r.components["collapse"].gates.clone();
    assert!(
        gates(&settled).get("below_cost_floor") >= Some(&2),
        "{:?}",
        gates(&settled)
    );
    assert_eq!(
        gates(&unsettled).get("below_cost_floor"),
        None,
        "no report, no judgement"
    );
    // Every round after the first asks for the same original again: a repeat.
    let count = |f: fn(&TurnRecord) -> usize| settled.turns.iter().map(f).sum::<usize>();
    let rounds = count(|t| t.expand_rounds);
    assert!(rounds >= 3, "{rounds}");
    assert_eq!(count(|t| t.expand_repeats), rounds - 1);
    // Rounds never stop every cut: that is what cache misses do.
    assert_eq!(gates(&settled).get("cost_guard"), None);
    // The last request: the last 3,200-line log (f11) is cut, the 400-line one before it (f10)
    // goes whole.
    let last = wire::parse(settled.bodies.last().unwrap(), Dialect::OpenAi).unwrap();
    let outputs: Vec<&Message> = last.messages().iter().filter(|m| m.is_tool()).collect();
    let [.., f10, f11] = outputs.as_slice() else {
        panic!("12 outputs");
    };
    assert!(
        engine::marker::marker_ids(&f11.content).next().is_some(),
        "{}",
        f11.content
    );
    assert_eq!(f10.content, long_read("f10", 1_700_000_010));
}

#[test]
fn a_partial_expand_is_billed_by_what_it_returned() {
    let (needed, body) = traceback_session();
    let run = |expand| {
        let options = Options {
            gap: Duration::from_secs(7200),
            expand,
            ..Options::default()
        };
        replay(
            "pipeline: [mask]\ncomponents:\n  mask: {keep_recent: 1}",
            &body,
            &options,
        )
    };
    let (whole, pattern) = (run(ExpandAsk::Whole), run(ExpandAsk::Pattern));
    let round = |r: &SessionReport| r.turns.last().unwrap().expand;
    assert_eq!(
        round(&whole).cache_read,
        round(&pattern).cache_read,
        "both re-read the prompt"
    );
    assert!(round(&whole).cache_write >= engine::tokens::count(&needed));
    assert!(
        round(&pattern).cache_write < round(&whole).cache_write / 2,
        "the lines around what it needed, not the original: {:?} vs {:?}",
        round(&pattern),
        round(&whole)
    );
    // The same identifiers are found either way: recall does not depend on the ask.
    let recall = |r: &SessionReport| totals(std::slice::from_ref(r), &Prices::default()).recall_pct;
    assert_eq!(recall(&whole), recall(&pattern));
}

/// A Claude Code-like session in the Anthropic dialect: turn `k` sends the first `2k + 1`
/// messages, each long enough to be worth keeping.
fn anthropic_turns(turns: usize) -> Vec<Vec<u8>> {
    let messages: Vec<serde_json::Value> = (0..2 * turns)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": big(&format!("m{i}"))})
        })
        .collect();
    (0..turns)
        .map(|k| {
            let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 4096, "messages": messages[..=2 * k]});
            serde_json::to_vec(&body).unwrap()
        })
        .collect()
}

#[test]
fn a_keep_alive_on_the_recorded_clock_is_billed_hit_and_miss() {
    let yaml = "pipeline: [collapse]\ncache: { keepalive: true, keepalive_min_prefix_tokens: 0 }\n";
    let config = Config::parse(yaml).unwrap();
    let turns = anthropic_turns(4);
    // Gaps of 30 s (no ping), 400 s (one ping at 280 s keeps the entry: a hit) and 2,000 s
    // (two pings, and the session comes back after both have run out: a miss).
    let times = [0, 30, 430, 2430].map(Duration::from_secs).to_vec();
    let run = |keepalive| {
        let options = Options {
            times: times.clone(),
            keepalive,
            ..Options::default()
        };
        let pipeline = Arc::new(config.build_pipeline().unwrap());
        replay_session("s", &turns, Dialect::Anthropic, &config, pipeline, &options).unwrap()
    };
    let with = run(config.cache.keepalive());
    let ledger = with.keepalive.unwrap();
    assert_eq!(
        (ledger.pings, ledger.gaps_pinged, ledger.kept),
        (3, 2, 1),
        "{ledger:?}"
    );
    // Each ping read the whole turn before it; the kept turn read that instead of writing it.
    let prefix = |k: usize| with.turns[k].sluice.content_tokens as u64;
    assert_eq!(ledger.ping_tokens, prefix(1) + 2 * prefix(2));
    assert_eq!(ledger.kept_tokens, prefix(1));
    // The tracker heard of the ping: the kept turn is warm, the missed one cold.
    let cold: Vec<bool> = with.turns.iter().map(|t| t.cold).collect();
    assert_eq!(
        cold,
        [false, false, false, true],
        "the kept turn warm, the missed one cold"
    );
    let without = run(None);
    assert!(without.keepalive.is_none() && without.turns[2].cold);
    // Billed: the pings' reads against the write the hit spared, beside the headline.
    let prices = Prices::default();
    let t = totals(std::slice::from_ref(&with), &prices);
    let net = ledger.saved(0.1, 1.25) - ledger.spent(0.1);
    assert!((t.keepalive_net - net).abs() < 1e-6);
    assert!(net > 0.0, "one hit pays for three pings: {net}");
    assert!(t.billed_savings_pct_with_keepalive > t.billed_savings_pct);
}
