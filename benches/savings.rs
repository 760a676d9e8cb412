//! The savings tables of `docs/components.md`: tokens saved per component and per preset over
//! the final requests of the public corpus, both dialects, and what each cmdfilter builtin
//! matches there.
//!
//! `cargo run --release -p benches --bin savings` prints the Markdown. Every body runs alone, as
//! one offline request (`mutable_from` 0, like `sluice compact`), so history-rewriting
//! components may act anywhere; the proxy's cache rules are measured turn by turn elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use engine::apply::apply_parsed;
use engine::clock::ManualClock;
use engine::config::{Config, PRESETS};
use engine::dsl::{FilterSet, selector};
use engine::pipeline::{RunCx, message_tokens};
use engine::store::MemoryStore;
use engine::wire::{self, Dialect};

struct Totals {
    content: usize,
    tool: usize,
    saved: usize,
    touched_tool: usize,
    changed: usize,
    newest_intact: bool,
}

fn run(config: &Config, bodies: &[(String, Dialect, Vec<u8>)]) -> Totals {
    let pipeline = config.build_pipeline().expect("builds");
    let mut t = Totals {
        content: 0,
        tool: 0,
        saved: 0,
        touched_tool: 0,
        changed: 0,
        newest_intact: true,
    };
    for (_, dialect, bytes) in bodies {
        let parsed = wire::parse(bytes, *dialect).expect("corpus parses");
        let clock = Arc::new(ManualClock::new());
        let store = Arc::new(MemoryStore::new(config.store.limits(), clock.clone()));
        let cx = RunCx::new(*dialect, "savings", store, clock);
        let applied = apply_parsed(&parsed, &pipeline, &cx);
        let before = parsed.messages();
        t.content += before.iter().map(message_tokens).sum::<usize>();
        t.saved += applied.report.saved_tokens();
        let tools: Vec<usize> = (0..before.len()).filter(|&i| before[i].is_tool()).collect();
        t.tool += tools
            .iter()
            .map(|&i| message_tokens(&before[i]))
            .sum::<usize>();
        for &i in &tools {
            if applied.messages.get(before, i) != Some(&before[i]) {
                t.touched_tool += message_tokens(&before[i]);
                t.changed += 1;
            }
        }
        for &i in tools.iter().rev().take(3) {
            if applied.messages.get(before, i) != Some(&before[i]) {
                t.newest_intact = false;
            }
        }
    }
    t
}

fn pct(part: usize, whole: usize) -> String {
    format!("{:.2}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// What `skeleton` removes from file reads: the reads of a known language (by path), their
/// tokens, and the tokens saved, on the public runs and the Claude Code sessions.
fn skeleton_table(public: &[(String, Dialect, Vec<u8>)]) {
    let mut claude_code = Vec::new();
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        for (name, bytes) in benches::corpus_bodies("claude-code", dialect) {
            claude_code.push((name, dialect, bytes));
        }
    }
    println!("\n### skeleton on file reads\n");
    println!(
        "| corpus | config | source reads | read tokens | reads skeletonized | tokens saved | share of read tokens |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|");
    for (corpus, bodies) in [("public", public), ("claude-code", &claude_code[..])] {
        let mut reads = 0;
        let mut read_tokens = 0;
        for (_, dialect, bytes) in bodies {
            let parsed = wire::parse(bytes, *dialect).expect("corpus parses");
            for m in parsed.messages().iter().filter(|m| m.is_tool()) {
                let path = engine::components::skeleton::read_path(m);
                if path
                    .as_deref()
                    .and_then(engine::code::Lang::from_path)
                    .is_some()
                {
                    reads += 1;
                    read_tokens += message_tokens(m);
                }
            }
        }
        for block in ["{}", "{keep_recent: 0}"] {
            let config = Config::parse(&format!(
                "pipeline: [skeleton]\ncomponents:\n  skeleton: {block}"
            ))
            .expect("builds");
            let t = run(&config, bodies);
            println!(
                "| {corpus} | `{block}` | {reads} | {read_tokens} | {} | {} | {} |",
                t.changed,
                t.saved,
                pct(t.saved, read_tokens)
            );
        }
    }
}

fn main() {
    let mut bodies = Vec::new();
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        for (name, bytes) in benches::public_bodies(dialect) {
            bodies.push((name, dialect, bytes));
        }
    }
    let base = run(
        &Config::parse("pipeline: []").expect("empty config"),
        &bodies,
    );
    println!(
        "{} final requests ({} runs x 2 dialects): {} content tokens, {} of them in tool outputs.\n",
        bodies.len(),
        bodies.len() / 2,
        base.content,
        base.tool
    );
    println!("### Per component (each alone)\n");
    println!(
        "| component | tool outputs changed | tokens saved | share of content tokens | share of tool-output tokens touched |"
    );
    println!("|---|--:|--:|--:|--:|");
    for factory in engine::components::ALL {
        let config = Config::parse(&format!("pipeline: [{}]", factory.name())).expect("builds");
        let t = run(&config, &bodies);
        println!(
            "| {} | {} | {} | {} | {} |",
            factory.name(),
            t.changed,
            t.saved,
            pct(t.saved, t.content),
            pct(t.touched_tool, t.tool)
        );
    }
    println!("\n### Per preset\n");
    println!(
        "| preset | tokens saved | share of content tokens | share of tool-output tokens touched | newest 3 tool outputs byte-identical |"
    );
    println!("|---|--:|--:|--:|:-:|");
    for preset in PRESETS {
        let config = Config::from_preset(preset.name).expect("preset builds");
        let t = run(&config, &bodies);
        println!(
            "| {} | {} | {} | {} | {} |",
            preset.name,
            t.saved,
            pct(t.saved, t.content),
            pct(t.touched_tool, t.tool),
            if t.newest_intact { "yes" } else { "no" }
        );
    }
    skeleton_table(&bodies);
    println!("\n### cmdfilter builtins on the corpus's tool outputs\n");
    let set = FilterSet::builtins().expect("builtins load");
    let mut matched: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut outputs = 0;
    for (_, dialect, bytes) in &bodies {
        let parsed = wire::parse(bytes, *dialect).expect("corpus parses");
        for m in parsed
            .messages()
            .iter()
            .filter(|m| m.is_tool() && m.rewritable)
        {
            outputs += 1;
            if m.content.len() < 400 {
                continue;
            }
            let command = engine::components::cmdfilter::command_of(m);
            if let Some(filter) = set.select(&selector(command.as_deref(), &m.content)) {
                let out = filter.apply(&m.content);
                let entry = matched.entry(filter.name.clone()).or_default();
                entry.0 += 1;
                entry.1 += engine::tokens::count(&m.content)
                    .saturating_sub(engine::tokens::count(&out.text));
            }
        }
    }
    println!(
        "{outputs} text tool outputs; builtins that matched at least one (400 bytes or more):\n"
    );
    println!("| builtin | outputs matched | tokens saved (before marker) |");
    println!("|---|--:|--:|");
    for (name, (n, saved)) in &matched {
        println!("| {name} | {n} | {saved} |");
    }
    println!(
        "\n{} of {} builtins matched something.",
        matched.len(),
        set.filters().len()
    );
}
