//! Cheap-model clients and the LLM actor behind `extract` and `summarize` (filled by the LLM issue).
