//! Terminal answers that are wrong: transient when the slot may exist under the key, permanent
//! (`terminal_answer_invalid`) when the slot id or the container is not ours to keep.

use super::*;

// --- terminal answers -------------------------------------------------------------------------

/// Runs one good notification against a terminal answering `answer` to every claim; asserts the
/// record is retried (transient): in `batchItemFailures`, still `in_flight` with its lease
/// released, nothing in the manual queue, no booking.
async fn assert_transient_answer(answer: Answer) -> String {
    let (w, terminal) = scripted_world(move |_| answer.clone()).await;
    let body = good().to_string();
    let report = w
        .gate
        .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-1"))
        .await;
    let RecordOutcome::Retry(why) = &report.records[0].outcome else {
        panic!("expected a retry, got {:?}", report.records[0].outcome);
    };
    assert_eq!(failures(&report), vec!["m-1".to_string()]);
    let record = w
        .store
        .get(&record_pk(INTEGRATION, &event_key_of("PCS-1", CONTAINER)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::InFlight);
    assert!(!record.lease_is_live(w.clock.now_ms()), "lease released");
    assert!(w.manual.items().is_empty());
    assert!(w.store.business_rows().is_empty());
    assert_eq!(terminal.seen().len(), 1);
    why.clone()
}

#[tokio::test]
async fn an_answer_that_is_not_json_is_transient() {
    let why = assert_transient_answer(raw(201, "<html>Slot booked!</html>")).await;
    assert!(why.contains("not JSON"), "{why}");
}

#[tokio::test]
async fn an_answer_without_a_slot_id_is_transient() {
    let why = assert_transient_answer(json(201, json!({"status": "booked"}))).await;
    assert!(why.contains("no slot_id"), "{why}");
    let why = assert_transient_answer(json(200, json!({"slot_id": null}))).await;
    assert!(why.contains("no slot_id"), "{why}");
    let why = assert_transient_answer(json(201, json!({"slot_id": 42}))).await;
    assert!(why.contains("not a string"), "{why}");
}

#[tokio::test]
async fn an_empty_slot_id_is_transient() {
    let why = assert_transient_answer(json(201, json!({"slot_id": ""}))).await;
    assert!(why.contains("empty slot_id"), "{why}");
    let why = assert_transient_answer(json(201, json!({"slot_id": "   "}))).await;
    assert!(why.contains("empty slot_id"), "{why}");
}

/// A slot id outside the terminal's declared format (the strict default: letters, digits and
/// `-_.:`, at most 64 characters), or one that quotes the PIN (hex of it fits the format), is
/// refused: the slot exists under the key and every retry replays it, so the record is
/// `failed` and a person gets it at once, told the id only by its keyed digest; the id is never
/// logged, stored or booked.
#[tokio::test]
async fn a_slot_id_outside_the_format_goes_to_a_person_unquoted() {
    for (id, why) in [
        (
            "S".repeat(MAX_SLOT_ID_CHARS + 1),
            "longer than the gate keeps",
        ),
        ("S".repeat(65), "outside the format"),
        (
            "S-1\n{\"level\":\"ERROR\"}".to_string(),
            "outside printable ASCII",
        ),
        ("SLOT-UmxzLTEwNDIzMw==".to_string(), "outside the format"),
        ("RLS&minus;104233".to_string(), "outside the format"),
        (
            format!("SLOT-{}", hex::encode("Rls-104233")),
            "quotes a secret",
        ),
    ] {
        let (w, _terminal) = scripted_world(move |_| {
            json(201, json!({"slot_id": id, "equipment_number": CONTAINER}))
        })
        .await;
        let body = good().to_string();
        let report = w
            .gate
            .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-1"))
            .await;
        assert_eq!(
            report.records[0].outcome,
            RecordOutcome::Manual(ManualReason::ServerAnswerInvalid),
            "{why}"
        );
        assert!(failures(&report).is_empty(), "acknowledged");
        let record = w
            .store
            .get(&record_pk(INTEGRATION, &event_key_of("PCS-1", CONTAINER)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.status, RecordStatus::Failed);
        assert!(record.effect_id.is_none() && record.effect_ids.is_empty());
        assert!(w.store.business_rows().is_empty());
        let items = w.manual.items();
        assert_eq!(items.len(), 1);
        let detail = &items[0].detail;
        assert!(detail.contains(why), "{detail}");
        assert!(detail.contains("keyed SHA-256 of the id"), "{detail}");
        assert!(detail.contains("gatectl lookup"), "{detail}");
        assert!(!detail.contains("SSSS") && !detail.contains("SLOT-") && !detail.contains('\n'));
        assert_eq!(record.error.as_deref(), Some(detail.as_str()));
    }
}

#[tokio::test]
async fn an_answer_for_another_container_is_routed_as_invalid() {
    let (w, _terminal) = scripted_world(|_| {
        json(
            201,
            json!({"slot_id": "S-OTHER", "equipment_number": "MSKU1234565"}),
        )
    })
    .await;
    let body = good().to_string();
    let report = w
        .gate
        .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-1"))
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::ServerAnswerInvalid)
    );
    assert!(failures(&report).is_empty(), "permanent: acknowledged");
    let record = w
        .store
        .get(&record_pk(INTEGRATION, &event_key_of("PCS-1", CONTAINER)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::Failed);
    assert!(
        record.effect_ids.contains("S-OTHER"),
        "the slot made is kept"
    );
    assert!(
        w.store.business_rows().is_empty(),
        "no booking for a wrong slot"
    );
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::ServerAnswerInvalid);
    assert_eq!(items[0].original_body, body);
    // The answered container is the terminal's text: named by its keyed digest only.
    assert!(
        !items[0].detail.contains("MSKU1234565")
            && items[0].detail.contains("another subject (keyed SHA-256"),
        "{}",
        items[0].detail
    );
    // A redelivery is a duplicate of the failed record: no second claim.
    let again = w
        .gate
        .handle_batch(event("m-2", Some(&body)), &invocation(&w, "inv-2"))
        .await;
    assert_eq!(
        again.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Failed)
    );
}

#[tokio::test]
async fn an_unreadable_container_in_the_answer_is_routed_as_invalid() {
    let (w, _terminal) = scripted_world(|_| {
        json(
            201,
            json!({"slot_id": "S-1", "equipment_number": "CSQU3054383\u{0}"}),
        )
    })
    .await;
    let report = w
        .gate
        .handle_batch(
            event("m-1", Some(&good().to_string())),
            &invocation(&w, "inv-1"),
        )
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::ServerAnswerInvalid)
    );
    let detail = &w.manual.items()[0].detail;
    assert!(!detail.contains('\u{0}'), "{detail:?}");
}

/// A terminal that answers garbage forever: every redelivery asks again with the same key and the
/// same bytes (never a new key), the reconciler's re-send under that key is transient too, and
/// once the key's retention has passed a person gets the record, told that whether the effect
/// happened is unknown (a slot may exist). Bounded, not silent.
#[tokio::test]
async fn garbage_forever_is_bounded_and_ends_with_a_person() {
    let (w, terminal) = scripted_world(|seen| {
        if seen.method == "POST" {
            raw(201, "OK")
        } else {
            raw(200, "OK")
        }
    })
    .await;
    // A window two days ahead, so it is still open when the message is redriven a day later.
    let body = with(
        "preferred_window",
        json!({"start": "2026-06-03T08:00:00Z", "end": "2026-06-03T10:00:00Z"}),
    );
    // SQS redelivers up to maxReceiveCount (5 by default), then the message is in the DLQ.
    for delivery in 0..5 {
        w.clock.advance_ms(180_000);
        let report = w
            .gate
            .handle_batch(
                event("m-1", Some(&body)),
                &invocation(&w, &format!("inv-{delivery}")),
            )
            .await;
        assert!(
            matches!(report.records[0].outcome, RecordOutcome::Retry(_)),
            "{:?}",
            report.records[0].outcome
        );
    }
    let claims: Vec<Seen> = terminal
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .collect();
    assert_eq!(claims.len(), 5);
    for c in &claims {
        assert_eq!(
            c.header("idempotency-key"),
            claims[0].header("idempotency-key")
        );
        assert_eq!(c.body, claims[0].body);
    }
    // The reconciler, within the retention: it re-sends the stored bytes under the same key (the
    // server's replay is the lookup, `gate::decision`); the answer is unreadable again: transient.
    let config = ReconcilerConfig::default();
    w.clock.advance_ms(600_000);
    let run = w
        .gate
        .reconcile(w.store.as_ref(), &config, &invocation(&w, "rec-1"))
        .await;
    assert_eq!(run.transient, 1, "{run:?}");
    assert_eq!(run.manual, 0, "{run:?}");
    let claims: Vec<Seen> = terminal
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .collect();
    assert_eq!(
        claims.len(),
        6,
        "five deliveries and the reconciler's re-send"
    );
    assert_eq!(
        claims[5].header("idempotency-key"),
        claims[0].header("idempotency-key")
    );
    assert_eq!(claims[5].body, claims[0].body);
    // Past the retention (24 h minus the 1 h margin): a person gets it.
    w.clock.set_ms(T0 + 23 * 3_600_000 + 600_000);
    let run = w
        .gate
        .reconcile(w.store.as_ref(), &config, &invocation(&w, "rec-2"))
        .await;
    assert_eq!(run.manual, 1, "{run:?}");
    let pk = record_pk(INTEGRATION, &event_key_of("PCS-1", CONTAINER));
    let record = w.store.get(&pk).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Manual);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::PastKeyRetention);
    assert!(
        items[0].detail.contains("happened is unknown"),
        "{}",
        items[0].detail
    );
    // The message redriven from the DLQ later is a duplicate: no claim under a forgotten key.
    let redriven = w
        .gate
        .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-late"))
        .await;
    assert_eq!(
        redriven.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Manual)
    );
    let posts = terminal
        .seen()
        .into_iter()
        .filter(|s| s.method == "POST")
        .count();
    assert_eq!(posts, 6, "no claim after the retention");
}
