//! A real `redis-server` (Debian's package) for the tests that need one, started on a free
//! loopback port (with nothing saved to disk unless a test asks for its append-only file), and
//! stopped when dropped; Sentinels from the same binary (`--sentinel`).
//!
//! Without the binary the tests that need it skip with a line on stderr, unless
//! `SLUICE_REQUIRE_REDIS=1` (set by `.ci/run`, which installs it), where its absence fails them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server (or Sentinel); killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    /// What it was started with after `--port`: a restart starts it the same way.
    args: Vec<String>,
    /// Its working directory (its append-only file, a Sentinel's config), removed on drop.
    dir: PathBuf,
}

fn required() -> bool {
    std::env::var_os("SLUICE_REQUIRE_REDIS").is_some_and(|v| v == "1")
}

impl RedisServer {
    /// Starts one with nothing saved to disk, or `None` when `redis-server` is not installed
    /// and not required.
    ///
    /// # Panics
    /// When it is required and missing, or does not answer within five seconds.
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// Starts one with these arguments (`--appendonly yes`, `--replicaof 127.0.0.1 PORT`), in
    /// a working directory of its own.
    pub fn start_with(args: &[&str]) -> Option<RedisServer> {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("sluice-redis-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a working directory");
        let server = RedisServer {
            child: None,
            port,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            dir,
        };
        server.started()
    }

    /// A Sentinel on a free port watching the primary at `primary` under `name`, quick to
    /// decide (down after one second), as a test needs and an operator would tune lower too.
    pub fn sentinel(name: &str, primary: u16) -> Option<RedisServer> {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("sluice-sentinel-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a working directory");
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "bind 127.0.0.1\ndir {}\nsentinel monitor {name} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 5000\n\
                 sentinel parallel-syncs {name} 1\n",
                dir.display()
            ),
        )
        .expect("the Sentinel's config");
        let server = RedisServer {
            child: None,
            port,
            args: vec![config.display().to_string(), "--sentinel".into()],
            dir,
        };
        server.started()
    }

    /// Spawned, or `None` (said on stderr) when `redis-server` is missing and not required.
    fn started(mut self) -> Option<RedisServer> {
        match self.spawn() {
            Ok(()) => Some(self),
            Err(e) if !required() => {
                eprintln!("skipped: redis-server is not installed ({e}); .ci/run installs it");
                None
            }
            Err(e) => panic!("SLUICE_REQUIRE_REDIS=1 but redis-server cannot start: {e}"),
        }
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        // A config file (a Sentinel's) comes first; the port after it wins over the file's.
        let (config, args): (Vec<&String>, Vec<&String>) =
            self.args.iter().partition(|a| a.ends_with(".conf"));
        let child = Command::new("redis-server")
            .args(config)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.answers() {
            assert!(Instant::now() < deadline, "redis-server did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Whether it answers `PING`.
    pub fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    /// One command through `redis-cli` (installed with `redis-server`), its reply as text.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stops it now, SIGKILL (the failure tests stop it mid-session).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Shuts it down as an operator or a supervisor does (SIGTERM: an append-only file is
    /// flushed, nothing else is saved).
    pub fn shut_down(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, with the same arguments and files.
    pub fn restart(&mut self) {
        self.shut_down();
        self.spawn().expect("redis-server starts again");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port nobody listens on right now.
///
/// # Panics
/// When no port can be bound.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
