//! The presets ([`PRESETS`]): named pipelines with tuned component blocks, under the
//! reference's names.

use crate::components;

/// A preset: a named pipeline, plus tuned component blocks that apply unless the user's own
/// block for that component is present.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    pub name: &'static str,
    pub pipeline: &'static [&'static str],
    pub description: &'static str,
    /// A YAML document with a `components:` map, or "".
    pub tuned: &'static str,
}

/// Every preset, with the reference's names and orders (lossless repackers first, `linecap` last
/// among the reference's offloaders, `cachesplit` last of all). `delta` (ours) follows every
/// offloader, so the output a diff points into is forwarded whole (a test in `delta.rs` checks
/// every preset). One exception to the reference's order: `agent` (issue #22) runs
/// `collapse` and `linecap` before the extractors, because on warm traffic only the arrival
/// turn's cuts are free and the extractors wait for cold turns anyway; an output collapsed on
/// arrival carries a marker, so the extractors leave it alone.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "off",
        pipeline: &[],
        description: "forward everything untouched",
        tuned: "",
    },
    Preset {
        name: "safe",
        pipeline: &["format", "textclean", "searchfold", "cachesplit"],
        description: "lossless repacking only",
        tuned: "",
    },
    Preset {
        name: "balanced",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "linecap",
            "delta",
            "cachesplit",
        ],
        description: "lossless repacking plus safe, recoverable offloads",
        tuned: "",
    },
    Preset {
        name: "aggressive",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "smartcrush",
            "extract",
            "extract_llm",
            "linecap",
            "cachesplit",
        ],
        description: "balanced plus JSON-array crushing and query-aware extraction",
        tuned: "",
    },
    Preset {
        name: "coding",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "skeleton",
            "cmdfilter",
            "extract",
            "linecap",
            "delta",
            "cachesplit",
        ],
        description: "coding agents: code shape for older file reads, command filters, extraction",
        tuned: "",
    },
    Preset {
        name: "codesafe",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "extract",
            "collapse",
            "linecap",
            "cachesplit",
        ],
        description: "coding agents, deterministic only, with a collapse fallback",
        tuned: "components:\n  collapse: {max_tokens: 3000}\n",
    },
    Preset {
        name: "codesmart",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "extract_llm",
            "extract",
            "linecap",
            "cachesplit",
        ],
        description: "coding agents with a cheap-model extractor (context-guru's default)",
        tuned: "components:\n  extract: {min_tokens: 400}\n  extract_llm: {strategy: code, model: {source: config}, min_tokens: 3000, trigger: {min_request_tokens: 3000}, llm_max_per_request: 4}\n",
    },
    Preset {
        name: "mcp",
        pipeline: &["format", "textclean", "smartcrush", "cachesplit"],
        description: "MCP/API JSON payloads",
        tuned: "",
    },
    Preset {
        name: "agent",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "mask",
            "collapse",
            "linecap",
            "extract",
            "extract_llm",
            "delta",
            "cachesplit",
        ],
        description: "long agentic sessions: compacts each output on arrival, masks by age on cold turns",
        // Chosen by the sweep in docs/performance.md ("Choosing the presets", issue #22). On warm
        // traffic a change is free only the turn an output first appears, so collapse and
        // linecap act on arrival (a failing call's output stays whole: the model reads it next).
        // mask, failed_run and the extractors make depth decisions, which a warm turn's cached
        // prefix holds back; they act on cold turns. mask runs before collapse so a cold turn
        // masks an old output whole rather than leaving its collapsed head and tail. delta runs
        // after every stage that can cut an output, so a diff's base is forwarded whole.
        tuned: "components:\n  failed_run: {keep_recent: 3}\n  extract: {keep_recent: 3}\n  extract_llm: {keep_recent: 3}\n",
    },
    Preset {
        name: "general",
        pipeline: &[
            "format",
            "textclean",
            "searchfold",
            "dedup",
            "failed_run",
            "cmdfilter",
            "mask",
            "extract",
            "extract_llm",
            "collapse",
            "linecap",
            "delta",
            "cachesplit",
        ],
        description: "everything deterministic plus the cheap-model extractor",
        // Measured in docs/performance.md ("Choosing the presets"): extracting on arrival hid
        // what the next turns used (92 expand rounds against 36), so the extractors wait for a
        // cold turn, as in `agent`. delta runs after every stage that can cut an output, so a
        // diff's base is forwarded whole.
        tuned: "components:\n  extract: {keep_recent: 3}\n  extract_llm: {keep_recent: 3}\n",
    },
    Preset {
        name: "triage",
        pipeline: &[
            "stale_output",
            "repeated_call",
            "failed_call",
            "oversized_block",
            "stale_reasoning",
        ],
        description: "the five triage screeners, on every request (context-guru's manual /triage)",
        tuned: "",
    },
    Preset {
        name: "summarize",
        pipeline: &["summarize"],
        description: "one LLM summary of the middle (runs alone)",
        tuned: "",
    },
    Preset {
        name: "agentdiet",
        pipeline: &["format", "agentdiet", "cachesplit"],
        description: "context-guru's trajectory-diet experiment",
        tuned: "",
    },
];

pub fn find_preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// Whether listings offer the preset (`sluice presets`, the known names of an unknown-preset
/// error): not one that names a component listings leave out (`agentdiet`, which does nothing
/// in this build; see `components::is_listed`). Such a preset still loads, with the warning.
pub fn preset_is_listed(preset: &Preset) -> bool {
    preset
        .pipeline
        .iter()
        .all(|name| components::is_listed(name))
}

/// The presets listings offer, in [`PRESETS`]'s order.
pub fn listed_presets() -> impl Iterator<Item = &'static Preset> {
    PRESETS.iter().filter(|p| preset_is_listed(p))
}

/// The names of [`listed_presets`], comma-separated.
pub fn known_presets() -> String {
    listed_presets()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What to say of a preset name that is none of [`PRESETS`]: the name, the listed preset it is
/// likely a typo of, `at` (where a file wrote it; "" for a flag or a variable), then the known
/// names; for example: unknown preset `balancd` (did you mean `balanced`?); known: off, ...
pub fn unknown_preset(name: &str, at: &str) -> String {
    let hint = nearest_preset(name)
        .map(|p| format!(" (did you mean `{p}`?)"))
        .unwrap_or_default();
    format!(
        "unknown preset `{}`{hint}{at}; known: {}",
        name.escape_debug(),
        known_presets()
    )
}

/// The listed preset `name` is at most two edits from (the closest, the first of equals).
fn nearest_preset(name: &str) -> Option<&'static str> {
    listed_presets()
        .map(|p| (edit_distance(name, p.name), p.name))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, found)| found)
}

/// Levenshtein distance over chars: insertions, deletions and substitutions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Whether every component of a preset is built in this version.
pub fn preset_is_available(preset: &Preset) -> bool {
    preset
        .pipeline
        .iter()
        .all(|name| components::find(name).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_preset_names_the_near_one_and_the_known_ones() {
        assert_eq!(edit_distance("balancd", "balanced"), 1);
        assert_eq!(edit_distance("", "off"), 3);
        assert_eq!(edit_distance("agnet", "agent"), 2);
        let message = unknown_preset("balancd", "");
        assert!(
            message.starts_with(
                "unknown preset `balancd` (did you mean `balanced`?); known: off, safe, balanced,"
            ),
            "{message}"
        );
        assert!(!message.contains("line"), "{message}");
        let far = unknown_preset("zzzzzzzz", "");
        assert!(
            far.starts_with("unknown preset `zzzzzzzz`; known: "),
            "{far}"
        );
    }

    #[test]
    fn a_preset_that_does_nothing_here_is_not_listed_but_loads() {
        let agentdiet = find_preset("agentdiet").unwrap();
        assert!(!preset_is_listed(agentdiet));
        assert!(!known_presets().split(", ").any(|n| n == "agentdiet"));
        assert!(listed_presets().any(|p| p.name == "balanced"));
        let config = crate::config::Config::from_preset("agentdiet").unwrap();
        assert!(
            config.warnings.iter().any(|w| w.contains("agentdiet")),
            "{:?}",
            config.warnings
        );
    }
}
