//! sluice's end-to-end tests, one binary (each test binary costs a link step on CI).

mod abuse;
mod agents;
mod bedrock;
mod claude_code;
mod corpus;
mod dashboard;
mod docs;
mod fuzz;
mod gemini;
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
mod way_back;
