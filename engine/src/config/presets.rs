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
        description: "coding agents with a cheap-model extractor (the reference's default)",
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
        description: "the five triage screeners, on every request (the spec's manual /triage)",
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
        description: "the reference's trajectory-diet experiment",
        tuned: "",
    },
];

pub fn find_preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// Whether every component of a preset is built in this version.
pub fn preset_is_available(preset: &Preset) -> bool {
    preset
        .pipeline
        .iter()
        .all(|name| components::find(name).is_some())
}
