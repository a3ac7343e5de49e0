//! The thin axum wrapper that serves a [`TerminalCore`] (or several, each under its base path)
//! over HTTP.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use super::keys::percent_decode;
use super::{SimResponse, TerminalCore, PROBLEM_INTERNAL, PROBLEM_NOT_FOUND};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;

/// The axum router serving `core`: every request goes to [`TerminalCore::handle`]. The core runs
/// in its own task, so a client that disconnects does not cancel the server's work (as with a
/// real server, the slot is still made and stored).
pub fn router(core: Arc<TerminalCore>) -> Router {
    Router::new().fallback(dispatch).with_state(core)
}

pub(super) async fn dispatch(
    State(core): State<Arc<TerminalCore>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_core(core, method, uri.path().to_string(), &uri, &headers, body).await
}

/// The base path [`multi_router`] serves terminal `code` under: `/terminals/{code}`.
pub fn base_path(code: &str) -> String {
    format!("/terminals/{code}")
}

/// The axum router serving several terminals at once, each under its own base path
/// (`/terminals/{code}/...`, [`base_path`]) with its own behaviour: `POST
/// /terminals/ECT-DELTA/slots` goes to that core as `POST /slots`. A path under no known code is
/// answered `404` problem.
pub fn multi_router(terminals: Vec<(String, Arc<TerminalCore>)>) -> Router {
    let terminals: Arc<HashMap<String, Arc<TerminalCore>>> =
        Arc::new(terminals.into_iter().collect());
    Router::new().fallback(dispatch_many).with_state(terminals)
}

pub(super) async fn dispatch_many(
    State(terminals): State<Arc<HashMap<String, Arc<TerminalCore>>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let routed = uri.path().strip_prefix("/terminals/").and_then(|rest| {
        let (code, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        terminals
            .get(&percent_decode(code))
            .map(|core| (core.clone(), path.to_string()))
    });
    match routed {
        Some((core, path)) => serve_core(core, method, path, &uri, &headers, body).await,
        None => respond(SimResponse::problem(
            404,
            PROBLEM_NOT_FOUND,
            "Not Found",
            "no terminal is served under this path (expected /terminals/{code}/...)",
        )),
    }
}

/// Runs one request on `core` in its own task (a client that disconnects does not cancel it).
pub(super) async fn serve_core(
    core: Arc<TerminalCore>,
    method: Method,
    path: String,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let key = headers
        .get("idempotency-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let query = uri.query().map(str::to_string);
    let method = method.as_str().to_string();
    let task = tokio::spawn(async move {
        core.handle(&method, &path, query.as_deref(), key.as_deref(), &body)
            .await
    });
    let response = match task.await {
        Ok(r) => r,
        Err(e) => SimResponse::problem(
            500,
            PROBLEM_INTERNAL,
            "Internal Server Error",
            &e.to_string(),
        ),
    };
    respond(response)
}

pub(super) fn respond(response: SimResponse) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, response.content_type)],
        response.body,
    )
        .into_response()
}

/// Binds `addr` and serves [`router`]`(core)` on a background task. Returns the bound address
/// (useful with port 0) and the server task's handle.
pub async fn spawn_on(
    core: Arc<TerminalCore>,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(core)).await {
            tracing::error!(error = %e, "terminal simulator server stopped");
        }
    });
    Ok((bound, handle))
}

/// Binds `addr` and serves [`multi_router`]`(terminals)` on a background task: several terminals
/// in one server, each under `/terminals/{code}`. Returns the bound address and the server task's
/// handle (abort it to stop the server).
pub async fn spawn_many(
    terminals: Vec<(String, Arc<TerminalCore>)>,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, multi_router(terminals)).await {
            tracing::error!(error = %e, "terminal simulator server stopped");
        }
    });
    Ok((bound, handle))
}

/// Binds `127.0.0.1:0` and serves [`router`]`(core)` on a background task; returns the bound
/// address and the server task's handle (abort it to stop the server).
pub async fn spawn(
    core: Arc<TerminalCore>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    spawn_on(core, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
}
