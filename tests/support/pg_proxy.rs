//! A TCP proxy in front of PostgreSQL, on loopback, for the faults a PostgreSQL user meets: every
//! byte is forwarded as is, except that
//!
//! * once armed with a marker ([`PgProxy::cut_after_answer_to`]), the connection whose client
//!   sends the marker (a parameter value: it travels in the `Bind` message) has the server's
//!   answer swallowed up to and including `ReadyForQuery`, that is until the server has
//!   committed, and is then closed: the write landed, its answer is lost;
//! * [`PgProxy::reset_all`] closes every open connection at once (a failover).
//!
//! The server's side is read as protocol messages (a type byte and a 32-bit length), so the
//! proxy knows where `ReadyForQuery` (`Z`) ends. Connect without TLS (`sslmode=disable`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The proxy's rule and what it did.
pub struct PgProxy {
    upstream: SocketAddr,
    marker: Mutex<Option<Vec<u8>>>,
    cuts: AtomicUsize,
    connections: AtomicUsize,
    reset: watch::Sender<u64>,
}

impl PgProxy {
    /// Starts a proxy to `upstream` on a free loopback port; returns it and its address.
    ///
    /// # Panics
    /// If the loopback port cannot be bound (test wiring).
    pub async fn start(upstream: SocketAddr) -> (Arc<Self>, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (reset, _) = watch::channel(0);
        let proxy = Arc::new(Self {
            upstream,
            marker: Mutex::new(None),
            cuts: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            reset,
        });
        let p = Arc::clone(&proxy);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let p = Arc::clone(&p);
                tokio::spawn(async move { p.serve(client).await });
            }
        });
        (proxy, addr)
    }

    /// The next connection whose client sends `marker` loses the server's answer to it (after
    /// the server committed) and is closed. One-shot.
    pub fn cut_after_answer_to(&self, marker: &str) {
        *self.marker.lock().expect("lock") = Some(marker.as_bytes().to_vec());
    }

    /// How many answers were swallowed.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }

    /// How many connections were opened through the proxy.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Closes every open connection (a failover: the clients see their connections reset).
    pub fn reset_all(&self) {
        self.reset.send_modify(|g| *g += 1);
    }

    async fn serve(self: Arc<Self>, client: TcpStream) {
        let Ok(server) = TcpStream::connect(self.upstream).await else {
            return;
        };
        self.connections.fetch_add(1, Ordering::SeqCst);
        let mut reset = self.reset.subscribe();
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let doomed = AtomicBool::new(false);
        let upward = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match client_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                {
                    let mut marker = self.marker.lock().expect("lock");
                    if marker
                        .as_ref()
                        .is_some_and(|m| chunk.windows(m.len()).any(|w| w == m.as_slice()))
                    {
                        *marker = None;
                        doomed.store(true, Ordering::SeqCst);
                    }
                }
                if server_write.write_all(chunk).await.is_err() {
                    return;
                }
            }
        };
        let downward = async {
            let mut pending: Vec<u8> = Vec::new();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match server_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                pending.extend_from_slice(&buf[..n]);
                // Whole messages: a type byte, then a big-endian length counting itself.
                while pending.len() >= 5 {
                    let len = u32::from_be_bytes([pending[1], pending[2], pending[3], pending[4]]);
                    let end = 1 + len as usize;
                    if pending.len() < end {
                        break;
                    }
                    let message: Vec<u8> = pending.drain(..end).collect();
                    if doomed.load(Ordering::SeqCst) {
                        if message[0] == b'Z' {
                            // The server is ready again: the statement's transaction ended.
                            self.cuts.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        continue;
                    }
                    if client_write.write_all(&message).await.is_err() {
                        return;
                    }
                }
            }
        };
        tokio::select! {
            () = upward => {}
            () = downward => {}
            _ = reset.changed() => {}
        }
        // Dropping both halves of both sockets closes the connections.
    }
}
