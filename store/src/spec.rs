//! Where state lives ([`StoreSpec`], as `--store` names it), and how a store's URL is shown
//! without its credentials ([`redact_url`]).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Where state lives, as `--store`, `SLUICE_STORE` or `store.backend` name it.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// In this process only (`memory`): tests, `sluice compact`, an ephemeral run.
    Memory,
    /// Nothing is kept (`off`): every offload stays inert.
    Off,
    /// `sqlite:PATH`: embedded and durable, one process per file.
    Sqlite(PathBuf),
    /// `redis://HOST:PORT/DB`: shared by replicas; or
    /// `redis+sentinel://HOST:PORT[,HOST:PORT...]/PRIMARY[/DB]`: the primary a set of Redis
    /// Sentinels names, followed through a failover.
    Redis(String),
}

/// A `--store` value that names no backend (a password in it is not repeated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown store `{}`: use `memory`, `off`, `sqlite:PATH`, `redis://HOST:PORT/DB` or `redis+sentinel://HOST:PORT,.../PRIMARY/DB` (TLS to Redis is not built in)",
    redact_url(.0)
)]
pub struct UnknownStore(pub String);

impl FromStr for StoreSpec {
    type Err = UnknownStore;

    fn from_str(s: &str) -> Result<StoreSpec, UnknownStore> {
        match s {
            "memory" => return Ok(StoreSpec::Memory),
            // The reference's `--store` switched `store.enabled`; its values still work.
            "off" | "false" | "disabled" => return Ok(StoreSpec::Off),
            _ => {}
        }
        if let Some(path) = s.strip_prefix("sqlite:").filter(|p| !p.is_empty()) {
            return Ok(StoreSpec::Sqlite(PathBuf::from(path)));
        }
        // `rediss://` (TLS) is not built in: it would bring a second TLS stack (see
        // docs/dev/concerns.md, "Dependencies"); a TLS tunnel in front of Redis works.
        if s.starts_with("redis://") || s.starts_with("redis+sentinel://") {
            return Ok(StoreSpec::Redis(s.to_owned()));
        }
        Err(UnknownStore(s.to_owned()))
    }
}

/// Printed at start-up and in `/stats`: a Redis password never is.
impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Off => f.write_str("off"),
            StoreSpec::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            StoreSpec::Redis(url) => f.write_str(&redact_url(url)),
        }
    }
}

impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `redis://user:secret@host/0` → `redis://user:***@host/0`. Everything between `://` and the
/// last `@` is credentials, whatever characters the password has (a `/` included).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((credentials, host)) => {
            let user = credentials
                .split_once(':')
                .map_or("", |(user, _)| user)
                .split('/')
                .next()
                .unwrap_or("");
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_owned(),
    }
}
