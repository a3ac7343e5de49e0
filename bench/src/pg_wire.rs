//! A counting TCP proxy in front of PostgreSQL, on loopback: every byte is forwarded as it
//! arrives, and the server's side is read as protocol messages (a type byte and a big-endian
//! 32-bit length counting itself; PostgreSQL documentation, "Frontend/Backend Protocol",
//! "Message Formats") to count, per connection and in total:
//!
//! * round trips: `ReadyForQuery` (`Z`), which the server sends once per `Sync` of the extended
//!   query protocol or per simple `Query`, that is once per exchange the client waits for (and
//!   once at the end of the start-up);
//! * statements prepared: `ParseComplete` (`1`);
//! * statements executed: `CommandComplete` (`C`).
//!
//! Connect without TLS (`sslmode=disable`): the proxy does not read an `SSLRequest` answer.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy counted since it started (or since [`WireCounts::take`]).
#[derive(Debug, Default)]
pub struct WireCounts {
    round_trips: AtomicU64,
    prepared: AtomicU64,
    executed: AtomicU64,
    connections: AtomicU64,
}

/// A snapshot of [`WireCounts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wire {
    /// `ReadyForQuery` messages: exchanges the client waited for.
    pub round_trips: u64,
    /// `ParseComplete` messages: statements prepared.
    pub prepared: u64,
    /// `CommandComplete` messages: statements executed.
    pub executed: u64,
    /// Connections opened through the proxy.
    pub connections: u64,
}

impl WireCounts {
    /// The counts so far, reset to zero.
    pub fn take(&self) -> Wire {
        Wire {
            round_trips: self.round_trips.swap(0, Ordering::SeqCst),
            prepared: self.prepared.swap(0, Ordering::SeqCst),
            executed: self.executed.swap(0, Ordering::SeqCst),
            connections: self.connections.swap(0, Ordering::SeqCst),
        }
    }

    fn saw(&self, message_type: u8) {
        let counter = match message_type {
            b'Z' => &self.round_trips,
            b'1' => &self.prepared,
            b'C' => &self.executed,
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
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upward = async {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
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
            parser.feed(&buf[..n], |t| counts.saw(t));
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

/// Finds message boundaries in the server's byte stream without holding whole messages.
#[derive(Debug, Default)]
struct Framing {
    /// Header bytes of the current message read so far (type and length).
    header: Vec<u8>,
    /// Body bytes of the current message still to skip.
    skip: usize,
}

impl Framing {
    /// Feeds `bytes`; calls `seen` with the type of each message whose header completes.
    fn feed(&mut self, mut bytes: &[u8], mut seen: impl FnMut(u8)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (5 - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() == 5 {
                let h = &self.header;
                let len = u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize;
                seen(h[0]);
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
}
