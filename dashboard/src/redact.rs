//! Scrubbing credentials out of captured message content before it reaches the database.
//!
//! Message content is arbitrary agent output, so it cannot be allowlisted: it is scrubbed by
//! pattern, which is best effort (a denylist cannot be proven complete). That is why content
//! capture also sits behind two switches: the operator's `--dashboard-content` (off unless
//! opened) and the caller's (on once the operator's is; `x-context-guru-capture: off` closes it). Request headers
//! are never captured at all, and config is served through an allowlist ([`config_view`]).
//!
//! One table, [`PATTERNS`]: a name and a regex. Where the regex has a `secret` group only that
//! group is replaced (the key name of an assignment stays readable); otherwise the whole match
//! is. The replacement is `[redacted:<name>]`.

use std::sync::OnceLock;

use regex::{Captures, Regex};

/// Credential shapes, most specific first (an earlier match is not re-matched by a later one).
pub const PATTERNS: &[(&str, &str)] = &[
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\z)",
    ),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    ("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    (
        "openai_key",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    ),
    (
        "stripe_key",
        r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
    ),
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})",
    ),
    ("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/services/[A-Za-z0-9/]+",
    ),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("google_oauth", r"\bya29\.[0-9A-Za-z_-]{20,}"),
    (
        "aws_access_key_id",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b",
    ),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi_token", r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    (
        "sendgrid_key",
        r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b",
    ),
    ("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}\b"),
    (
        "auth_header",
        r"(?i)\b(?:authorization|proxy-authorization)\s*[:=]\s*(?:(?:bearer|basic|token|digest)\s+)?(?P<secret>[^\s,;]{8,})",
    ),
    (
        "bearer_token",
        r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{16,})",
    ),
    (
        "api_key_header",
        r"(?i)\b(?:x-api-key|api-key|x-goog-api-key|x-auth-token)\s*[:=]\s*(?P<secret>[^\s,;]{8,})",
    ),
    (
        "url_password",
        r"\b[a-z][a-z0-9+.-]*://[^\s:/@]*:(?P<secret>[^\s@/]+)@",
    ),
    (
        "assignment",
        r#"(?i)\b["']?[A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|accountkey|client[_-]?secret|credentials?)["']?\s*(?:[:=]|=>)\s*["']?(?P<secret>[^\s"',;]{6,})"#,
    ),
];

fn compiled() -> &'static [(&'static str, Regex)] {
    static COMPILED: OnceLock<Vec<(&'static str, Regex)>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        PATTERNS
            .iter()
            // The table is a constant and a test compiles every entry.
            .map(|(name, pattern)| (*name, Regex::new(pattern).expect("PATTERNS compile")))
            .collect()
    })
}

/// `text` with every credential shape replaced by `[redacted:<name>]`.
pub fn redact(text: &str) -> String {
    let mut out = text.to_owned();
    for (name, regex) in compiled() {
        if !regex.is_match(&out) {
            continue;
        }
        out = regex
            .replace_all(&out, |caps: &Captures<'_>| replacement(name, caps))
            .into_owned();
    }
    out
}

fn replacement(name: &str, caps: &Captures<'_>) -> String {
    let whole = caps.get(0).map_or("", |m| m.as_str());
    // An earlier pattern's replacement is not a secret.
    if whole.contains("[redacted:")
        && caps
            .name("secret")
            .is_none_or(|s| s.as_str().starts_with("[redacted"))
    {
        return whole.to_owned();
    }
    match caps.name("secret") {
        Some(secret) => {
            let start = secret.start() - caps.get(0).map_or(0, |m| m.start());
            let end = start + secret.len();
            format!("{}[redacted:{name}]{}", &whole[..start], &whole[end..])
        }
        None => format!("[redacted:{name}]"),
    }
}

/// Key names that always mean a credential: their values are never served.
fn credential_named(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "password",
        "credential",
        "authorization",
        "cookie",
    ]
    .iter()
    .any(|word| key.contains(word))
        && !matches!(key.as_str(), "max_tokens" | "min_tokens" | "keep_tokens")
        && !key.ends_with("_tokens")
}

/// Top-level config keys the dashboard may show.
pub const CONFIG_ALLOWLIST: &[&str] = &[
    "mode",
    "preset",
    "pipeline",
    "components",
    "cache",
    "store",
    "tools",
    "count_tokens",
    "bypass",
];

/// The effective config as the dashboard serves it: allowlisted top-level keys only, every
/// credential-named key withheld at any depth, and strings scrubbed (a `user:password@` URL).
pub fn config_view(config: &serde_json::Value) -> serde_json::Value {
    let Some(object) = config.as_object() else {
        return serde_json::Value::Null;
    };
    let kept = object
        .iter()
        .filter(|(key, _)| CONFIG_ALLOWLIST.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), scrub_value(value)))
        .collect();
    serde_json::Value::Object(kept)
}

fn scrub_value(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .map(|(key, value)| {
                    if credential_named(key) && !value.is_object() {
                        (key.clone(), Value::String("[withheld]".into()))
                    } else {
                        (key.clone(), scrub_value(value))
                    }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(scrub_value).collect()),
        Value::String(text) => Value::String(redact(text)),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        for (name, pattern) in PATTERNS {
            assert!(Regex::new(pattern).is_ok(), "{name}");
        }
    }

    /// Realistic credential shapes, each in a realistic surrounding, and the secret part that
    /// must not survive.
    const SHAPES: &[(&str, &str)] = &[
        (
            "export ANTHROPIC_API_KEY=sk-ant-api03-Xk9vQ2mZr7LpT4wNb8YcHd3Fj6Ks1Ae5Gu0Io-ABCDEF",
            "sk-ant-api03-Xk9vQ2mZr7LpT4wNb8YcHd3Fj6Ks1Ae5Gu0Io-ABCDEF",
        ),
        (
            "client = OpenAI(api_key=\"sk-proj-4fGh7JkL9mNpQrStUvWxYz0123456789abcdEFGH\")",
            "sk-proj-4fGh7JkL9mNpQrStUvWxYz0123456789abcdEFGH",
        ),
        (
            "OPENAI_API_KEY: sk-Abc123Def456Ghi789Jkl012Mno345Pqr678",
            "sk-Abc123Def456Ghi789Jkl012Mno345Pqr678",
        ),
        (
            "stripe.api_key = 'sk_live_51HqLyjWDarjtT1zdp7dcXMpLQ'",
            "sk_live_51HqLyjWDarjtT1zdp7dcXMpLQ",
        ),
        (
            "restricted: rk_test_4eC39HqLyjWDarjtT1zdp7dc",
            "rk_test_4eC39HqLyjWDarjtT1zdp7dc",
        ),
        (
            "git clone https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/org/repo",
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        ),
        (
            "GITHUB_TOKEN=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRS",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRS",
        ),
        (
            "gitlab: glpat-xYz123AbC456dEf789Gh",
            "glpat-xYz123AbC456dEf789Gh",
        ),
        (
            "HF_TOKEN hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
            "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
        ),
        (
            "slack bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        ),
        (
            "post to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
            "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        ),
        (
            "maps key AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY in config.js",
            "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
        ),
        (
            "token ya29.a0AfH6SMBx3kLmNoPqRsTuVwXyZ0123456789abcdef",
            "ya29.a0AfH6SMBx3kLmNoPqRsTuVwXyZ0123456789abcdef",
        ),
        (
            "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n",
            "AKIAIOSFODNN7EXAMPLE",
        ),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        (
            "Cookie: session=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ),
        (
            "$ cat id_rsa\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACDmXoGsecretsecretsecret\n-----END OPENSSH PRIVATE KEY-----\n",
            "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
        ),
        (
            "curl -H 'Authorization: Bearer abcdef0123456789abcdef0123456789' https://api.example.com",
            "abcdef0123456789abcdef0123456789",
        ),
        (
            "> Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==",
            "dXNlcjpwYXNzd29yZDEyMw==",
        ),
        (
            "curl -H \"x-api-key: a1b2c3d4e5f6a7b8c9d0\" https://api.anthropic.com/v1/messages",
            "a1b2c3d4e5f6a7b8c9d0",
        ),
        (
            "DATABASE_URL=postgres://admin:Sup3rS3cretPw@db.internal:5432/app",
            "Sup3rS3cretPw",
        ),
        (
            "{\"db_password\": \"hunter2hunter2\", \"user\": \"app\"}",
            "hunter2hunter2",
        ),
        (
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;",
            "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
        ),
        (
            "//registry.npmjs.org/:_authToken=npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        ),
        (
            "SENDGRID_API_KEY=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",
            "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",
        ),
        ("password: correct-horse-battery", "correct-horse-battery"),
        (
            "REDIS_URL=redis://:s3cr3tpass@cache.internal:6379/0",
            "s3cr3tpass",
        ),
    ];

    #[test]
    fn realistic_credential_shapes_are_scrubbed() {
        assert!(SHAPES.len() >= 22);
        for (text, secret) in SHAPES {
            let out = redact(text);
            assert!(!out.contains(secret), "{secret} survived in {out:?}");
            assert!(out.contains("[redacted:"), "{out:?}");
        }
    }

    #[test]
    fn ordinary_tool_output_is_left_alone() {
        for text in [
            "def test_task_runner():\n    assert run('sk') == 0",
            "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
            "id: 123e4567-e89b-12d3-a456-426614174000",
            "the password field must not be empty",
            "max_tokens: 4096, tokens_before: 1200",
            "FAILED tests/test_auth.py::test_token_refresh - AssertionError",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn config_view_allowlists_and_withholds() {
        let config = serde_json::json!({
            "mode": "sync",
            "pipeline": ["dedup"],
            "components": {"extract_llm": {"model": {"api_key": "sk-live-xyz", "base_url": "https://u:pw123456@llm.internal/v1", "max_tokens": 400}}},
            "upstream_token": "abc",
            "unknown": 1
        });
        let view = config_view(&config);
        let text = view.to_string();
        assert!(
            !text.contains("sk-live-xyz") && !text.contains("pw123456"),
            "{text}"
        );
        assert!(view.get("upstream_token").is_none() && view.get("unknown").is_none());
        assert_eq!(
            view["components"]["extract_llm"]["model"]["max_tokens"],
            400
        );
        assert_eq!(view["pipeline"][0], "dedup");
    }
}
