//! Running a program in a child process, so nothing it does can take the host down.
//!
//! The host binary answers [`CHILD_ARG`] by calling [`child_main`]: it reads one request (the
//! program, the input and the limits, JSON) from stdin, runs it in-process under the limits and
//! writes the result to stdout. [`run_in_child`] spawns that, asks the kernel to pick the child
//! first when memory runs out (`oom_score_adj` 1000, best effort), and kills it if it outlives
//! its deadline by more than a grace period. A child that dies without an answer is
//! [`SandboxError::Crashed`].

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::program::{Limits, Program, SandboxError};

/// The argument the host binary dispatches to [`child_main`].
pub const CHILD_ARG: &str = "__sandbox-child";

/// Time the child gets beyond its deadline to start, compile and write its answer.
const GRACE: Duration = Duration::from_secs(2);

#[derive(serde::Serialize, serde::Deserialize)]
struct Request {
    program: String,
    input: String,
    limits: Limits,
}

/// Compiles and runs `program` over `input` in a child process: `command` with `args`, which
/// must end up in [`child_main`].
///
/// # Errors
/// The program's own [`SandboxError`], or [`SandboxError::Crashed`] when the child died,
/// outlived its deadline or could not start.
pub fn run_in_child(
    command: &Path,
    args: &[String],
    program: &str,
    input: &str,
    limits: &Limits,
) -> Result<String, SandboxError> {
    if input.len() > limits.max_input_bytes {
        return Err(SandboxError::InputTooLarge {
            size: input.len(),
            limit: limits.max_input_bytes,
        });
    }
    let crashed = |why: String| SandboxError::Crashed(why);
    let mut child = Command::new(command)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| crashed(format!("could not start: {e}")))?;
    // The kernel's first choice when memory runs out: this child, not the proxy.
    let _ = std::fs::write(format!("/proc/{}/oom_score_adj", child.id()), "1000");
    let request = serde_json::to_vec(&Request {
        program: program.to_owned(),
        input: input.to_owned(),
        limits: *limits,
    })
    .map_err(|e| crashed(e.to_string()))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| crashed("no stdin".into()))?;
    // Written on a thread: a child that stops reading must not block the host.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&request);
    });
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| crashed("no stdout".into()))?;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let until = Instant::now() + limits.deadline + GRACE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= until => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(crashed(e.to_string())),
        }
    };
    let _ = writer.join();
    let out = reader.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(SandboxError::Deadline(limits.deadline));
    };
    match serde_json::from_slice::<Result<String, SandboxError>>(&out) {
        Ok(result) => result,
        Err(_) => Err(crashed(format!("exited with {status} and no answer"))),
    }
}

/// The child side: one request from stdin, its result on stdout. Returns the exit code.
pub fn child_main() -> i32 {
    let mut raw = Vec::new();
    if std::io::stdin().read_to_end(&mut raw).is_err() {
        return 2;
    }
    let Ok(request) = serde_json::from_slice::<Request>(&raw) else {
        return 2;
    };
    drop(raw);
    let result = Program::compile(&request.program, &request.limits)
        .and_then(|program| program.run(&request.input, &request.limits));
    let Ok(answer) = serde_json::to_vec(&result) else {
        return 2;
    };
    match std::io::stdout().write_all(&answer) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}
