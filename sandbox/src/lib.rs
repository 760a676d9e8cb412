//! Starlark sandbox for LLM-written filters: step, wall-clock and heap budgets (filled by the extract issue).
