//! A counting TCP proxy in front of PostgreSQL, on loopback: every byte is forwarded as it
//! arrives, and both directions are read as protocol messages (a type byte and a big-endian
//! 32-bit length counting itself, after the client's untyped start-up message; PostgreSQL
//! documentation, "Frontend/Backend Protocol", "Message Formats") to count, per connection and
//! in total:
//!
//! * round trips: exchanges of the extended query protocol, that is the client's `Sync`s answered
//!   by `ReadyForQuery` (`Z`): the statements the client waits for;
//! * simple exchanges: simple `Query` messages answered by `ReadyForQuery`. The store sends its
//!   per-transaction `BEGIN; SET LOCAL ...` and `COMMIT` this way, in the same write as the
//!   statement they wrap (pipelined, one wait for the three), so they are counted apart;
//! * statements prepared: `ParseComplete` (`1`);
//! * statements executed: `CommandComplete` (`C`) answering an extended exchange.
//!
//! `ReadyForQuery` answers the client's exchanges in the order it sent them, so each is matched
//! to the exchange it ends: the client's bytes are read before they are forwarded, hence before
//! the server can answer them. The start-up's own `ReadyForQuery` matches no exchange.
//!
//! Connect without TLS (`sslmode=disable`): the proxy does not read an `SSLRequest` answer.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy counted since it started (or since [`WireCounts::take`]).
#[derive(Debug, Default)]
pub struct WireCounts {
    round_trips: AtomicU64,
    simple: AtomicU64,
    prepared: AtomicU64,
    executed: AtomicU64,
    connections: AtomicU64,
}

/// A snapshot of [`WireCounts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wire {
    /// Extended-protocol exchanges (`Sync` .. `ReadyForQuery`): statements waited for.
    pub round_trips: u64,
    /// Simple-protocol exchanges (`Query` .. `ReadyForQuery`), pipelined with a statement.
    pub simple: u64,
    /// `ParseComplete` messages: statements prepared.
    pub prepared: u64,
    /// `CommandComplete` messages of extended exchanges: statements executed.
    pub executed: u64,
    /// Connections opened through the proxy.
    pub connections: u64,
}

impl WireCounts {
    /// The counts so far, reset to zero.
    pub fn take(&self) -> Wire {
        Wire {
            round_trips: self.round_trips.swap(0, Ordering::SeqCst),
            simple: self.simple.swap(0, Ordering::SeqCst),
            prepared: self.prepared.swap(0, Ordering::SeqCst),
            executed: self.executed.swap(0, Ordering::SeqCst),
            connections: self.connections.swap(0, Ordering::SeqCst),
        }
    }
}

/// A client exchange awaiting its `ReadyForQuery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exchange {
    /// A `Sync` of the extended query protocol.
    Extended,
    /// A simple `Query`.
    Simple,
}

/// One connection's exchanges in the order the client sent them.
#[derive(Debug, Default)]
struct Exchanges(Mutex<VecDeque<Exchange>>);

impl Exchanges {
    fn sent(&self, message_type: u8) {
        let exchange = match message_type {
            b'S' => Exchange::Extended,
            b'Q' => Exchange::Simple,
            _ => return,
        };
        if let Ok(mut q) = self.0.lock() {
            q.push_back(exchange);
        }
    }

    /// The exchange the server is answering now (`None` during the start-up).
    fn current(&self) -> Option<Exchange> {
        self.0.lock().ok().and_then(|q| q.front().copied())
    }

    fn answered(&self) -> Option<Exchange> {
        self.0.lock().ok().and_then(|mut q| q.pop_front())
    }
}

impl WireCounts {
    fn saw(&self, message_type: u8, exchanges: &Exchanges) {
        let counter = match (message_type, exchanges.current()) {
            (b'Z', _) => match exchanges.answered() {
                Some(Exchange::Extended) => &self.round_trips,
                Some(Exchange::Simple) => &self.simple,
                None => return,
            },
            (b'1', _) => &self.prepared,
            (b'C', Some(Exchange::Extended)) => &self.executed,
            _ => return,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// Starts the proxy to `upstream` on a free loopback port; returns its counts and address.
///
/// # Errors
/// When no loopback port can be bound.
pub async fn start(upstream: SocketAddr) -> Result<(Arc<WireCounts>, SocketAddr), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("pg proxy: bind: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("pg proxy: {e}"))?;
    let counts = Arc::new(WireCounts::default());
    let c = Arc::clone(&counts);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let c = Arc::clone(&c);
            tokio::spawn(async move { serve(client, upstream, c).await });
        }
    });
    Ok((counts, addr))
}

async fn serve(client: TcpStream, upstream: SocketAddr, counts: Arc<WireCounts>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    counts.connections.fetch_add(1, Ordering::SeqCst);
    let exchanges = Exchanges::default();
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upward = async {
        let mut parser = Framing::after_startup_message();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // Recorded before the server can answer them.
            parser.feed(&buf[..n], |t| exchanges.sent(t));
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let downward = async {
        let mut parser = Framing::default();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // Counted before the client can see them: a delivery's round trips are all counted
            // when its answer arrives.
            parser.feed(&buf[..n], |t| counts.saw(t, &exchanges));
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = upward => {}
        () = downward => {}
    }
}

/// Finds message boundaries in a byte stream of the protocol without holding whole messages.
#[derive(Debug, Default)]
struct Framing {
    /// The next message is the client's start-up message: a length and no type byte.
    untyped_next: bool,
    /// Header bytes of the current message read so far (type and length).
    header: Vec<u8>,
    /// Body bytes of the current message still to skip.
    skip: usize,
}

impl Framing {
    /// The client's side: its first message (`StartupMessage`) has no type byte.
    fn after_startup_message() -> Self {
        Self {
            untyped_next: true,
            ..Self::default()
        }
    }

    /// Feeds `bytes`; calls `seen` with the type of each typed message whose header completes.
    fn feed(&mut self, mut bytes: &[u8], mut seen: impl FnMut(u8)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let header_len = if self.untyped_next { 4 } else { 5 };
            let n = (header_len - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() == header_len {
                let h = &self.header[header_len - 4..];
                let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
                if !self.untyped_next {
                    seen(self.header[0]);
                }
                self.untyped_next = false;
                self.skip = len.saturating_sub(4);
                self.header.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_counts_messages_across_chunk_boundaries() {
        // ParseComplete, BindComplete, DataRow (3 body bytes), CommandComplete ("X\0"),
        // ReadyForQuery ('I').
        let mut stream = Vec::new();
        stream.extend_from_slice(&[b'1', 0, 0, 0, 4]);
        stream.extend_from_slice(&[b'2', 0, 0, 0, 4]);
        stream.extend_from_slice(&[b'D', 0, 0, 0, 7, 1, 2, 3]);
        stream.extend_from_slice(&[b'C', 0, 0, 0, 6, b'X', 0]);
        stream.extend_from_slice(&[b'Z', 0, 0, 0, 5, b'I']);
        for split in 1..stream.len() {
            let mut f = Framing::default();
            let mut types = Vec::new();
            for chunk in stream.chunks(split) {
                f.feed(chunk, |t| types.push(t));
            }
            assert_eq!(
                types,
                vec![b'1', b'2', b'D', b'C', b'Z'],
                "chunks of {split}"
            );
        }
    }

    #[test]
    fn the_start_up_message_has_no_type_and_exchanges_match_in_order() {
        // StartupMessage (8 bytes, untyped), then Query "B\0", Parse (2 body bytes), Sync.
        let mut client = vec![0, 0, 0, 8, 0, 3, 0, 0];
        client.extend_from_slice(&[b'Q', 0, 0, 0, 6, b'B', 0]);
        client.extend_from_slice(&[b'P', 0, 0, 0, 6, 0, 0]);
        client.extend_from_slice(&[b'S', 0, 0, 0, 4]);
        client.extend_from_slice(&[b'Q', 0, 0, 0, 6, b'C', 0]);
        for split in 1..client.len() {
            let mut f = Framing::after_startup_message();
            let mut types = Vec::new();
            for chunk in client.chunks(split) {
                f.feed(chunk, |t| types.push(t));
            }
            assert_eq!(types, vec![b'Q', b'P', b'S', b'Q'], "chunks of {split}");
        }
        let counts = WireCounts::default();
        let exchanges = Exchanges::default();
        // The start-up's ReadyForQuery, before the client sent any exchange.
        counts.saw(b'Z', &exchanges);
        for t in [b'Q', b'S', b'Q'] {
            exchanges.sent(t);
        }
        // BEGIN's CommandComplete and ReadyForQuery, the statement's, COMMIT's.
        for t in [b'C', b'Z', b'1', b'C', b'Z', b'C', b'Z'] {
            counts.saw(t, &exchanges);
        }
        let wire = counts.take();
        assert_eq!(
            (wire.round_trips, wire.simple, wire.prepared, wire.executed),
            (1, 2, 1, 1)
        );
    }
}
