//! A PgBouncer started by a test in front of a given PostgreSQL server: Debian's
//! package (`/usr/sbin/pgbouncer`, `PGBOUNCER_BIN` overrides; `scripts/with-postgres.sh` installs
//! it with apt-get when missing), its own ini file in a temporary directory, a free loopback
//! port, `auth_type = trust` for the user `gate`, in transaction or session pooling, run in the
//! foreground as the unprivileged user when root (as the server is, `pg_cluster`), killed and its
//! directory removed on drop (also on panic). PgBouncer's defaults are kept otherwise
//! (`server_reset_query = DISCARD ALL`, used in session pooling only, as PgBouncer does).

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::lambda_watch::free_port;
use crate::pg_cluster::{as_server_user, server_dir, server_user, url_at};

/// How PgBouncer hands out server connections (`pool_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// A server connection per transaction (`pool_mode = transaction`).
    Transaction,
    /// A server connection per client session (`pool_mode = session`).
    Session,
}

impl PoolMode {
    fn as_str(self) -> &'static str {
        match self {
            Self::Transaction => "transaction",
            Self::Session => "session",
        }
    }
}

/// The PgBouncer binary: `PGBOUNCER_BIN`, else Debian's.
pub fn pgbouncer_bin() -> PathBuf {
    std::env::var_os("PGBOUNCER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/pgbouncer"))
}

/// A running PgBouncer.
pub struct PgBouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl PgBouncer {
    /// Starts PgBouncer in `mode` for the database `gate` of the server at `server` (user
    /// `gate`), with at most `server_connections` server connections for it
    /// (`default_pool_size`): fewer than the clients' makes them share. Returns once it accepts
    /// connections.
    ///
    /// # Panics
    /// When the binary is missing, cannot start, or does not listen within 30 s.
    pub fn start(server: SocketAddr, mode: PoolMode, server_connections: usize) -> Self {
        let bin = pgbouncer_bin();
        assert!(
            bin.exists(),
            "{} missing: install PgBouncer (Debian: apt-get install pgbouncer; \
             scripts/with-postgres.sh does) or set PGBOUNCER_BIN",
            bin.display()
        );
        let dir = server_dir("gate-pgbouncer");
        let port = free_port();
        let users = dir.join("users.txt");
        std::fs::write(&users, "\"gate\" \"\"\n").expect("auth file");
        let ini = dir.join("pgbouncer.ini");
        let text = format!(
            "[databases]\n\
             gate = host={host} port={server_port} dbname=gate user=gate\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             pool_mode = {mode}\n\
             default_pool_size = {server_connections}\n\
             max_client_conn = 200\n\
             logfile = {log}\n\
             admin_users = gate\n",
            host = server.ip(),
            server_port = server.port(),
            users = users.display(),
            mode = mode.as_str(),
            log = dir.join("pgbouncer.log").display(),
        );
        std::fs::write(&ini, text).expect("ini file");
        if let Some(user) = server_user() {
            let status = std::process::Command::new("chown")
                .args(["-R", &user])
                .arg(&dir)
                .status()
                .expect("chown runs");
            assert!(status.success(), "chown {}", dir.display());
        }
        let child = as_server_user(&bin)
            .arg(&ini)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", bin.display()));
        let bouncer = Self { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect_timeout(&bouncer.addr(), Duration::from_millis(200))
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "pgbouncer does not listen on {}: {}",
                bouncer.addr(),
                bouncer.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        bouncer
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The connection string of database `gate` through the pooler, without TLS.
    pub fn url(&self) -> String {
        url_at(self.addr())
    }

    /// PgBouncer's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // Its own process group (`runuser` and PgBouncer): SIGTERM to the group, then SIGKILL.
        let group = format!("-{}", self.child.id());
        let _ = std::process::Command::new("kill")
            .args(["-TERM", "--", &group])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &group])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
