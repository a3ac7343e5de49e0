//! Throwaway PostgreSQL 15 servers started by a test itself: a primary
//! (`initdb`, `wal_level = replica`, trust authentication on loopback, a free loopback port) and a
//! streaming standby made from it with `pg_basebackup -R`, synchronous (`synchronous_standby_names
//! = '*'`: a commit the client saw acknowledged is on the standby, so a promotion loses none), and
//! the faults a failover brings: the standby promoted (`pg_ctl promote`), the primary's postmaster
//! killed (`kill -9`), the old primary made read-only for the sessions still connected to it
//! (`ALTER SYSTEM SET default_transaction_read_only = on` and `pg_reload_conf()`: their writes then
//! fail with SQLSTATE 25006, as a demoted Aurora or Multi-AZ writer's do).
//!
//! Binaries from `PG_BIN` (default `/usr/lib/postgresql/15/bin`, Debian's `postgresql` package;
//! `scripts/with-postgres.sh` installs it). The server refuses to run as root: as root every
//! server command runs as an unprivileged user (`PG_USER`, default `nobody`) through `runuser`,
//! as `scripts/with-postgres.sh` does. `fsync` is off (the data is thrown away). Each server
//! lives in its own temporary directory, removed with the server on drop (also on panic).
//! `track_commit_timestamp` is on: a test reads when a row's transaction committed
//! (`pg_xact_commit_timestamp(xmin)`), on the standby too once promoted.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::lambda_watch::free_port;
use crate::unique;

/// The directory of the PostgreSQL binaries: `PG_BIN`, else Debian's PostgreSQL 15.
pub fn pg_bin() -> PathBuf {
    std::env::var_os("PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"))
}

/// The unprivileged user server commands run as when this process is root (`PG_USER`, default
/// `nobody`); `None` when not root.
pub fn server_user() -> Option<String> {
    static USER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    USER.get_or_init(|| {
        // `id -u`: no libc call for the effective user id.
        let uid = Command::new("id").arg("-u").output().ok()?;
        (String::from_utf8_lossy(&uid.stdout).trim() == "0")
            .then(|| std::env::var("PG_USER").unwrap_or_else(|_| "nobody".to_string()))
    })
    .clone()
}

/// `program` with `args`, run as [`server_user`] when root (`runuser -u USER --`).
pub fn as_server_user(program: &Path) -> Command {
    match server_user() {
        Some(user) => {
            let mut command = Command::new("runuser");
            command.args(["-u", &user, "--"]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// A fresh directory under the system's temporary one, owned by [`server_user`] (mode 0700 is
/// set by the server itself on its data directory).
pub fn server_dir(base: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(base));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    if let Some(user) = server_user() {
        run(Command::new("chown").arg(&user).arg(&dir), "chown");
    }
    dir
}

/// Runs `command`, panicking with its output when it fails (`what` names it).
fn run(command: &mut Command, what: &str) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One PostgreSQL server of its own directory on `127.0.0.1:port`; stopped (`pg_ctl stop -m
/// immediate`) and its directory removed on drop.
pub struct PgServer {
    dir: PathBuf,
    data: PathBuf,
    port: u16,
}

impl PgServer {
    /// A new primary: `initdb` (superuser `gate`, trust authentication, which admits replication
    /// from loopback too), started on a free loopback port with `wal_level = replica`, and a
    /// database `gate`.
    ///
    /// # Panics
    /// When a command fails (its output in the message).
    pub fn primary() -> Self {
        let dir = server_dir("gate-pgc");
        let data = dir.join("data");
        run(
            as_server_user(&pg_bin().join("initdb"))
                .arg("-D")
                .arg(&data)
                .args(["-U", "gate", "--auth=trust", "--encoding=UTF8"])
                .args(["--locale=C", "--no-sync"]),
            "initdb",
        );
        let server = Self {
            dir,
            data,
            port: free_port(),
        };
        server.start();
        run(
            Command::new(pg_bin().join("createdb"))
                .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
                .args(["-U", "gate", "gate"]),
            "createdb",
        );
        server
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`: `standby.signal` and the
    /// `primary_conninfo`), started on a free loopback port; returns once `primary` reports it
    /// streaming.
    ///
    /// # Panics
    /// When a command fails or the standby does not stream within 60 s.
    pub fn standby_of(primary: &PgServer) -> Self {
        let dir = server_dir("gate-pgc-standby");
        let data = dir.join("data");
        run(
            as_server_user(&pg_bin().join("pg_basebackup"))
                .arg("-D")
                .arg(&data)
                .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
                // A fast checkpoint: the default spread one took 90 s on an idle server.
                .args([
                    "-U",
                    "gate",
                    "-R",
                    "-X",
                    "stream",
                    "--no-sync",
                    "-c",
                    "fast",
                ]),
            "pg_basebackup",
        );
        let standby = Self {
            dir,
            data,
            port: free_port(),
        };
        standby.start();
        primary.wait_for(
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
            "1",
        );
        standby
    }

    fn start(&self) {
        let log = self.dir.join("server.log");
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c full_page_writes=off \
             -c wal_level=replica -c max_wal_senders=5 -c hot_standby=on -c max_connections=200 \
             -c track_commit_timestamp=on",
            self.port,
            self.dir.display()
        );
        let out = as_server_user(&pg_bin().join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "start", "-o", &options])
            .output()
            .expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "the server did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Its loopback address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The connection string of database `gate` as `gate`, without TLS.
    pub fn url(&self) -> String {
        url_at(self.addr())
    }

    /// Runs `sql` in a new `psql` session (`-At`: bare values, one row a line); its output.
    ///
    /// # Panics
    /// When `psql` fails.
    pub fn psql(&self, sql: &str) -> String {
        let out = run(
            Command::new(pg_bin().join("psql"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args([
                    "-U",
                    "gate",
                    "-d",
                    "gate",
                    "-At",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-c",
                ])
                .arg(sql),
            "psql",
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until `sql` answers `expected` (checked every 100 ms, for up to 60 s).
    ///
    /// # Panics
    /// When it does not within 60 s.
    pub fn wait_for(&self, sql: &str, expected: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.psql(sql) == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{sql} did not answer {expected} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Makes commits wait for the standby (`synchronous_standby_names = '*'`, reloaded) and
    /// waits until the standby is reported synchronous.
    pub fn replicate_synchronously(&self) {
        self.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
        self.psql("SELECT pg_reload_conf()");
        self.wait_for(
            "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
            "1",
        );
    }

    /// Restarts the server (`pg_ctl restart -m fast -w`, its options kept): every backend is
    /// terminated (SQLSTATE 57P01 to a session in a statement), then the server accepts
    /// connections again on the same port, as after a reboot or a minor-version upgrade.
    ///
    /// # Panics
    /// When the restart fails.
    pub fn restart(&self) {
        run(
            as_server_user(&pg_bin().join("pg_ctl"))
                .arg("-D")
                .arg(&self.data)
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-m", "fast", "-w", "-t", "60", "restart"]),
            "pg_ctl restart",
        );
    }

    /// Promotes this standby (`pg_ctl promote -w`) and waits until it accepts writes.
    ///
    /// # Panics
    /// When the promotion fails or is not seen within 60 s.
    pub fn promote(&self) {
        run(
            as_server_user(&pg_bin().join("pg_ctl"))
                .arg("-D")
                .arg(&self.data)
                .args(["-w", "-t", "60", "promote"]),
            "pg_ctl promote",
        );
        self.wait_for("SELECT pg_is_in_recovery()", "f");
    }

    /// Makes this server refuse writes in the sessions still connected to it, as a demoted
    /// writer does: `ALTER SYSTEM SET default_transaction_read_only = on` and
    /// `pg_reload_conf()`; every session (old and new) then starts its transactions read-only
    /// and a write fails with SQLSTATE 25006. Returns once a new session sees it.
    pub fn demote_for_sessions(&self) {
        self.psql("ALTER SYSTEM SET default_transaction_read_only = on");
        self.psql("SELECT pg_reload_conf()");
        self.wait_for("SHOW default_transaction_read_only", "on");
    }

    /// The write-ahead log position written here (`pg_current_wal_lsn()` on a primary,
    /// `pg_last_wal_replay_lsn()` on a standby), as text.
    pub fn wal_position(&self) -> String {
        self.psql(
            "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
             ELSE pg_current_wal_lsn() END",
        )
    }

    /// Kills the postmaster with SIGKILL (its pid from `postmaster.pid`); its backends end as
    /// they notice. The server's own crash, not a shutdown.
    ///
    /// # Panics
    /// When the pid cannot be read or `kill` fails.
    pub fn kill_postmaster(&self) {
        let pid_file = self.data.join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
        let pid = text.lines().next().unwrap_or_default().trim().to_string();
        assert!(
            !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()),
            "postmaster.pid: no pid"
        );
        run(Command::new("kill").args(["-KILL", &pid]), "kill -9");
        // The pid file stays behind a killed postmaster; wait until the port is closed.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok()
        {
            assert!(Instant::now() < deadline, "the killed server still listens");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = as_server_user(&pg_bin().join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "-t", "30", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The connection string of database `gate` as `gate` at `addr`, without TLS.
pub fn url_at(addr: SocketAddr) -> String {
    format!("postgresql://gate@{addr}/gate?sslmode=disable")
}

/// A primary and its synchronous streaming standby.
pub struct PgCluster {
    /// The primary (the writer until a failover).
    pub primary: PgServer,
    /// The standby (`pg_basebackup -R`), synchronous.
    pub standby: PgServer,
}

impl PgCluster {
    /// Starts both ([`PgServer::primary`], [`PgServer::standby_of`]) and makes the replication
    /// synchronous ([`PgServer::replicate_synchronously`]).
    pub fn start() -> Self {
        let primary = PgServer::primary();
        let standby = PgServer::standby_of(&primary);
        primary.replicate_synchronously();
        Self { primary, standby }
    }

    /// Waits until the standby has replayed everything the primary wrote (the primary must no
    /// longer accept writes: read-only for its sessions, [`PgServer::demote_for_sessions`]).
    pub fn wait_caught_up(&self) {
        let target = self.primary.wal_position();
        self.standby.wait_for(
            &format!("SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"),
            "t",
        );
    }
}
