//! [`TerminalRouter`]: each record's calls sent to the client of the terminal its notification
//! names, at most `max_concurrent_calls` at once per terminal.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Semaphore;

use super::config::TerminalSpec;
use crate::terminal::{
    AnswerDetail, ApiToken, CallOutcome, HttpTerminal, HttpTerminalConfig, HttpTerminalError,
    LookupOutcome, SlotTerminal,
};

/// The [`TerminalRouter`] for `specs` (`TERMINALS`): one [`HttpTerminal`] per terminal with key
/// support, with its base URL, API shape and call limit, the timeouts of `shared`, and its token
/// from `tokens` (by terminal code; read from each one's secret at cold start,
/// `crate::lambda::terminal_router`). A terminal without key support gets no client: the gate
/// never calls it.
///
/// # Errors
/// A client that cannot be built.
pub fn http_router(
    specs: &[TerminalSpec],
    shared: &HttpTerminalConfig,
    mut tokens: BTreeMap<String, ApiToken>,
) -> Result<TerminalRouter, HttpTerminalError> {
    let mut router = TerminalRouter::new(shared.request_timeout);
    for spec in specs.iter().filter(|s| s.supports_idempotency_key) {
        let mut config = HttpTerminalConfig::new(spec.base_url.clone().unwrap_or_default());
        config.connect_timeout = shared.connect_timeout;
        config.request_timeout = shared.request_timeout;
        config.api = spec.api;
        config.slot_id_format = spec.slot_id_format.clone();
        config.token = tokens.remove(&spec.code);
        router = router.with(
            spec.code.clone(),
            Arc::new(HttpTerminal::new(config)?),
            spec.max_concurrent_calls.unwrap_or(1),
        );
    }
    Ok(router)
}

/// A call counted in flight while this lives.
pub(super) struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One terminal behind the router: its client and its call permits.
pub(super) struct Routed {
    client: Arc<dyn SlotTerminal>,
    permits: Arc<Semaphore>,
    max_calls: usize,
    /// Calls in flight now, and the most at once so far.
    in_flight: AtomicUsize,
    most: AtomicUsize,
}

/// A [`SlotTerminal`] for several terminals: each call goes to the client of the terminal its
/// record names ([`SlotTerminal::claim_at`], [`SlotTerminal::lookup_at`]), after one of that
/// terminal's call permits is free (below). A terminal
/// the router does not know (a record of a terminal since removed from the configuration, or one
/// without key support, which the gate never calls) is answered transient without a call: nothing
/// is claimed where no client is configured, and the record goes to a person past its horizon.
///
/// A terminal's calls (claims and lookups) wait for one of its `max_concurrent_calls` permits. The
/// wait and the call together are bounded by the request timeout: a call that cannot start in time
/// is [`CallOutcome::Transient`](crate::terminal::CallOutcome::Transient) (nothing was sent; the record is retried later with the same key),
/// so a record's deadline arithmetic (`crate::config`, the deadline margin) still holds. The limit
/// is per execution environment: at most `max_concurrent_calls` × the consumer's concurrent
/// environments (`MaximumConcurrency` of its SQS event source) + the reconciler's reach a terminal.
pub struct TerminalRouter {
    terminals: BTreeMap<String, Routed>,
    call_timeout: Duration,
}

impl std::fmt::Debug for TerminalRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalRouter")
            .field("terminals", &self.terminals.keys().collect::<Vec<_>>())
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

impl TerminalRouter {
    /// An empty router whose calls (the wait for a permit and the call together) take at most
    /// `call_timeout` (the terminals' request timeout).
    pub fn new(call_timeout: Duration) -> Self {
        Self {
            terminals: BTreeMap::new(),
            call_timeout,
        }
    }

    /// Adds terminal `code` served by `client`, at most `max_concurrent_calls` (at least 1) calls
    /// at once.
    #[must_use]
    pub fn with(
        mut self,
        code: impl Into<String>,
        client: Arc<dyn SlotTerminal>,
        max_concurrent_calls: usize,
    ) -> Self {
        let max_calls = max_concurrent_calls.max(1);
        self.terminals.insert(
            code.into(),
            Routed {
                client,
                permits: Arc::new(Semaphore::new(max_calls)),
                max_calls,
                in_flight: AtomicUsize::new(0),
                most: AtomicUsize::new(0),
            },
        );
        self
    }

    /// The most calls this router had in flight at `terminal` at one time so far (never above its
    /// `max_concurrent_calls`); `None` for a terminal it has no client for.
    pub fn most_calls_at_once(&self, terminal: &str) -> Option<usize> {
        self.terminals
            .get(terminal)
            .map(|r| r.most.load(Ordering::SeqCst))
    }

    /// The terminal codes the router has a client for.
    pub fn codes(&self) -> Vec<&str> {
        self.terminals.keys().map(String::as_str).collect()
    }

    /// Calls `call` on `terminal`'s client once a permit is free; `Err` (transient, nothing sent)
    /// when there is no such terminal or no permit within the call timeout, or when the call does
    /// not finish within what is left of it.
    async fn limited<T, F, Fut>(&self, terminal: &str, call: F) -> Result<T, AnswerDetail>
    where
        F: FnOnce(Arc<dyn SlotTerminal>) -> Fut,
        Fut: Future<Output = T>,
    {
        let Some(routed) = self.terminals.get(terminal) else {
            return Err(AnswerDetail::new(format!(
                "no client for terminal {terminal:?} in this stack's TERMINALS: nothing sent"
            )));
        };
        let started = Instant::now();
        let permit = match tokio::time::timeout(self.call_timeout, routed.permits.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) | Err(_) => {
                return Err(AnswerDetail::new(format!(
                    "terminal {terminal:?}: all {} calls (max_concurrent_calls) busy for {} ms: \
                     nothing sent, retried later",
                    routed.max_calls,
                    started.elapsed().as_millis()
                )))
            }
        };
        let left = self.call_timeout.saturating_sub(started.elapsed());
        let now = routed.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        routed.most.fetch_max(now, Ordering::SeqCst);
        // Counted out when the call ends or is dropped (an invocation that ends mid-call).
        let counted = Counted(&routed.in_flight);
        let outcome = tokio::time::timeout(left, call(routed.client.clone())).await;
        drop(counted);
        drop(permit);
        outcome.map_err(|_| {
            AnswerDetail::new(format!(
                "terminal {terminal:?}: no answer within the request timeout ({} ms, the wait \
                 for a free call included)",
                self.call_timeout.as_millis()
            ))
        })
    }

    /// The only terminal's code, when the router has exactly one.
    fn only(&self) -> Option<&str> {
        let mut codes = self.terminals.keys();
        match (codes.next(), codes.next()) {
            (Some(code), None) => Some(code),
            _ => None,
        }
    }
}

pub(super) const NO_TERMINAL_NAMED: &str =
    "the terminal router has several terminals and the call named none: nothing sent";

#[async_trait]
impl SlotTerminal for TerminalRouter {
    /// Without a terminal code: the only terminal's client, if the router has exactly one.
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        match self.only() {
            Some(code) => self.claim_at(code, op_key, request).await,
            None => CallOutcome::Transient(NO_TERMINAL_NAMED.into()),
        }
    }

    /// Without a terminal code: the only terminal's client, if the router has exactly one.
    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        match self.only() {
            Some(code) => self.lookup_at(code, op_key, request).await,
            None => LookupOutcome::Transient(NO_TERMINAL_NAMED.into()),
        }
    }

    async fn claim_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> CallOutcome {
        self.limited(terminal, |client| async move {
            client.claim_at(terminal, op_key, request).await
        })
        .await
        .unwrap_or_else(CallOutcome::Transient)
    }

    async fn lookup_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.limited(terminal, |client| async move {
            client.lookup_at(terminal, op_key, request).await
        })
        .await
        .unwrap_or_else(LookupOutcome::Transient)
    }

    async fn show_lookup_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> Option<String> {
        self.limited(terminal, |client| async move {
            client.show_lookup_at(terminal, op_key, request).await
        })
        .await
        .unwrap_or_else(|why| Some(format!("not asked: {why}")))
    }
}
