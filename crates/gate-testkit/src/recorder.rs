//! [`CallRecorder`]: the operation name of every SDK request, retries included (feature `aws`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

/// An SDK interceptor that records the operation name (`PutItem`, `TransactWriteItems`,
/// `SendMessage`, ...) of every HTTP request a client sends, retries included (recorded
/// before transmit). Clones share one record. Attach it with the client config builder's
/// `.interceptor(recorder.clone())`.
#[derive(Debug, Clone, Default)]
pub struct CallRecorder {
    calls: Arc<Mutex<Vec<String>>>,
}

impl CallRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every request's operation name so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Requests so far per operation name.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for call in self.calls.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            *counts.entry(call.clone()).or_default() += 1;
        }
        counts
    }

    /// Forgets the requests so far.
    pub fn clear(&self) {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl Intercept for CallRecorder {
    fn name(&self) -> &'static str {
        "CallRecorder"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let name = cfg
            .load::<Metadata>()
            .map_or_else(|| "?".to_string(), |m| m.name().to_string());
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name);
        Ok(())
    }
}
