//! Shared helpers for sluice's end-to-end tests: finding the real corpus and checking bodies.
//!
//! The corpus ships with the repository in `tests/corpus` (its request bodies gzipped), so a
//! fresh clone anywhere runs the whole suite. `SLUICE_CORPUS` points the tests at a larger set
//! laid out the same way, gzipped or plain; nothing outside the repository is looked for.

pub mod aws;
pub mod mock;
pub mod redis;

use std::io::Read as _;
use std::path::{Path, PathBuf};

use engine::wire::{Dialect, json};

/// The corpus root: `SLUICE_CORPUS` when set, else the copy in the repository.
///
/// # Panics
/// When the folder has no `public` set: the tests are meaningless without it, so they fail
/// loudly rather than pass over nothing.
pub fn corpus_root() -> PathBuf {
    let root = std::env::var_os("SLUICE_CORPUS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"),
        PathBuf::from,
    );
    assert!(
        root.join("public").is_dir(),
        "no corpus at {} (SLUICE_CORPUS, when set, must name a folder with `public/`)",
        root.display()
    );
    root
}

/// Why a corpus file could not be read.
#[derive(Debug)]
pub enum CorpusError {
    /// Neither the file nor its `.gz` exists.
    Missing(PathBuf),
    /// The file exists but reading it failed.
    Read(PathBuf, std::io::Error),
    /// A `.gz` file that does not decompress.
    NotGzip(PathBuf, std::io::Error),
}

impl std::fmt::Display for CorpusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing(path) => write!(f, "{}: neither it nor its .gz exists", path.display()),
            Self::Read(path, e) => write!(f, "{}: {e}", path.display()),
            Self::NotGzip(path, e) => write!(f, "{}: not gzip: {e}", path.display()),
        }
    }
}

impl std::error::Error for CorpusError {}

/// The file a corpus path names: `path` itself when it exists, else `path.gz`.
///
/// The repository stores bodies gzipped while an external `SLUICE_CORPUS` may hold them plain,
/// so callers name the plain file and take whichever is there.
///
/// # Errors
/// [`CorpusError::Missing`] when neither exists.
pub fn find_corpus_file(path: &Path) -> Result<PathBuf, CorpusError> {
    if path.is_file() {
        return Ok(path.to_owned());
    }
    let mut gz = path.as_os_str().to_owned();
    gz.push(".gz");
    let gz = PathBuf::from(gz);
    if gz.is_file() {
        Ok(gz)
    } else {
        Err(CorpusError::Missing(path.to_owned()))
    }
}

/// The plain bytes of a corpus file: `path` (`openai.json`, `turns.openai.jsonl`, ...) or its
/// `.gz`, decompressed. A name that already ends in `.gz` is read and decompressed too.
///
/// # Errors
/// A missing or unreadable file, or a `.gz` that does not decompress.
pub fn read_corpus_file(path: &Path) -> Result<Vec<u8>, CorpusError> {
    let file = find_corpus_file(path)?;
    let bytes = std::fs::read(&file).map_err(|e| CorpusError::Read(file.clone(), e))?;
    if file.extension().is_none_or(|e| e != "gz") {
        return Ok(bytes);
    }
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_end(&mut plain)
        .map_err(|e| CorpusError::NotGzip(file, e))?;
    Ok(plain)
}

/// One request body of the corpus.
#[derive(Debug)]
pub struct CorpusBody {
    /// The file read (`.../openai.json` or `.../openai.json.gz`).
    pub path: PathBuf,
    pub dialect: Dialect,
    pub bytes: Vec<u8>,
}

/// Every `{openai,anthropic}.json[.gz]` under `public/` and `claude-code/`, in a stable order.
///
/// # Panics
/// On a body that exists but cannot be read or decompressed, or a corpus of fewer than 90.
pub fn bodies() -> Vec<CorpusBody> {
    let mut out = Vec::new();
    for set in ["public", "claude-code"] {
        let mut runs: Vec<PathBuf> = std::fs::read_dir(corpus_root().join(set))
            .expect("corpus set is readable")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        runs.sort();
        for run in runs {
            for (file, dialect) in [
                ("openai.json", Dialect::OpenAi),
                ("anthropic.json", Dialect::Anthropic),
            ] {
                let path = match find_corpus_file(&run.join(file)) {
                    Ok(path) => path,
                    // A run recorded in one dialect only.
                    Err(CorpusError::Missing(_)) => continue,
                    Err(e) => panic!("{e}"),
                };
                let bytes = read_corpus_file(&path).unwrap_or_else(|e| panic!("{e}"));
                out.push(CorpusBody {
                    path,
                    dialect,
                    bytes,
                });
            }
        }
    }
    assert!(
        out.len() >= 90,
        "expected the full corpus, found {} bodies",
        out.len()
    );
    out
}

/// The raw text of every top-level field of a JSON object body, by key, except `skip`.
pub fn top_level_fields<'a>(text: &'a str, skip: &str) -> Vec<(&'a str, &'a str)> {
    let root = json::parse_document(text).expect("valid JSON");
    json::entries(text, root)
        .filter(|e| !json::key_is(text, e.key, skip))
        .map(|e| (e.key.of(text), e.value.of(text)))
        .collect()
}

/// Turn k of a recorded session: its final request with the messages before the k-th
/// assistant message (what the agent sent to get that answer), then the final request, all in
/// one serialization (an agent does not reformat its history between turns).
///
/// # Panics
/// On a body without a `messages` array.
pub fn session_turns(bytes: &[u8]) -> Vec<Vec<u8>> {
    let body: serde_json::Value = serde_json::from_slice(bytes).expect("a JSON body");
    let messages = body["messages"].as_array().expect("a messages array");
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if m["role"] == "assistant" && i > 0 {
            let mut turn = body.clone();
            turn["messages"] = serde_json::Value::Array(messages[..i].to_vec());
            out.push(serde_json::to_vec(&turn).expect("serializes"));
        }
    }
    out.push(serde_json::to_vec(&body).expect("serializes"));
    out
}

/// The raw bytes of each element of a body's `messages` array: what a flip check compares.
///
/// # Panics
/// On a body that is not a JSON object with `messages`.
pub fn wire_messages(body: &[u8]) -> Vec<String> {
    use engine::wire::json;
    let text = std::str::from_utf8(body).expect("UTF-8");
    let root = json::parse_document(text).expect("JSON");
    let messages = json::get(text, root, "messages").expect("messages");
    json::elements(text, messages)
        .map(|span| span.of(text).to_owned())
        .collect()
}

/// The OpenAI Responses API body of the same conversation as a chat-completions corpus body
/// (`modes::replay::convert::responses_from_chat`).
///
/// # Panics
/// When `chat` is not a chat-completions body.
pub fn responses_from_chat(chat: &[u8]) -> Vec<u8> {
    modes::replay::convert::responses_from_chat(chat).expect("a chat-completions body")
}

/// The Gemini `generateContent` body of the same conversation as a chat-completions corpus body
/// (`modes::replay::convert::gemini_from_chat`).
///
/// # Panics
/// When `chat` is not a chat-completions body.
pub fn gemini_from_chat(chat: &[u8]) -> Vec<u8> {
    modes::replay::convert::gemini_from_chat(chat).expect("a chat-completions body")
}
