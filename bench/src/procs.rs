//! The outside world the harness starts and stops itself: one moto server and the terminal
//! simulator, each a separate process so that their CPU time is never counted as the client's.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (and reaped) when dropped.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    what: &'static str,
}

impl ChildGuard {
    /// Guards `child`; `what` names it in messages.
    pub fn new(child: Child, what: &'static str) -> Self {
        Self { child, what }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the child is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Err(e) = self.child.kill() {
            eprintln!("bench: stopping {}: {e}", self.what);
        }
        let _ = self.child.wait();
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; good enough for a child to bind next).
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A moto server on a free loopback port.
#[derive(Debug)]
pub struct Moto {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The process.
    pub child: ChildGuard,
}

/// Starts `COMMAND... -H 127.0.0.1 -p PORT` (`moto_server`, or Python and
/// `bench/moto_server.py`) and waits (up to 30 s) until it answers HTTP.
///
/// # Errors
/// When it cannot be started or does not answer.
pub async fn start_moto(command: &[PathBuf]) -> Result<Moto, String> {
    let (program, args) = command.split_first().ok_or("no moto command")?;
    let port = free_port().map_err(|e| e.to_string())?;
    let child = Command::new(program)
        .args(args)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let mut child = ChildGuard {
        child,
        what: "moto_server",
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if !child.running() {
            return Err("moto_server exited during start-up".into());
        }
        if http
            .get(format!("{endpoint}/moto-api/"))
            .send()
            .await
            .is_ok()
        {
            return Ok(Moto { endpoint, child });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "moto_server did not answer on {endpoint} within 30 s"
    ))
}

/// The terminal simulator (`terminal-sim`) as a child process.
#[derive(Debug)]
pub struct TerminalSim {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// The process.
    pub child: ChildGuard,
}

/// Starts `terminal-sim --port 0 --latency-ms L` and reads the address it prints.
///
/// # Errors
/// When it cannot be started or prints no address.
pub fn start_terminal(binary: &Path, latency_ms: u64) -> Result<TerminalSim, String> {
    let mut child = Command::new(binary)
        .args(["--port", "0", "--latency-ms", &latency_ms.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let stdout = child.stdout.take();
    let guard = ChildGuard {
        child,
        what: "terminal-sim",
    };
    let mut line = String::new();
    if let Some(out) = stdout {
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
    }
    let base_url = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("terminal-sim printed {line:?}"))?
        .to_string();
    Ok(TerminalSim {
        base_url,
        child: guard,
    })
}

/// `name` next to the running executable (e.g. `target/release/terminal-sim`), if it exists.
pub fn sibling(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.join(name);
    path.exists().then_some(path)
}
