//! Running the real Lambda binaries under `cargo lambda watch` and invoking them with
//! `cargo lambda invoke`: the pieces every runtime-path test shares. `cargo-lambda` must be on
//! PATH (`make test` installs it into `.venv`).

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The workspace root (where `cargo lambda` finds the function binaries and `events/`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A loopback port free at the time of the call.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `cargo lambda watch`, spawned in its own process group (`process_group(0)`), killed group and
/// all on drop, also when the test fails.
pub struct Watch(pub Child);

impl Drop for Watch {
    fn drop(&mut self) {
        let pgid = self.0.id();
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{pgid}")])
            .status();
        std::thread::sleep(Duration::from_millis(300));
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .status();
        let _ = self.0.wait();
    }
}

/// `cargo lambda invoke FUNCTION -A 127.0.0.1 -P PORT --data-file FILE` (relative to the
/// workspace root), the answer parsed as JSON. Retries every 2 s for up to 15 minutes while the
/// watcher is not listening yet or compiles the function on its first invocation.
///
/// # Panics
/// If the invocation keeps failing, or its answer is not JSON.
pub fn invoke(port: u16, function: &str, data_file: impl AsRef<OsStr>) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let out = Command::new("cargo")
            .current_dir(workspace_root())
            .args(["lambda", "invoke", function, "-A", "127.0.0.1", "-P"])
            .arg(port.to_string())
            .args(["--output-format", "json", "--data-file"])
            .arg(data_file.as_ref())
            .output()
            .expect("cargo lambda invoke runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            return serde_json::from_str(stdout.trim())
                .unwrap_or_else(|e| panic!("invoke answer is not JSON ({e}): {stdout}"));
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            Instant::now() < deadline,
            "cargo lambda invoke kept failing: {stderr}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}
