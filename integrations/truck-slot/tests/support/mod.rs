//! A scripted terminal over HTTP on loopback: every request is recorded (method, URI, headers,
//! body) and answered by a closure, so a test can make the terminal misbehave in any way.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;

/// One request the terminal received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Every header, names lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Seen {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An answer: status, headers, body.
pub type Answer = (u16, Vec<(&'static str, String)>, Vec<u8>);

/// The script: the request in, the answer out.
pub type Script = Arc<dyn Fn(&Seen) -> Answer + Send + Sync>;

#[derive(Clone)]
struct St {
    script: Script,
    seen: Arc<Mutex<Vec<Seen>>>,
}

async fn handle(
    State(st): State<St>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let seen = Seen {
        method: method.to_string(),
        uri: uri.to_string(),
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
    };
    let (status, headers, body) = (st.script)(&seen);
    st.seen.lock().unwrap().push(seen);
    let mut response = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body,
    )
        .into_response();
    for (name, value) in headers {
        response
            .headers_mut()
            .insert(name, value.parse().expect("header value"));
    }
    response
}

/// A running scripted terminal.
pub struct Scripted {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Starts a terminal answering with `script`, on a free loopback port.
pub async fn spawn(script: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> Scripted {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let st = St {
        script: Arc::new(script),
        seen: seen.clone(),
    };
    let app = Router::new().fallback(handle).with_state(st);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Scripted {
        base_url: format!("http://{addr}"),
        seen,
    }
}

/// A JSON answer.
pub fn json(status: u16, value: serde_json::Value) -> Answer {
    (
        status,
        vec![("content-type", "application/json".to_string())],
        value.to_string().into_bytes(),
    )
}

/// A raw answer.
pub fn raw(status: u16, body: impl Into<Vec<u8>>) -> Answer {
    (status, Vec::new(), body.into())
}
