//! The foundation's promises, checked on every real body of the corpus in both dialects.

use std::sync::Arc;

use engine::apply::{Applied, apply_parsed};
use engine::clock::ManualClock;
use engine::config::Config;
use engine::marker;
use engine::pipeline::RunCx;
use engine::store::{MemoryStore, Store};
use engine::wire::{self, Dialect};
use integration_tests::{CorpusBody, bodies, top_level_fields};

fn run<'a>(config: &Config, body: &'a CorpusBody) -> (Applied<'a>, Arc<MemoryStore>, String) {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new(config.store.limits(), clock.clone()));
    let parsed = wire::parse(&body.bytes, body.dialect)
        .unwrap_or_else(|e| panic!("{}: {e}", body.path.display()));
    let session = engine::session::derive(parsed.messages());
    let cx = RunCx::new(body.dialect, session.clone(), store.clone(), clock);
    let pipeline = config.build_pipeline().unwrap();
    (apply_parsed(&parsed, &pipeline, &cx), store, session)
}

#[test]
fn every_corpus_body_parses_in_its_dialect() {
    for body in bodies() {
        let parsed = wire::parse(&body.bytes, body.dialect)
            .unwrap_or_else(|e| panic!("{}: {e}", body.path.display()));
        assert!(parsed.messages().len() >= 2, "{}", body.path.display());
        assert!(
            parsed.messages().iter().any(|m| m.is_tool()),
            "{} has tool outputs",
            body.path.display()
        );
        assert_eq!(
            Dialect::detect(&body.bytes),
            body.dialect,
            "{}",
            body.path.display()
        );
    }
}

/// sluice's count (its own pre-tokenizer split over ASCII, its per-thread piece counts) is the
/// tokenizer crate's, on every text the model reads in both corpora: Claude Code's read outputs
/// put a non-ASCII arrow on every line, so both halves of the split are exercised.
/// `text` counted as the default pipeline's gates count a new output: up to `textclean`'s
/// `min_tokens`, on to `dedup`'s, `delta`'s and `collapse`'s limit, then to its end, each
/// count going on from where the last stopped (`tokens::count_until`). Keyed apart from the
/// memo's own key, so no step is a memo hit.
pub(crate) fn resumed_count(text: &str) -> usize {
    let key = engine::tokens::content_hash(text) ^ 0x5eed_c0de;
    let mut partial = engine::tokens::Partial::default();
    for limit in [50, 100, 200, 2001, usize::MAX] {
        match engine::tokens::count_until(text, key, partial, limit) {
            Ok(n) => {
                assert!(n < limit, "{n} counted under {limit}");
                return n;
            }
            Err(far) => {
                assert!(far.tokens >= limit && far.offset <= text.len(), "{far:?}");
                assert!(text.is_char_boundary(far.offset));
                partial = far;
            }
        }
    }
    unreachable!("no text reaches usize::MAX tokens")
}

#[test]
fn every_corpus_text_counts_as_the_tokenizer_counts_it() {
    let tokenizer = bpe_openai::o200k_base();
    let mut seen = std::collections::HashSet::new();
    let (mut texts, mut wide) = (0, 0);
    for body in bodies() {
        let parsed = wire::parse(&body.bytes, body.dialect).unwrap();
        for message in parsed.messages() {
            for text in message.visible_texts() {
                if !seen.insert(engine::tokens::content_key(text)) {
                    continue;
                }
                texts += 1;
                wide += usize::from(!text.is_ascii());
                let whole = tokenizer.count(text);
                assert_eq!(
                    engine::tokens::count_uncached(text),
                    whole,
                    "{}: {text:.60}",
                    body.path.display()
                );
                assert_eq!(
                    resumed_count(text),
                    whole,
                    "{}, resumed: {text:.60}",
                    body.path.display()
                );
            }
        }
    }
    assert!(
        texts > 1_000 && wide > 100,
        "{texts} texts, {wide} not ASCII"
    );
}

#[test]
fn off_preset_returns_the_input_bytes() {
    let config = Config::from_preset("off").unwrap();
    for body in bodies() {
        let (applied, _, _) = run(&config, &body);
        let out = &applied.body;
        assert!(applied.error.is_none());
        assert!(
            out.as_ref() == body.bytes.as_slice(),
            "{} changed under `off`",
            body.path.display()
        );
    }
}

#[test]
fn unchanged_messages_round_trip_byte_identically() {
    for body in bodies() {
        let parsed = wire::parse(&body.bytes, body.dialect).unwrap();
        let out = parsed.write_back(parsed.messages());
        assert!(
            out.body.as_ref() == body.bytes.as_slice(),
            "{}",
            body.path.display()
        );
    }
}

#[test]
fn default_config_keeps_everything_outside_messages_and_every_stash_resolves() {
    let acted = check_promises(&Config::embedded());
    assert!(
        acted >= 10,
        "the default config acts on real traffic ({acted} bodies)"
    );
}

/// Every gate a component recorded is one its factory declares, or one the pipeline records
/// for any component: the docs' table of gates is rendered from those lists.
fn gates_are_declared(applied: &Applied<'_>, name: &str) {
    for component in &applied.report.components {
        let factory = engine::components::ALL
            .iter()
            .find(|f| f.name() == component.name)
            .unwrap();
        for gate in component.gates.keys() {
            let declared = factory
                .gates()
                .iter()
                .chain(engine::gate::ANY_COMPONENT)
                .any(|g| g.name == *gate);
            assert!(
                declared,
                "{name}: {} recorded the gate {gate}, which its factory does not declare",
                component.name
            );
        }
    }
}

#[test]
fn every_built_component_keeps_the_promises_on_the_corpus() {
    let names: Vec<&str> = engine::components::ALL.iter().map(|f| f.name()).collect();
    let config = Config::parse(&format!("pipeline: [{}]\n", names.join(", "))).unwrap();
    check_promises(&config);
}

/// Runs `config` over every corpus body and checks the foundation's promises: valid JSON out,
/// every field outside `messages` byte-identical, only tool outputs changed, each change either
/// a lossless reformat or a marker whose stash is the exact original, never worse. Returns how
/// many bodies it saved tokens on.
fn check_promises(config: &Config) -> usize {
    let mut acted = 0;
    for body in bodies() {
        let (applied, store, session) = run(config, &body);
        let out = &applied.body;
        let name = body.path.display();
        assert!(applied.error.is_none(), "{name}: {:?}", applied.error);
        let text = std::str::from_utf8(out).unwrap();
        serde_json::from_str::<serde_json::Value>(text)
            .unwrap_or_else(|e| panic!("{name}: output is not JSON: {e}"));
        let input = std::str::from_utf8(&body.bytes).unwrap();
        assert_eq!(
            top_level_fields(text, "messages"),
            top_level_fields(input, "messages"),
            "{name}"
        );

        let before = wire::parse(&body.bytes, body.dialect).unwrap();
        let after = wire::parse(out, body.dialect).unwrap();
        assert_eq!(before.messages().len(), after.messages().len(), "{name}");
        for (index, (old, new)) in before.messages().iter().zip(after.messages()).enumerate() {
            if old == new {
                continue;
            }
            if old.is_tool() && old.content == new.content && old.cache_control == new.cache_control
            {
                // Same output; only what it copies from its call (the arguments) moved, and the
                // call's own change is checked on the assistant message.
                continue;
            }
            if old.content == new.content && !old.cache_control && new.cache_control {
                // cacheinject: a breakpoint added, nothing the model reads changed.
                continue;
            }
            if !old.is_tool() {
                // Only an assistant's call arguments (failed_call) or reasoning
                // (stale_reasoning) may change, and each changed text names a stash holding
                // the exact original.
                assert_eq!(
                    old.role,
                    engine::message::Role::Assistant,
                    "{name}: only tool outputs and assistant calls change"
                );
                assert_eq!(
                    old.content, new.content,
                    "{name}: assistant text is never rewritten"
                );
                let changed = old
                    .tool_calls
                    .iter()
                    .zip(&new.tool_calls)
                    .filter(|(a, b)| a.arguments != b.arguments)
                    .map(|(a, b)| (a.arguments.as_str(), b.arguments.as_str()))
                    .chain(
                        old.reasoning
                            .iter()
                            .zip(&new.reasoning)
                            .filter(|(a, b)| a != b)
                            .map(|(a, b)| (a.as_str(), b.as_str())),
                    );
                for (before, after) in changed {
                    let restored = marker::marker_ids(after)
                        .any(|id| store.resolve(&session, id).as_deref() == Some(before));
                    assert!(
                        restored,
                        "{name}: a rewritten call or reasoning resolves to its original"
                    );
                }
                continue;
            }
            if !marker::contains_marker(&new.content) {
                // A change without a marker must be a lossless reformat's: the last component
                // that changed this message is a Reformat (format, textclean, toon, searchfold),
                // each of which verifies its own round trip before adopting.
                let toucher = applied
                    .report
                    .components
                    .iter()
                    .rev()
                    .find(|c| c.reverted.is_none() && c.changed.contains(&index));
                assert_eq!(
                    toucher.map(|c| c.kind),
                    Some(engine::pipeline::Kind::Reformat),
                    "{name}: a change without a marker is a lossless reformat"
                );
                let same_json = matches!(
                    (serde_json::from_str::<serde_json::Value>(&old.content), serde_json::from_str::<serde_json::Value>(&new.content)),
                    (Ok(a), Ok(b)) if a == b
                );
                let rendered = engine::components::terminal_render(&old.content) == new.content;
                if toucher.is_some_and(|c| matches!(c.name, "format" | "textclean")) {
                    assert!(
                        same_json || rendered,
                        "{name}: format and textclean keep the value"
                    );
                }
                continue;
            }
            let originals: Vec<String> = marker::marker_ids(&new.content)
                .map(|id| {
                    let original = store
                        .resolve(&session, id)
                        .unwrap_or_else(|| panic!("{name}: marker {id} does not resolve"));
                    assert_eq!(
                        marker::stash_id(&original),
                        id,
                        "{name}: id is the content hash"
                    );
                    original.to_string()
                })
                .collect();
            assert!(
                originals.contains(&old.content),
                "{name}: the exact original of a changed output is stashed"
            );
        }
        assert!(
            applied.report.tokens_after <= applied.report.tokens_before,
            "{name}: never worse"
        );
        gates_are_declared(&applied, &name.to_string());
        if applied.report.tokens_after < applied.report.tokens_before {
            acted += 1;
        }
    }
    acted
}

#[test]
fn every_preset_builds_and_runs_on_every_body_in_both_dialects() {
    for preset in engine::config::PRESETS {
        let config = Config::from_preset(preset.name)
            .unwrap_or_else(|e| panic!("preset {}: {e:?}", preset.name));
        check_promises(&config);
    }
}

#[test]
fn output_is_identical_across_runs() {
    let config = Config::embedded();
    for body in bodies().into_iter().step_by(7) {
        let (a, ..) = run(&config, &body);
        let (b, ..) = run(&config, &body);
        let (a, b) = (a.body, b.body);
        assert!(a == b, "{}", body.path.display());
    }
}

#[test]
fn decoded_text_matches_serde_json_on_every_body() {
    for body in bodies() {
        let name = body.path.display();
        let ours = wire::parse(&body.bytes, body.dialect).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&body.bytes).unwrap();
        // Every string the model reads, in wire order, as serde_json decodes it.
        let mut expected: Vec<String> = Vec::new();
        let text_of = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => vec![s.clone()],
            serde_json::Value::Array(parts) => parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        if let Some(system) = value.get("system") {
            expected.push(text_of(system).join("\n"));
        }
        for message in value["messages"].as_array().unwrap() {
            let content = &message["content"];
            if body.dialect == Dialect::Anthropic && content.is_array() {
                let blocks = content.as_array().unwrap();
                for block in blocks.iter().filter(|b| b["type"] == "tool_result") {
                    let texts = text_of(&block["content"]);
                    if texts.is_empty() {
                        expected.push(String::new());
                    }
                    expected.extend(texts);
                }
                if blocks.iter().any(|b| b["type"] != "tool_result")
                    || message["role"] == "assistant"
                {
                    expected.push(text_of(content).join("\n"));
                }
            } else {
                expected.push(text_of(content).join("\n"));
            }
        }
        let got: Vec<&str> = ours.messages().iter().map(|m| m.content.as_str()).collect();
        assert_eq!(got.len(), expected.len(), "{name}");
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(g == e, "{name}: message {i} decodes differently");
        }
    }
}

#[test]
fn memoized_token_counts_equal_direct_counts() {
    for body in bodies().into_iter().step_by(3) {
        let parsed = wire::parse(&body.bytes, body.dialect).unwrap();
        for message in parsed.messages() {
            for text in message.visible_texts() {
                assert_eq!(
                    engine::tokens::count(text),
                    engine::tokens::count_uncached(text),
                    "{}",
                    body.path.display()
                );
            }
        }
    }
}
