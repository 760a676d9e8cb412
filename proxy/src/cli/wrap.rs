//! `sluice wrap`: run a command (an agent) through sluice, starting one when none answers.

use std::path::PathBuf;

use clap::Args;

use super::{Failure, ListenArg};

#[derive(Debug, Args)]
pub(super) struct WrapArgs {
    #[command(flatten)]
    pub(super) listen: ListenArg,
    /// Arguments for the `sluice serve` it starts (`--preset agent`, `--store memory`, ...).
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    pub(super) serve_args: Vec<String>,
    /// Where the started sluice logs (else nowhere: the command owns the terminal).
    #[arg(long)]
    pub(super) log: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub(super) command: Vec<String>,
}

/// Whether a sluice answers `/healthz` at `addr`.
pub(super) fn sluice_answers(addr: std::net::SocketAddr) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(300))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    let asked =
        stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: sluice\r\nconnection: close\r\n\r\n");
    let mut answer = String::new();
    asked.is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

/// The variables `wrap` points at sluice, one per provider whose agents read one (as
/// docs/guide.md gives them): Anthropic's, OpenAI's and gemini-cli's base URLs.
pub(super) fn base_urls(listen: std::net::SocketAddr) -> [(&'static str, String); 3] {
    [
        ("ANTHROPIC_BASE_URL", format!("http://{listen}/anthropic")),
        ("OPENAI_BASE_URL", format!("http://{listen}/openai/v1")),
        ("GOOGLE_GEMINI_BASE_URL", format!("http://{listen}/gemini")),
    ]
}

/// `sluice wrap`: see the subcommand's help. Exits with the command's own code.
pub(super) fn wrap(args: &WrapArgs) -> Result<(), Failure> {
    let started = if sluice_answers(args.listen.listen) {
        None
    } else {
        let exe = std::env::current_exe()
            .map_err(|e| Failure(format!("cannot find sluice's own executable: {e}")))?;
        let log = match &args.log {
            Some(path) => std::process::Stdio::from(
                std::fs::File::create(path)
                    .map_err(|e| Failure(format!("{}: {e}", path.display())))?,
            ),
            None => std::process::Stdio::null(),
        };
        let child = std::process::Command::new(exe)
            .args(["serve", "--listen", &args.listen.listen.to_string()])
            .args(&args.serve_args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| Failure(format!("cannot start sluice serve: {e}")))?;
        let mut child = StopOnDrop(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while !sluice_answers(args.listen.listen) {
            if let Ok(Some(status)) = child.0.try_wait() {
                return Err(Failure(format!("sluice serve exited at start ({status})")));
            }
            if std::time::Instant::now() > deadline {
                return Err(Failure(format!(
                    "sluice serve did not answer on {}",
                    args.listen.listen
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Some(child)
    };
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure("wrap needs a command after --".into()))?;
    let status = std::process::Command::new(program)
        .args(rest)
        .envs(base_urls(args.listen.listen))
        .status()
        .map_err(|e| Failure(format!("cannot run {program}: {e}")))?;
    drop(started);
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => std::process::exit(code),
        None => Err(Failure(format!("{program} ended by a signal ({status})"))),
    }
}

/// A `sluice serve` this process started: asked to stop (SIGTERM, so it drains) when dropped,
/// and waited for.
pub(super) struct StopOnDrop(pub(super) std::process::Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let asked = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .is_ok_and(|s| s.success());
        if !asked {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}
