#!/usr/bin/env bash
# Sweeps configs over the public corpus with `sluice replay` (30 s between turns) and prints one
# Markdown row per config: net saved and saved before expand rounds (the headline, /stats'
# figure), billed input saved on the cost model with and without the rounds, expand rounds,
# cache writes, flips, visible recall and recall. The tables in docs/performance.md ("Choosing
# the presets") came from its earlier form, which led with the billed change (negative for a
# saving).
#
# Usage: [SWEEP_GAP=SECONDS] bash benches/sweep.sh (collapse | delta | presets | amortize | LABEL=YAML ...)
#   A YAML is a config document layered on the embedded default, e.g.
#   'b4000=components: {collapse: {max_tokens: 4000}}'; `preset:NAME` runs that preset.
#   `collapse`, `delta`, `presets` and `amortize` are the grids docs/performance.md records.
set -euo pipefail
cd "$(dirname "$0")/.."
keep3="{keep_recent: 3}"
[ $# -gt 0 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
case "${1:-}" in
collapse)
    set --
    for kf in 0 8000; do
        for mt in 1500 2000 3000; do
            for hl in 10 20; do
                set -- "$@" "keep_failures $kf, max_tokens $mt, head/tail $hl=components: {collapse: {keep_failures: $kf, max_tokens: $mt, head_lines: $hl, tail_lines: $hl}}"
            done
        done
    done
    ;;
delta)
    # Where `delta` sits and how far back it looks, on the embedded default's pipeline. Ahead
    # of collapse and linecap is measured for the record only: there a later stage can cut the
    # base a diff points into, so the presets never put it there.
    set -- "without delta=pipeline: [format, textclean, dedup, collapse, linecap]"
    for order in "dedup, delta, collapse, linecap" "dedup, collapse, linecap, delta"; do
        set -- "$@" "[$order]=pipeline: [format, textclean, $order]"
    done
    for w in 8 30 60 200; do
        for share in 0.5 0.8; do
            set -- "$@" "window $w, max_diff_share $share=components: {delta: {window: $w, max_diff_share: $share}}"
        done
    done
    ;;
presets)
    # The `agent` and `general` rows as they were before issue #22 chose them, beside today's.
    set -- "embedded default=components: {}" \
        "agent=preset:agent" \
        "agent before #22=pipeline: [format, textclean, searchfold, dedup, failed_run, mask, extract, extract_llm, cachesplit]
components: {format: $keep3, textclean: $keep3, searchfold: $keep3, dedup: $keep3, failed_run: $keep3, extract: $keep3, extract_llm: $keep3}" \
        "general=preset:general" \
        "general before #22=pipeline: [format, textclean, searchfold, dedup, failed_run, cmdfilter, mask, extract, extract_llm, collapse, linecap, cachesplit]" \
        "balanced=preset:balanced" "coding=preset:coding" "coding, extract on cold turns=preset: coding
components: {extract: $keep3}"
    ;;
amortize)
    # Depth re-writes on warm turns (`cache.amortize`), beside the same configs without them.
    set -- "embedded default=components: {}" \
        "embedded default + amortize=cache: {amortize: {enabled: true}}" \
        "agent=preset:agent" \
        "agent + amortize=preset: agent
cache: {amortize: {enabled: true}}"
    ;;
esac
cargo build -q --release --bin sluice
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "| config | net saved | before expand rounds | billed input saved | billed, before expand rounds | expand rounds | cache writes | flips | visible recall | recall |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
for spec in "$@"; do
    label="${spec%%=*}"
    yaml="${spec#*=}"
    # `preset:NAME` alone runs the preset; a document that merely starts with `preset:` (and
    # layers more keys on it) goes in as a config file like any other.
    if [[ "$yaml" =~ ^preset:[A-Za-z0-9_-]+$ ]]; then
        args=(--preset "${yaml#preset:}")
    else
        printf '%s\n' "$yaml" >"$tmp/config.yaml"
        args=(--config "$tmp/config.yaml")
    fi
    target/release/sluice replay tests/corpus/public "${args[@]}" --gap "${SWEEP_GAP:-30}" --format json >"$tmp/out.json"
    python3 - "$label" "$tmp/out.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[2]))["totals"]
# Savings read positive, a loss negative (the report's convention, and /stats').
print(f"| {sys.argv[1]} | {t['net_savings_pct']:.2f}% | {t['savings_pct_gross']:.2f}% "
      f"| {t['billed_savings_pct']:.2f}% | {t['billed_savings_pct_gross']:.2f}% | {t['expand_rounds']} "
      f"| {t['cache_write_change_pct']:+.2f}% | {t['flips']} "
      f"| {t['visible_recall_pct']:.2f}% | {t['recall_pct']:.2f}% |")
PY
done
