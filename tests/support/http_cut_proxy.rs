//! A TCP proxy for HTTP/1.1 on loopback that fails connections the way the AWS SDK and reqwest
//! hand over unretried (awslabs/aws-sdk-rust #440 `IncompleteMessage`, #1402; aws/aws-lambda-web-adapter
//! #830 a keep-alive connection dead after a freeze). Every request is forwarded as it came and its
//! answer returned, except:
//!
//! * [`HttpCutProxy::cut_after_forward`]: the next `n` requests a [`Match`] names are forwarded,
//!   their whole answer is read from upstream (the write landed) and thrown away, and the client's
//!   connection is closed ([`Cut::Close`]: a FIN, hyper's "connection closed before message
//!   completed") or reset ([`Cut::Reset`]: an RST, "connection reset by peer"): the answer lost;
//! * [`HttpCutProxy::kill_idle`]: every connection open now is dead: its next request is never
//!   forwarded and the connection is reset, as a keep-alive socket whose server closed it while
//!   the client was frozen answers the next write. Connections opened later work.
//!
//! Requests and answers are framed by `Content-Length` (or `Transfer-Encoding: chunked` for an
//! answer, or an answer read to the end of the connection); one request at a time per connection,
//! as hyper sends them. Each request goes upstream on a connection of its own, and a
//! `Connection: close` the upstream answers with (moto's server closes after every answer) is
//! left out: the client keeps its connection alive, as it does with DynamoDB.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a connection is failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Closed (FIN) without an answer.
    Close,
    /// Reset (RST: `SO_LINGER` 0) without an answer.
    Reset,
}

/// Which requests a rule takes.
#[derive(Debug, Clone)]
pub enum Match {
    /// DynamoDB's: the `X-Amz-Target` header ends in `.{operation}` (e.g. `PutItem`).
    AmzTarget(&'static str),
    /// A method and a path (e.g. `POST`, `/slots`).
    Route(&'static str, &'static str),
}

impl Match {
    fn takes(&self, head: &Head) -> bool {
        match self {
            Self::AmzTarget(op) => head
                .header("x-amz-target")
                .is_some_and(|t| t.rsplit('.').next() == Some(op)),
            Self::Route(method, path) => {
                head.method == *method && head.path.split('?').next() == Some(path)
            }
        }
    }
}

struct Rule {
    matches: Match,
    /// Requests it lets through before it cuts.
    skip: usize,
    left: usize,
    cut: Cut,
}

/// The proxy's rules and what it did.
pub struct HttpCutProxy {
    upstream: String,
    rules: Mutex<Vec<Rule>>,
    /// Connections numbered below this are dead ([`HttpCutProxy::kill_idle`]).
    dead_below: AtomicU64,
    next_connection: AtomicU64,
    forwarded: Mutex<Vec<String>>,
    cuts: AtomicUsize,
    killed: AtomicUsize,
}

impl HttpCutProxy {
    /// Starts a proxy to `upstream` (`host:port`, or an `http://host:port` URL) on a free
    /// loopback port; returns it and its `http://` URL.
    ///
    /// # Panics
    /// If the loopback port cannot be bound (test wiring).
    pub async fn start(upstream: &str) -> (Arc<Self>, String) {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let proxy = Arc::new(Self {
            upstream,
            rules: Mutex::new(Vec::new()),
            dead_below: AtomicU64::new(0),
            next_connection: AtomicU64::new(0),
            forwarded: Mutex::new(Vec::new()),
            cuts: AtomicUsize::new(0),
            killed: AtomicUsize::new(0),
        });
        let p = Arc::clone(&proxy);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let p = Arc::clone(&p);
                let n = p.next_connection.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move { p.serve(client, n).await });
            }
        });
        (proxy, format!("http://{addr}"))
    }

    /// The next `n` requests `matches` takes are forwarded, answered upstream, and their
    /// connection failed by `cut` instead of the answer.
    pub fn cut_after_forward(&self, matches: Match, n: usize, cut: Cut) {
        self.cut_after_forward_skipping(matches, 0, n, cut);
    }

    /// As [`HttpCutProxy::cut_after_forward`], after letting `skip` requests it takes through
    /// (rules are tried in the order they were added; the first with requests left takes the
    /// request).
    pub fn cut_after_forward_skipping(&self, matches: Match, skip: usize, n: usize, cut: Cut) {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Rule {
                matches,
                skip,
                left: n,
                cut,
            });
    }

    /// Every connection open now is dead (see the module docs).
    pub fn kill_idle(&self) {
        let next = self.next_connection.load(Ordering::SeqCst);
        self.dead_below.store(next, Ordering::SeqCst);
    }

    /// The requests forwarded upstream, in order, each as `METHOD path` and its `X-Amz-Target`
    /// operation if any (e.g. `POST / PutItem`).
    pub fn forwarded(&self) -> Vec<String> {
        self.forwarded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many forwarded requests end in `suffix` (e.g. `PutItem`, `POST /slots`).
    pub fn forwarded_count(&self, suffix: &str) -> usize {
        self.forwarded()
            .iter()
            .filter(|r| r.ends_with(suffix))
            .count()
    }

    /// How many answers were cut after their request was forwarded.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }

    /// How many requests met a dead connection (never forwarded).
    pub fn killed(&self) -> usize {
        self.killed.load(Ordering::SeqCst)
    }

    fn take_cut(&self, head: &Head) -> Option<Cut> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let rule = rules
            .iter_mut()
            .find(|r| r.left > 0 && r.matches.takes(head))?;
        if rule.skip > 0 {
            rule.skip -= 1;
            return None;
        }
        rule.left -= 1;
        Some(rule.cut)
    }

    async fn serve(self: Arc<Self>, mut client: TcpStream, number: u64) {
        let mut from_client = Vec::new();
        loop {
            let Some((head, request)) = read_message(&mut client, &mut from_client, false).await
            else {
                return;
            };
            if number < self.dead_below.load(Ordering::SeqCst) {
                self.killed.fetch_add(1, Ordering::SeqCst);
                fail(client, Cut::Reset);
                return;
            }
            let cut = self.take_cut(&head);
            let target = head
                .header("x-amz-target")
                .and_then(|t| t.rsplit('.').next())
                .map(|op| format!(" {op}"))
                .unwrap_or_default();
            self.forwarded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{} {}{target}", head.method, head.path));
            let Ok(mut server) = TcpStream::connect(&self.upstream).await else {
                return;
            };
            if server.write_all(&request).await.is_err() {
                return;
            }
            let mut from_server = Vec::new();
            let Some((_, answer)) = read_message(&mut server, &mut from_server, true).await else {
                return;
            };
            let answer = kept_alive(&answer);
            if let Some(cut) = cut {
                self.cuts.fetch_add(1, Ordering::SeqCst);
                fail(client, cut);
                return;
            }
            if client.write_all(&answer).await.is_err() {
                return;
            }
        }
    }
}

/// `answer` without a `Connection: close` header line (the head is ASCII; the body as it was).
fn kept_alive(answer: &[u8]) -> Vec<u8> {
    let Some(head_end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return answer.to_vec();
    };
    let head = String::from_utf8_lossy(&answer[..head_end]);
    let kept: Vec<&str> = head
        .split("\r\n")
        .filter(|line| {
            !line.split_once(':').is_some_and(|(n, v)| {
                n.trim().eq_ignore_ascii_case("connection")
                    && v.trim().eq_ignore_ascii_case("close")
            })
        })
        .collect();
    let mut out = kept.join("\r\n").into_bytes();
    out.extend_from_slice(&answer[head_end..]);
    out
}

/// Closes or resets `socket` without another byte.
fn fail(socket: TcpStream, cut: Cut) {
    if cut == Cut::Reset {
        #[allow(deprecated)]
        let _ = socket.set_linger(Some(Duration::ZERO));
    }
    drop(socket);
}

/// A message's start line and headers.
struct Head {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one whole HTTP/1.1 message from `socket` (bytes already read in `buffered`, which keeps
/// what follows the message): its head and all its bytes. `None` at the end of the connection
/// before a whole message. An answer without a length is read to the end of the connection.
async fn read_message(
    socket: &mut (impl AsyncRead + Unpin),
    buffered: &mut Vec<u8>,
    answer: bool,
) -> Option<(Head, Vec<u8>)> {
    let head_end = loop {
        if let Some(i) = buffered.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if !fill(socket, buffered).await {
            return None;
        }
    };
    let text = String::from_utf8_lossy(&buffered[..head_end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut start = lines.next().unwrap_or_default().split(' ');
    let (method, path) = (
        start.next().unwrap_or_default().to_string(),
        start.next().unwrap_or_default().to_string(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let head = Head {
        method,
        path,
        headers,
    };
    let chunked = head
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let length = head
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok());
    let end = if let Some(length) = length {
        while buffered.len() < head_end + length {
            if !fill(socket, buffered).await {
                return None;
            }
        }
        head_end + length
    } else if chunked {
        loop {
            if let Some(end) = chunked_end(&buffered[head_end..]) {
                break head_end + end;
            }
            if !fill(socket, buffered).await {
                return None;
            }
        }
    } else if answer && !matches!(head.path.as_str(), "204" | "304") {
        // An answer's start line is `HTTP/1.1 STATUS ...`: `path` holds its status.
        while fill(socket, buffered).await {}
        buffered.len()
    } else {
        head_end
    };
    let message: Vec<u8> = buffered.drain(..end).collect();
    Some((head, message))
}

/// Where a chunked body that starts `body` ends, if it is whole.
fn chunked_end(body: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line_end = at + body.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&body[at..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            // Trailers, then an empty line.
            let rest = body.get(at..)?;
            let trailer_end = rest.windows(2).position(|w| w == b"\r\n")?;
            if trailer_end == 0 {
                return Some(at + 2);
            }
            let all = rest.windows(4).position(|w| w == b"\r\n\r\n")?;
            return Some(at + all + 4);
        }
        at += size + 2;
        if body.len() < at {
            return None;
        }
    }
}

/// Reads more bytes into `buffered`; `false` at the end of the connection or on an error.
async fn fill(socket: &mut (impl AsyncRead + Unpin), buffered: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 16 * 1024];
    match socket.read(&mut buf).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buffered.extend_from_slice(&buf[..n]);
            true
        }
    }
}
