//! A TCP fault proxy in front of PostgreSQL, on loopback: every byte is
//! forwarded as is in [`Mode::PassThrough`]; the other modes are the network's faults a client
//! of a failing database meets:
//!
//! * [`Mode::BlackHole`]: connections are accepted and kept open, nothing is forwarded in either
//!   direction and nothing is closed (packets dropped, sockets open); what was sent meanwhile is
//!   delivered when the mode ends, as TCP retransmits once a partition heals. A connection
//!   accepted during the black hole reaches its server only then.
//! * [`Mode::Reset`]: every open connection is reset (RST, `SO_LINGER` 0) when the mode starts,
//!   and every new one at once after it is accepted.
//! * [`Mode::Delay`]: every chunk waits that long before it is forwarded, each direction.
//!
//! [`FaultProxy::reset_all`] resets the open connections once; [`FaultProxy::switch_target`]
//! sends new connections to another server while the ones already open stay on the old one
//! (a failover that leaves the pooled connections on the demoted writer). Connect without TLS
//! (`sslmode=disable`): the proxy does not look at the bytes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with the traffic (the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every byte forwarded at once.
    PassThrough,
    /// Nothing forwarded, nothing closed.
    BlackHole,
    /// Every connection reset.
    Reset,
    /// Every chunk forwarded after this long.
    Delay(Duration),
}

/// The proxy: its listening address, mode, target and counts. Its tasks live on the runtime that
/// started it and end with it.
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: Mutex<SocketAddr>,
    mode: watch::Sender<Mode>,
    resets: watch::Sender<u64>,
    accepted: AtomicUsize,
    reset_count: AtomicUsize,
}

impl FaultProxy {
    /// Starts a pass-through proxy to `upstream` on a free loopback port.
    ///
    /// # Panics
    /// If the loopback port cannot be bound (test wiring).
    pub async fn start(upstream: SocketAddr) -> Arc<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let proxy = Arc::new(Self {
            addr: listener.local_addr().expect("local addr"),
            upstream: Mutex::new(upstream),
            mode: watch::channel(Mode::PassThrough).0,
            resets: watch::channel(0).0,
            accepted: AtomicUsize::new(0),
            reset_count: AtomicUsize::new(0),
        });
        let p = Arc::clone(&proxy);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                p.accepted.fetch_add(1, Ordering::SeqCst);
                let p = Arc::clone(&p);
                tokio::spawn(async move { p.serve(client).await });
            }
        });
        proxy
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server new connections go to.
    pub fn target(&self) -> SocketAddr {
        *self.upstream.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the mode; entering [`Mode::Reset`] resets every open connection.
    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
        if mode == Mode::Reset {
            self.reset_all();
        }
    }

    /// The mode now.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Resets every open connection once (RST to both sides).
    pub fn reset_all(&self) {
        self.resets.send_modify(|g| *g += 1);
    }

    /// New connections go to `upstream`; those already open stay where they are.
    pub fn switch_target(&self, upstream: SocketAddr) {
        *self.upstream.lock().unwrap_or_else(|p| p.into_inner()) = upstream;
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Connections reset so far (each counted once).
    pub fn resets(&self) -> usize {
        self.reset_count.load(Ordering::SeqCst)
    }

    /// Waits while the mode is [`Mode::BlackHole`]; `false` when the proxy is gone.
    async fn passable(&self, mode: &mut watch::Receiver<Mode>) -> bool {
        mode.wait_for(|m| *m != Mode::BlackHole).await.is_ok()
    }

    async fn serve(self: Arc<Self>, client: TcpStream) {
        let mut mode = self.mode.subscribe();
        let mut resets = self.resets.subscribe();
        resets.mark_unchanged();
        // A connection accepted in a black hole waits, unanswered, for the network to heal.
        let healed = tokio::select! {
            ok = self.passable(&mut mode) => ok,
            _ = resets.changed() => false,
        };
        if !healed || self.mode() == Mode::Reset {
            self.reset(&client, None);
            return;
        }
        let upstream = self.target();
        let Ok(server) = TcpStream::connect(upstream).await else {
            // The server is gone (killed): the client sees its connection reset.
            self.reset(&client, None);
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let reset = tokio::select! {
            reset = self.pump(&mut client_read, &mut server_write) => reset,
            reset = self.pump(&mut server_read, &mut client_write) => reset,
            _ = resets.changed() => true,
        };
        if reset {
            self.reset(client_read.as_ref(), Some(server_read.as_ref()));
        }
        // Dropping the halves closes both sockets (a reset's with RST).
    }

    /// Resets `client` (and `server`): `SO_LINGER` 0, then closed.
    fn reset(&self, client: &TcpStream, server: Option<&TcpStream>) {
        let _ = client.set_zero_linger();
        if let Some(server) = server {
            let _ = server.set_zero_linger();
        }
        self.reset_count.fetch_add(1, Ordering::SeqCst);
    }

    /// Forwards `from` to `to` under the mode until either side closes (`false`) or the mode
    /// becomes [`Mode::Reset`] (`true`).
    async fn pump(&self, from: &mut OwnedReadHalf, to: &mut OwnedWriteHalf) -> bool {
        let mut mode = self.mode.subscribe();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            if !self.passable(&mut mode).await {
                return false;
            }
            match self.mode() {
                Mode::Delay(d) => tokio::time::sleep(d).await,
                Mode::Reset => return true,
                Mode::PassThrough | Mode::BlackHole => {}
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return false;
            }
        }
    }
}
