//! `sluice replay` and the proxy run one turn: for every public corpus session, turn by turn,
//! the body replay computes is the body the real server forwards to the mock provider.

use std::sync::Arc;

use engine::config::Config;
use integration_tests::bodies;
use modes::replay::{Options, replay_session, session_headers, turns_of};

use crate::proxy::start;

/// The embedded default is stateless; this one adds components whose decisions are frozen and
/// replayed under the tracker's boundary, where a second path would drift first.
const STATEFUL: &str =
    "pipeline: [format, textclean, dedup, failed_run, stale_output, mask, collapse, linecap]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_computes_the_bodies_the_proxy_forwards() {
    for yaml in [engine::config::EMBEDDED_DEFAULT, STATEFUL] {
        let sluice = start(yaml).await;
        // The provider bills as replay's cost model does, so the proxy settles each reply on
        // the numbers replay settles it on: both halves of the turn run on both sides.
        let config = Config::parse(yaml).unwrap();
        let pipeline = Arc::new(config.build_pipeline().unwrap());
        let (mut sessions, mut turns_checked) = (0, 0);
        for body in bodies()
            .into_iter()
            .filter(|b| b.path.to_string_lossy().contains("/public/"))
        {
            let run = body
                .path
                .parent()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy();
            let name = format!("{run}-{:?}", body.dialect).to_lowercase();
            let turns = turns_of(&body.bytes).unwrap();
            let options = Options {
                keep_bodies: true,
                // The mock model never expands, so the proxy's sessions never learn from a
                // round; replay must not either.
                learn_from_rounds: false,
                ..Options::default()
            };
            let (config, pipeline, replayed_name, replayed_turns) = (
                config.clone(),
                pipeline.clone(),
                name.clone(),
                turns.clone(),
            );
            // Replay runs its session actors on a runtime of its own: off this one.
            let report = tokio::task::spawn_blocking(move || {
                replay_session(
                    &replayed_name,
                    &replayed_turns,
                    body.dialect,
                    &config,
                    pipeline,
                    &options,
                )
            })
            .await
            .unwrap()
            .unwrap();
            let headers = session_headers(&name);
            let header = headers
                .get(modes::turn::SESSION_HEADER)
                .unwrap()
                .to_str()
                .unwrap();
            sluice.mock.set_billing_like_replay(true);
            for (k, replayed) in report.bodies.iter().enumerate() {
                sluice.mock.clear_recorded();
                let reply = sluice
                    .chat(
                        body.dialect,
                        &[(modes::turn::SESSION_HEADER, header)],
                        turns[k].clone(),
                    )
                    .await;
                assert_eq!(reply.status, 200, "{name} turn {k}");
                let forwarded = sluice.mock.recorded().pop().unwrap().body;
                assert!(
                    forwarded == *replayed,
                    "{name} turn {k}: replay computed a different body than the proxy forwarded ({} vs {} bytes)",
                    replayed.len(),
                    forwarded.len()
                );
                turns_checked += 1;
            }
            sessions += 1;
        }
        assert!(sessions >= 40, "{sessions} sessions");
        assert!(turns_checked > sessions, "{turns_checked} turns");
        eprintln!("parity: {sessions} sessions, {turns_checked} turns");
    }
}
