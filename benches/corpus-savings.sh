#!/usr/bin/env bash
# Tokens saved per component over the final requests of the public corpus, both dialects.
# Usage: bash benches/corpus-savings.sh [--preset NAME | --config FILE]
# Prints a Markdown table (the one in docs/components.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# The corpus in the repository (bodies gzipped), or SLUICE_CORPUS: the same layout, gzipped or not.
corpus="${SLUICE_CORPUS:-tests/corpus}"
cargo build -q --release --bin sluice
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
shopt -s nullglob
for body in "$corpus"/public/*/openai.json{,.gz} "$corpus"/public/*/anthropic.json{,.gz}; do
    name="$(basename "$body" .gz)"
    run="$(basename "$(dirname "$body")")-$(basename "$name" .json)"
    # `sluice compact` reads plain JSON: `gzip -dcf` unpacks a .gz and passes a plain file through.
    gzip -dcf "$body" | target/release/sluice compact "$@" --report "$tmp/$run.report.json" - >/dev/null
done
python3 - "$tmp" <<'PY'
import json, pathlib, sys, collections
reports = [json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("*.report.json"))]
before = sum(r["report"]["tokens_before"] for r in reports)
after = sum(r["report"]["tokens_after"] for r in reports)
saved = collections.Counter(); acted = collections.Counter(); gates = collections.defaultdict(collections.Counter)
for r in reports:
    for c in r["report"]["components"]:
        saved[c["name"]] += c["saved_tokens"]; acted[c["name"]] += len(c["changed"]) if not c["reverted"] else 0
        gates[c["name"]].update(c["gates"])
print(f"{len(reports)} bodies, {before:,} content tokens before, {after:,} after ({100*(before-after)/max(before,1):.2f}% saved)\n")
print("| component | messages changed | tokens saved | share of all content tokens | top skip reasons |")
print("|---|--:|--:|--:|---|")
for name in saved:
    top = ", ".join(f"{g} {n}" for g, n in gates[name].most_common(3))
    print(f"| {name} | {acted[name]} | {saved[name]:,} | {100*saved[name]/max(before,1):.2f}% | {top} |")
PY
