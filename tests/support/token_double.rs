//! A double of DynamoDB's `ClientRequestToken` rules for `TransactWriteItems`, which moto does
//! not implement (moto 5.2.5 neither replays a same-token transaction nor raises
//! `IdempotentParameterMismatchException`). It sits in the fault proxy
//! ([`crate::fault_proxy::FaultProxy`]) in front of moto, so the real `DynamoStore` meets it over
//! HTTP.
//!
//! The rules, as the AWS DynamoDB API reference states them (`TransactWriteItems`,
//! "ClientRequestToken"):
//!
//! * a token is valid for 10 minutes after the first request that uses it is completed;
//! * a request with that token and the same parameters within those 10 minutes is answered as
//!   the first one was, without running again (a success as a success, a cancellation as that
//!   cancellation);
//! * the same token with other parameters within those 10 minutes is
//!   `IdempotentParameterMismatchException`;
//! * after them, the token is new: the request runs.
//!
//! [`TokenDouble`] says what the double chose where the reference leaves it open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Mutex;

use axum::body::Bytes;

/// How long a token names its first request, **milliseconds**: 10 minutes (AWS).
pub const TOKEN_WINDOW_MS: i64 = 10 * 60_000;

/// What "the same parameters" means to the double.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenHash {
    /// The request's JSON as values (RFC 8785 canonical form, without the token): maps in another
    /// order are the same parameters; any other value (a later `updated_at`) is not.
    Parameters,
    /// The request's exact bytes: even maps serialised in another order are other parameters.
    Bytes,
}

/// An answer as the double remembers and replays it.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body.
    pub body: Bytes,
}

/// What the double does with one `TransactWriteItems` request.
#[derive(Debug, Clone)]
pub enum Decision {
    /// No token: not the double's business; forward it.
    NoToken,
    /// A new token (or one past its window): forward it, then [`TokenDouble::complete`].
    Forward {
        /// The request's token.
        token: String,
        /// Its parameters' hash.
        hash: String,
    },
    /// The same token and parameters within the window: this answer, without running again.
    Replay(Answer),
    /// The same token, other parameters, within the window.
    Mismatch,
    /// The same token while its first request is still running.
    InProgress,
}

enum Entry {
    Running,
    Done {
        hash: String,
        completed_ms: i64,
        answer: Answer,
    },
}

/// The token table, on its own clock.
///
/// Three things the reference leaves open are choices of the double, each the stricter reading:
/// what counts as "the same parameters" ([`TokenHash`]: the parameters as values, so maps in
/// another order are the same request; or the exact bytes); that a cancelled transaction names
/// its token too (so a retry of a cancellation under the same token only repeats it: the adapter
/// gives every attempt after a cancellation a token of its own); and that a request arriving
/// while another with its token is still running is answered `TransactionInProgressException`
/// (the error DynamoDB documents for that case). Time is the double's own clock
/// ([`TokenDouble::advance`]), never the wall clock.
pub struct TokenDouble {
    hash: TokenHash,
    now_ms: AtomicI64,
    entries: Mutex<HashMap<String, Entry>>,
    replays: AtomicUsize,
    mismatches: AtomicUsize,
}

impl TokenDouble {
    /// An empty table comparing parameters as `hash` says, its clock at 0 ms.
    pub fn new(hash: TokenHash) -> Self {
        Self {
            hash,
            now_ms: AtomicI64::new(0),
            entries: Mutex::new(HashMap::new()),
            replays: AtomicUsize::new(0),
            mismatches: AtomicUsize::new(0),
        }
    }

    /// Moves the double's clock on by `ms` milliseconds.
    pub fn advance(&self, ms: i64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// How many requests were answered from the table.
    pub fn replays(&self) -> usize {
        self.replays.load(Ordering::SeqCst)
    }

    /// How many requests were answered `IdempotentParameterMismatchException`.
    pub fn mismatches(&self) -> usize {
        self.mismatches.load(Ordering::SeqCst)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides what to do with the request `body` (a `TransactWriteItems` JSON body).
    pub fn decide(&self, body: &[u8]) -> Decision {
        let Some(token) = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("ClientRequestToken")?.as_str().map(str::to_string))
        else {
            return Decision::NoToken;
        };
        let hash = request_hash(body, self.hash);
        let now = self.now_ms.load(Ordering::SeqCst);
        let mut entries = self.entries();
        match entries.get(&token) {
            Some(Entry::Running) => return Decision::InProgress,
            Some(Entry::Done {
                hash: first,
                completed_ms,
                answer,
            }) if now - completed_ms < TOKEN_WINDOW_MS => {
                return if *first == hash {
                    self.replays.fetch_add(1, Ordering::SeqCst);
                    Decision::Replay(answer.clone())
                } else {
                    self.mismatches.fetch_add(1, Ordering::SeqCst);
                    Decision::Mismatch
                };
            }
            _ => {}
        }
        entries.insert(token.clone(), Entry::Running);
        Decision::Forward { token, hash }
    }

    /// Remembers the `answer` of a forwarded request: a completed request (a success or a
    /// cancellation: status 200, or 400 `TransactionCanceledException`) names its token for the
    /// window; any other answer (the request did not run) forgets the token.
    pub fn complete(&self, token: &str, hash: &str, answer: &Answer) {
        let completed = answer.status == 200
            || (answer.status == 400
                && String::from_utf8_lossy(&answer.body).contains("TransactionCanceledException"));
        let mut entries = self.entries();
        if completed {
            entries.insert(
                token.to_string(),
                Entry::Done {
                    hash: hash.to_string(),
                    completed_ms: self.now_ms.load(Ordering::SeqCst),
                    answer: answer.clone(),
                },
            );
        } else {
            entries.remove(token);
        }
    }

    /// Forgets a token whose forwarded request got no answer from upstream.
    pub fn abandon(&self, token: &str) {
        let mut entries = self.entries();
        if matches!(entries.get(token), Some(Entry::Running)) {
            entries.remove(token);
        }
    }
}

/// The hash of a request's parameters as `mode` reads them (see [`TokenHash`]).
pub fn request_hash(body: &[u8], mode: TokenHash) -> String {
    match mode {
        TokenHash::Bytes => gate::keys::sha256_hex(body),
        TokenHash::Parameters => match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(mut value) => {
                if let Some(map) = value.as_object_mut() {
                    map.remove("ClientRequestToken");
                }
                gate::keys::fingerprint_of(&value).unwrap_or_else(|_| gate::keys::sha256_hex(body))
            }
            Err(_) => gate::keys::sha256_hex(body),
        },
    }
}

/// A DynamoDB error answer (JSON 1.0 protocol): `status`, `__type` of `code`, `message`.
pub fn error_answer(status: u16, code: &str, message: &str) -> Answer {
    Answer {
        status,
        content_type: Some("application/x-amz-json-1.0".into()),
        body: Bytes::from(
            serde_json::json!({
                "__type": format!("com.amazonaws.dynamodb.v20120810#{code}"),
                "message": message,
            })
            .to_string(),
        ),
    }
}

/// A `TransactionCanceledException` with one reason per item, in request order (`"None"`,
/// `"ConditionalCheckFailed"`, `"TransactionConflict"`, ...).
pub fn cancellation_answer(codes: &[&str]) -> Answer {
    let reasons: Vec<serde_json::Value> = codes
        .iter()
        .map(|code| match *code {
            "None" => serde_json::json!({ "Code": "None" }),
            code => serde_json::json!({ "Code": code, "Message": format!("{code} (injected)") }),
        })
        .collect();
    Answer {
        status: 400,
        content_type: Some("application/x-amz-json-1.0".into()),
        body: Bytes::from(
            serde_json::json!({
                "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                "message": format!(
                    "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                    codes.join(", ")
                ),
                "CancellationReasons": reasons,
            })
            .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"ClientRequestToken":"t1","TransactItems":[{"Update":{"Key":{"pk":{"S":"a"}},"ExpressionAttributeValues":{":now_ms":{"N":"1"},":owner":{"S":"o"}}}}]}"#;
    /// [`BODY`] with every map's keys in another order.
    const REORDERED: &str = r#"{"TransactItems":[{"Update":{"ExpressionAttributeValues":{":owner":{"S":"o"},":now_ms":{"N":"1"}},"Key":{"pk":{"S":"a"}}}}],"ClientRequestToken":"t1"}"#;
    /// [`BODY`] with a later `:now_ms`.
    const LATER: &str = r#"{"ClientRequestToken":"t1","TransactItems":[{"Update":{"Key":{"pk":{"S":"a"}},"ExpressionAttributeValues":{":now_ms":{"N":"2"},":owner":{"S":"o"}}}}]}"#;

    fn ok() -> Answer {
        Answer {
            status: 200,
            content_type: None,
            body: Bytes::from_static(b"{}"),
        }
    }

    #[test]
    fn maps_in_another_order_are_the_same_parameters_unless_bytes_count() {
        let p = |b: &str| request_hash(b.as_bytes(), TokenHash::Parameters);
        let b = |s: &str| request_hash(s.as_bytes(), TokenHash::Bytes);
        assert_eq!(p(BODY), p(REORDERED));
        assert_ne!(p(BODY), p(LATER));
        assert_ne!(b(BODY), b(REORDERED));
    }

    #[test]
    fn replay_mismatch_and_expiry_follow_the_documented_rules() {
        for mode in [TokenHash::Parameters, TokenHash::Bytes] {
            let d = TokenDouble::new(mode);
            let Decision::Forward { token, hash } = d.decide(BODY.as_bytes()) else {
                panic!("a new token is forwarded");
            };
            assert!(matches!(d.decide(BODY.as_bytes()), Decision::InProgress));
            d.complete(&token, &hash, &ok());
            assert!(matches!(d.decide(BODY.as_bytes()), Decision::Replay(_)));
            let reordered = d.decide(REORDERED.as_bytes());
            match mode {
                TokenHash::Parameters => assert!(matches!(reordered, Decision::Replay(_))),
                TokenHash::Bytes => assert!(matches!(reordered, Decision::Mismatch)),
            }
            d.advance(TOKEN_WINDOW_MS - 1);
            assert!(matches!(d.decide(LATER.as_bytes()), Decision::Mismatch));
            d.advance(1);
            assert!(matches!(
                d.decide(LATER.as_bytes()),
                Decision::Forward { .. }
            ));
        }
    }

    #[test]
    fn a_request_that_did_not_run_names_nothing() {
        let d = TokenDouble::new(TokenHash::Parameters);
        let Decision::Forward { token, hash } = d.decide(BODY.as_bytes()) else {
            panic!("forwarded");
        };
        d.complete(
            &token,
            &hash,
            &error_answer(400, "ThrottlingException", "slow down"),
        );
        assert!(matches!(
            d.decide(LATER.as_bytes()),
            Decision::Forward { .. }
        ));
        d.abandon("t1");
        let cancelled = cancellation_answer(&["None", "TransactionConflict"]);
        let Decision::Forward { token, hash } = d.decide(BODY.as_bytes()) else {
            panic!("forwarded");
        };
        d.complete(&token, &hash, &cancelled);
        assert!(matches!(d.decide(LATER.as_bytes()), Decision::Mismatch));
    }
}
