//! What the test backend proves. moto is not DynamoDB: it has no `ClientRequestToken` logic, and
//! other emulators differ elsewhere. So before a test leans on a guarantee of the service, it asks
//! the probe whether the backend it runs on shows that guarantee at all. The probe runs once per
//! test binary (cached) against moto, and on demand against any endpoint (the fault proxy with
//! its token double): four small experiments on fresh tables, one per [`Guarantee`].
//!
//! A test that depends on a guarantee the backend lacks calls [`Backend::proves`], which prints
//! `not proven on this backend: <guarantee>` with where the guarantee is covered instead (the
//! double, the simulation), and returns `false`: the test then returns early, never claiming the
//! guarantee green on that backend.

use std::fmt::Write as _;
use std::sync::Arc;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use gate_dynamo::INFLIGHT_INDEX;
use tokio::sync::OnceCell;

/// A guarantee of DynamoDB the gate relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Guarantee {
    /// A `TransactWriteItems` retried with the same `ClientRequestToken` and parameters within
    /// 10 minutes is answered as the first, without running again.
    SameTokenReplay,
    /// The same token with other parameters within 10 minutes is
    /// `IdempotentParameterMismatchException`.
    TokenMismatch,
    /// Concurrent conditional writes on one item are serialised: of 8 `PutItem`s with
    /// `attribute_not_exists(pk)` at once, exactly one succeeds.
    ConditionalWritesSerialised,
    /// A `Query` of a global secondary index with `ConsistentRead=true` is refused
    /// (`ValidationException`): a GSI is eventually consistent, and a backend that accepts the
    /// flag may read it consistently where DynamoDB cannot.
    GsiConsistentReadRefused,
}

impl Guarantee {
    /// Every guarantee, in the order the table lists them.
    pub const ALL: [Guarantee; 4] = [
        Guarantee::SameTokenReplay,
        Guarantee::TokenMismatch,
        Guarantee::ConditionalWritesSerialised,
        Guarantee::GsiConsistentReadRefused,
    ];

    /// The guarantee in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            Guarantee::SameTokenReplay => "same-token TransactWriteItems replayed within 10 min",
            Guarantee::TokenMismatch => {
                "same token, other parameters: IdempotentParameterMismatchException"
            }
            Guarantee::ConditionalWritesSerialised => {
                "concurrent conditional writes on one item serialised"
            }
            Guarantee::GsiConsistentReadRefused => "ConsistentRead refused on a GSI",
        }
    }
}

/// What one backend showed.
#[derive(Debug, Clone)]
pub struct Backend {
    /// The backend's name in messages (`moto`, `moto + token double`).
    pub name: String,
    /// Each guarantee and whether the backend honoured it.
    pub honoured: Vec<(Guarantee, bool)>,
}

impl Backend {
    /// Whether the backend honoured `g`.
    pub fn honours(&self, g: Guarantee) -> bool {
        self.honoured.iter().any(|(x, ok)| *x == g && *ok)
    }

    /// `true` when the backend honoured `g`. Otherwise prints `not proven on this backend:
    /// <guarantee> (<backend>); covered by <covered_by>` and returns `false`: the caller returns
    /// early and claims nothing for `g` on this backend.
    pub fn proves(&self, g: Guarantee, covered_by: &str) -> bool {
        if self.honours(g) {
            return true;
        }
        println!(
            "not proven on this backend: {} ({}); covered by {covered_by}",
            g.describe(),
            self.name
        );
        false
    }

    /// The probe's findings, one line per guarantee.
    pub fn report(&self) -> String {
        let mut out = format!("backend {}:\n", self.name);
        for (g, ok) in &self.honoured {
            let _ = writeln!(
                out,
                "  {:<70} {}",
                g.describe(),
                if *ok { "honoured" } else { "NOT honoured" }
            );
        }
        out
    }
}

/// moto as `scripts/with-moto.sh` runs it, probed once per test binary.
pub async fn moto() -> &'static Backend {
    static MOTO: OnceCell<Backend> = OnceCell::const_new();
    MOTO.get_or_init(|| async { probe("moto", &crate::dynamo_client().await).await })
        .await
}

/// Runs the four experiments through `client` on fresh tables.
///
/// # Panics
/// When the backend cannot create tables (test wiring).
pub async fn probe(name: &str, client: &Client) -> Backend {
    let (table, _) = crate::fresh_tables(client, "probe").await;
    let (replay, mismatch) = token_rules(client, &table).await;
    Backend {
        name: name.to_string(),
        honoured: vec![
            (Guarantee::SameTokenReplay, replay),
            (Guarantee::TokenMismatch, mismatch),
            (
                Guarantee::ConditionalWritesSerialised,
                conditional_writes_serialised(client, &table).await,
            ),
            (
                Guarantee::GsiConsistentReadRefused,
                gsi_consistent_read_refused(client, &table).await,
            ),
        ],
    }
}

fn add(table: &str, pk: &str, n: i64) -> TransactWriteItem {
    let update = Update::builder()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.to_string()))
        .update_expression("ADD probe_count :n")
        .expression_attribute_values(":n", AttributeValue::N(n.to_string()))
        .build()
        .expect("an update with key and expression");
    TransactWriteItem::builder().update(update).build()
}

/// The same transaction (`ADD probe_count 1`) twice under one token: replayed if the count
/// ends at one. Then the same token with `ADD 2`: honoured if refused with
/// `IdempotentParameterMismatchException`.
async fn token_rules(client: &Client, table: &str) -> (bool, bool) {
    let pk = crate::unique("probe-token");
    let token = gate::keys::sha256_hex(pk.as_bytes())[..32].to_string();
    let send = |n: i64| {
        client
            .transact_write_items()
            .transact_items(add(table, &pk, n))
            .client_request_token(&token)
            .send()
    };
    let first = send(1).await.is_ok();
    let second = send(1).await.is_ok();
    let count = client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.clone()))
        .consistent_read(true)
        .send()
        .await
        .ok()
        .and_then(|out| out.item()?.get("probe_count")?.as_n().ok().cloned());
    let replay = first && second && count.as_deref() == Some("1");
    let mismatch = match send(2).await {
        Ok(_) => false,
        Err(e) => e.code() == Some("IdempotentParameterMismatchException"),
    };
    (replay, mismatch)
}

/// 8 concurrent `PutItem`s with `attribute_not_exists(pk)` (written long, so that an
/// unserialised backend loses the race: see `tests/tests/moto_serialises.rs`) on each of 3 keys:
/// exactly one winner per key.
async fn conditional_writes_serialised(client: &Client, table: &str) -> bool {
    let clauses = vec!["attribute_not_exists(pk)"; 140].join(" OR ");
    let condition = Arc::new(format!("attribute_not_exists(pk) AND ({clauses})"));
    for k in 0..3 {
        let pk = crate::unique(&format!("probe-race-{k}"));
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let writers: Vec<_> = (0..8)
            .map(|w| {
                let (client, table, pk, barrier, condition) = (
                    client.clone(),
                    table.to_string(),
                    pk.clone(),
                    barrier.clone(),
                    condition.clone(),
                );
                tokio::spawn(async move {
                    barrier.wait().await;
                    client
                        .put_item()
                        .table_name(table)
                        .item("pk", AttributeValue::S(pk))
                        .item("writer", AttributeValue::N(w.to_string()))
                        .condition_expression(condition.as_str())
                        .send()
                        .await
                        .is_ok()
                })
            })
            .collect();
        let mut winners = 0;
        for writer in writers {
            if writer.await.unwrap_or(false) {
                winners += 1;
            }
        }
        if winners != 1 {
            return false;
        }
    }
    true
}

/// A `Query` of the `InFlight` GSI with `ConsistentRead=true`: honoured if refused with
/// `ValidationException`.
async fn gsi_consistent_read_refused(client: &Client, table: &str) -> bool {
    let out = client
        .query()
        .table_name(table)
        .index_name(INFLIGHT_INDEX)
        .key_condition_expression("inflight_shard = :shard")
        .expression_attribute_values(":shard", AttributeValue::S("00".into()))
        .consistent_read(true)
        .send()
        .await;
    match out {
        Ok(_) => false,
        Err(e) => e.code() == Some("ValidationException"),
    }
}
