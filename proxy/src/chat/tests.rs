//! A turn whose request is on its way is counted once, whether or not its handler lives to
//! record it.

use super::*;
use modes::stats::Stats;
use modes::turn::Forward;

fn requests(stats: &Stats) -> u64 {
    stats.to_json("sync", None, None)["requests"]
        .as_u64()
        .expect("requests is a count")
}

fn forward() -> Box<Forward> {
    let body = Bytes::from_static(
        br#"{"model":"gpt-4o","messages":[{"role":"user","content":"list the files"}]}"#,
    );
    let parsed = engine::wire::parse(&body, Dialect::OpenAi).expect("a chat body");
    let facts = modes::tracker::TurnFacts::default();
    Box::new(Forward::untouched(body.clone(), &parsed, "s".into(), facts))
}

#[test]
fn a_turn_whose_handler_is_dropped_at_the_yield_is_still_counted() {
    let stats = Stats::new();
    drop(Unrecorded {
        forward: Some(forward()),
        stats: &stats,
    });
    assert_eq!(requests(&stats), 1);
}

#[test]
fn a_turn_recorded_on_the_way_is_counted_once() {
    let stats = Stats::new();
    let unrecorded = Unrecorded {
        forward: Some(forward()),
        stats: &stats,
    };
    let forward = unrecorded.record();
    assert_eq!(requests(&stats), 1);
    assert_eq!(forward.session, "s");
}
