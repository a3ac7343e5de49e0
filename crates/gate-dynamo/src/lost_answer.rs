//! A request whose connection failed after it may have been sent: its answer is lost, never
//! "nothing happened".
//!
//! The SDK hands some connection failures to its caller without a retry of its own, or after its
//! retries are spent: an HTTP/2 `GOAWAY` surfaced as a `DispatchFailure` (awslabs/aws-sdk-rust
//! #1402), hyper's `IncompleteMessage` ("connection closed before message completed", #440), a
//! pooled keep-alive connection that died while the Lambda environment was frozen
//! (aws/aws-lambda-web-adapter #830: the request written to a dead socket, answered by a reset).
//! DynamoDB may have applied such a request. So the adapter sends the same request once more
//! ([`send_resending`]; the SDK takes a connection that failed out of its pool, so the second
//! attempt does not reuse it), and every write recognises itself when it meets its own earlier
//! write: the reserve and the guard through the old item of their failed condition, the commit
//! through its `ClientRequestToken` (or, where DynamoDB does not replay it, the cancellation's
//! old item, then one consistent read), an extension, a release or a finish through the same
//! condition meeting the same values (see the module docs of `dynamo`).
//!
//! Not re-sent here: a request the service answered (a service error says what happened), one
//! the client could not build, and a timeout (the SDK retries timeouts itself; a store that stops
//! answering is bounded by the invocation's budget, `gate::store::budget`, and a second wait
//! would only spend it).

use std::future::Future;

use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};

/// Whether `err` is a connection failure after which the request may have been applied: a
/// dispatch failure other than a timeout or a request the client refused to send (I/O, a reset,
/// a `GOAWAY`, an incomplete message, any connector error the SDK does not recognise), or a
/// response that could not be read.
pub(crate) fn is_lost_answer<E, R>(err: &SdkError<E, R>) -> bool {
    match err {
        SdkError::DispatchFailure(failure) => !failure.is_timeout() && !failure.is_user(),
        SdkError::ResponseError(_) => true,
        _ => false,
    }
}

/// Sends with `send`, and once more when that attempt's connection failed
/// ([`is_lost_answer`]): the same request (a clone of one fluent builder, so the same
/// parameters and, for a commit, the same `ClientRequestToken`). Returns the answer of the last
/// attempt. `op` names the request in the log line (e.g. `"reserve (PutItem)"`).
///
/// # Errors
/// The SDK error of the last attempt.
pub(crate) async fn send_resending<T, E, R, F, Fut>(op: &str, send: F) -> Result<T, SdkError<E, R>>
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
{
    match send().await {
        Err(err) if is_lost_answer(&err) => {
            tracing::warn!(
                op,
                error = %DisplayErrorContext(&err),
                "DynamoDB connection failed after the request may have been sent: sent once more"
            );
            send().await
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::client::retries::ErrorKind;
    use std::sync::atomic::{AtomicUsize, Ordering};

    type Err = SdkError<PutItemError, ()>;

    fn io_reset() -> Err {
        SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        ))))
    }

    /// What the SDK hands over for hyper's `IncompleteMessage` (`other`, transient) and for an
    /// error it does not recognise (`other`, no kind), an HTTP/2 `GOAWAY` among them.
    fn other(kind: Option<ErrorKind>) -> Err {
        SdkError::dispatch_failure(ConnectorError::other(
            "connection closed before message completed".into(),
            kind,
        ))
    }

    #[test]
    fn connection_failures_are_lost_answers_and_timeouts_and_refusals_are_not() {
        assert!(is_lost_answer(&io_reset()));
        assert!(is_lost_answer(&other(Some(ErrorKind::TransientError))));
        assert!(is_lost_answer(&other(None)));
        let timeout = SdkError::<PutItemError, ()>::dispatch_failure(ConnectorError::timeout(
            "read timed out".into(),
        ));
        assert!(!is_lost_answer(&timeout));
        let user = SdkError::<PutItemError, ()>::dispatch_failure(ConnectorError::user(
            "bad header".into(),
        ));
        assert!(!is_lost_answer(&user));
        let service = SdkError::<PutItemError, ()>::service_error(
            PutItemError::generic(
                aws_sdk_dynamodb::error::ErrorMetadata::builder()
                    .code("InternalServerError")
                    .build(),
            ),
            (),
        );
        assert!(!is_lost_answer(&service));
        let built = SdkError::<PutItemError, ()>::construction_failure("no table name");
        assert!(!is_lost_answer(&built));
    }

    /// One re-send after a lost answer, none after a service's answer, never a third attempt.
    #[tokio::test]
    async fn a_lost_answer_is_sent_once_more_and_only_once() {
        let calls = AtomicUsize::new(0);
        let r: Result<u8, Err> = send_resending("test", || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    Err(io_reset())
                } else {
                    Ok(7)
                }
            }
        })
        .await;
        assert_eq!(r.ok(), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        let calls = AtomicUsize::new(0);
        let r: Result<u8, Err> = send_resending("test", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(other(None)) }
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        let calls = AtomicUsize::new(0);
        let r: Result<u8, Err> = send_resending("test", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(SdkError::construction_failure("no table name")) }
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
