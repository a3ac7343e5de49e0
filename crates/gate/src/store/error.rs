//! The store's failure ([`StoreError`]) and what caused it ([`Cause`]): the adapter's words and,
//! where there is one, the SDK's or the driver's own error, kept as the error's source.

use std::error::Error;
use std::sync::Arc;

use super::limits;

/// What caused a [`StoreError`]: the adapter's words (`message`, with the operation and the
/// cause's text: what a log line shows) and, where the failure came from the SDK or the driver,
/// that error itself ([`Error::source`]), shared so that the error stays `Clone`.
///
/// Two causes are equal when their messages are (the source errors are not comparable). `Debug`
/// shows the message and the source's text only, never its `Debug` (an SDK error's holds the raw
/// response, which may hold a stored item).
#[derive(Clone)]
pub struct Cause {
    message: String,
    source: Option<Arc<dyn Error + Send + Sync + 'static>>,
}

impl Cause {
    /// A cause the adapter found itself (an unreadable item, a refused condition): `message`
    /// only.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// A cause from the SDK or the driver: `message` (the operation and the error's text, as a
    /// log line should show them) and `source`, the error itself.
    pub fn with_source(
        message: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// The adapter's words.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::fmt::Debug for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Cause");
        d.field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", &format_args!("{source}"));
        }
        d.finish()
    }
}

impl Error for Cause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for Cause {}

impl From<String> for Cause {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// A store failure. All but [`StoreError::Corrupt`], [`StoreError::Refused`] and
/// [`StoreError::Invalid`] are transient ([`StoreError::is_transient`]): the record goes into
/// `batchItemFailures` and SQS redelivers it. The permanent ones are never retried by the gate:
/// a new event the store refuses is routed to a person before anything is written, a commit it
/// refuses routes the held record. Each variant's [`Cause`] is its [`Error::source`], and the
/// SDK's or the driver's error, where there is one, the cause's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Throttled after the SDK's own retries.
    #[error("store throttled: {0}")]
    Throttled(#[source] Cause),
    /// A transaction conflicted after our retries.
    #[error("transaction conflict: {0}")]
    TransactionConflict(#[source] Cause),
    /// Network, service or other transient error.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] Cause),
    /// A stored item cannot be read as a record: needs a person.
    #[error("corrupt record: {0}")]
    Corrupt(#[source] Cause),
    /// The write was refused for what it would store, before anything was written: a label
    /// named like a store attribute, or an item over the size limit ([`limits`]). Permanent:
    /// the same write is refused every time, so it is never retried.
    #[error("item refused: {0}")]
    Refused(#[source] limits::ItemRefusal),
    /// The service refused the request itself as invalid (DynamoDB's `ValidationException`: an
    /// item over 400 KB, a key that does not match the table's key schema, an expression the
    /// service rejects). Permanent: the same request is refused every time, so it is never
    /// retried as if the service were unavailable. Carries the service's message.
    #[error("store refused the request as invalid: {0}")]
    Invalid(#[source] Cause),
}

impl StoreError {
    /// Whether the same call may succeed later (throttling, a transaction conflict, an outage):
    /// `false` for [`StoreError::Corrupt`], [`StoreError::Refused`] and [`StoreError::Invalid`].
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Throttled(_) | Self::TransactionConflict(_) | Self::Unavailable(_)
        )
    }

    /// [`StoreError::Unavailable`] with `message` and the SDK's or driver's error `source`.
    pub fn unavailable(
        message: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self::Unavailable(Cause::with_source(message, source))
    }

    /// [`StoreError::Throttled`] with `message` and the SDK's or driver's error `source`.
    pub fn throttled(
        message: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self::Throttled(Cause::with_source(message, source))
    }

    /// [`StoreError::TransactionConflict`] with `message` and the SDK's or driver's error
    /// `source`.
    pub fn conflict(
        message: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self::TransactionConflict(Cause::with_source(message, source))
    }

    /// [`StoreError::Corrupt`] with `message` and the decoder's error `source`.
    pub fn corrupt(message: impl Into<String>, source: impl Error + Send + Sync + 'static) -> Self {
        Self::Corrupt(Cause::with_source(message, source))
    }

    /// [`StoreError::Invalid`] with `message` and the SDK's or driver's error `source`.
    pub fn invalid(message: impl Into<String>, source: impl Error + Send + Sync + 'static) -> Self {
        Self::Invalid(Cause::with_source(message, source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SDK's or driver's error stays reachable as the source of the cause, the Display
    /// keeps the adapter's words, and equality reads the words only.
    #[test]
    fn the_cause_keeps_its_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let e = StoreError::unavailable("reserve (PutItem): reset by peer", io);
        assert_eq!(
            e.to_string(),
            "store unavailable: reserve (PutItem): reset by peer"
        );
        let cause = e.source().expect("the cause");
        assert_eq!(cause.to_string(), "reserve (PutItem): reset by peer");
        let io = cause.source().expect("the driver's error");
        assert_eq!(
            io.downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(std::io::ErrorKind::ConnectionReset)
        );
        assert!(e.is_transient());
        assert_eq!(
            e,
            StoreError::Unavailable("reserve (PutItem): reset by peer".into())
        );
        assert_ne!(
            e,
            StoreError::Throttled("reserve (PutItem): reset by peer".into())
        );
        assert!(!format!("{e:?}").contains("Custom"), "{e:?}");
    }
}
