//! A real `redis-server` (Debian's package) for the tests that need one, started on a free
//! loopback port with nothing saved to disk, and stopped when dropped.
//!
//! Without the binary the tests that need it skip with a line on stderr, unless
//! `SLUICE_REQUIRE_REDIS=1` (set by `.ci/run`, which installs it), where its absence fails them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    /// Starts one, or `None` when `redis-server` is not installed and not required.
    ///
    /// # Panics
    /// When it is required and missing, or does not answer within five seconds.
    pub fn start() -> Option<RedisServer> {
        let required = std::env::var_os("SLUICE_REQUIRE_REDIS").is_some_and(|v| v == "1");
        let port = free_port();
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) if !required => {
                eprintln!("skipped: redis-server is not installed ({e}); .ci/run installs it");
                return None;
            }
            Err(e) => panic!("SLUICE_REQUIRE_REDIS=1 but redis-server cannot start: {e}"),
        };
        let server = RedisServer {
            child: Some(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !server.answers() {
            assert!(Instant::now() < deadline, "redis-server did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
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

    /// Stops it now (the failure tests stop it mid-session).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
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
