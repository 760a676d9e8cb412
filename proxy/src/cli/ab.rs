//! `sluice ab report`: what a live A/B experiment (`sluice serve --ab SHARE`) found, per arm,
//! agent and model, read from the store its replicas share.

use std::io::{Read, Write};
use std::sync::Arc;

use clap::{Args, Subcommand};

use super::{
    ConfigArgs, Failure, ListenArg, serve::store_spec, stdout_result, wrap::sluice_answers,
};

#[derive(Debug, Subcommand)]
pub(super) enum AbCommand {
    /// Print the experiment's report: each arm's sessions, cost, tokens and turns per session
    /// and error rate, and the treatment's difference with its bootstrap 95% interval. Asks the
    /// sluice on --listen when one answers (it reads the store now), else reads the store.
    Report(AbReportArgs),
}

#[derive(Debug, Args)]
pub(super) struct AbReportArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    #[command(flatten)]
    pub(super) listen: ListenArg,
    /// The state store to read (as `serve --store`); without it, the running sluice's, or the
    /// one the config names.
    #[arg(long, env = "SLUICE_STORE", hide_env_values = true)]
    pub(super) store: Option<store::StoreSpec>,
    /// The experiment's name (else the config's `experiment.name`, `ab` by default).
    #[arg(long)]
    pub(super) experiment: Option<String>,
    /// JSON, as `GET /ab` gives it.
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) fn ab(command: AbCommand) -> Result<(), Failure> {
    let AbCommand::Report(args) = command;
    let config = args.config.load()?;
    let running = args.store.is_none() && args.experiment.is_none();
    if running && sluice_answers(args.listen.listen) {
        let path = if args.json { "/ab" } else { "/ab?format=text" };
        // A sluice with no experiment running (`--ab` dropped): the rows are still in its
        // store, read below.
        if let Some(text) = ask(args.listen.listen, path)? {
            return stdout_result(std::io::stdout().write_all(text.as_bytes()));
        }
    }
    let mut experiment = config.experiment.clone();
    if let Some(name) = &args.experiment {
        experiment.name.clone_from(name);
    }
    let spec = store_spec(args.store.clone(), &config.store, args.listen.listen)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let rows = runtime.block_on(async {
        let backend: Arc<dyn store::Backend> = match &spec {
            store::StoreSpec::Sqlite(path) => {
                if !path.exists() {
                    return Err(Failure(format!(
                        "{} does not exist: no experiment was recorded there",
                        path.display()
                    )));
                }
                Arc::new(store::sqlite::SqliteBackend::open(path)?)
            }
            store::StoreSpec::Redis(url) => Arc::new(store::redis::RedisBackend::connect(url)?),
            other => {
                return Err(Failure(format!(
                    "an experiment is recorded in a `sqlite:` or `redis://` store, not `{other}`"
                )));
            }
        };
        backend
            .spends(&experiment.name)
            .await
            .map_err(|e| Failure(format!("{}: {e}", backend.describe())))
    })?;
    let report = modes::experiment::Findings::of(
        &experiment.name,
        &rows,
        dashboard::now_ms(),
        experiment.idle_seconds.saturating_mul(1000),
    );
    let text = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        modes::experiment::render(&report)
    };
    stdout_result(std::io::stdout().write_all(text.as_bytes()))
}

/// The body of `GET path` from the sluice at `addr` (its operator routes answer loopback, and a
/// caller with `SLUICE_ADMIN_TOKEN` when one is set); `None` when it runs no experiment.
fn ask(addr: std::net::SocketAddr, path: &str) -> Result<Option<String>, Failure> {
    let mut stream =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let token = std::env::var("SLUICE_ADMIN_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: sluice\r\n{token}connection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(answer.len());
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let body = answer.get(split + 4..).unwrap_or_default();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_vec()
    };
    let body = String::from_utf8_lossy(&body).into_owned();
    let status = head.lines().next().unwrap_or("");
    if status.starts_with("HTTP/1.1 404") {
        return Ok(None);
    }
    if !status.starts_with("HTTP/1.1 200") {
        return Err(Failure(format!(
            "the sluice on {addr} answered {status}: {}",
            body.trim()
        )));
    }
    Ok(Some(body))
}

/// A chunked body's data.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line) = body.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&body[..line]);
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        let rest = &body[line + 2..];
        if n == 0 || rest.len() < n {
            break;
        }
        out.extend_from_slice(&rest[..n]);
        body = rest[n..].strip_prefix(b"\r\n").unwrap_or(&rest[n..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn chunks_are_joined_as_bytes() {
        let body = "5\r\nhéll\r\n3\r\no w\r\n0\r\n\r\n".as_bytes();
        assert_eq!(dechunk(body), "héllo w".as_bytes());
        assert_eq!(dechunk(b"zz\r\n"), b"");
    }
}
