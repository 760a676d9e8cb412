//! sluice's end-to-end tests, one binary (each test binary costs a link step on CI).

mod abuse;
// The docs' generated blocks, one source with the product crate's own doc checks
// (`proxy/src/generated.rs`), which render tables only `proxy` can see.
mod agents;
mod bedrock;
mod claude_code;
mod corpus;
mod dashboard;
mod docs;
mod fuzz;
mod gemini;
#[path = "../../proxy/src/generated.rs"]
mod generated;
mod glossary;
mod keepalive;
mod llm;
mod net;
mod packaging;
mod parity;
mod prefix;
mod properties;
mod proxy;
mod references;
mod restore;
mod sessions;
mod tidy;
mod way_back;
