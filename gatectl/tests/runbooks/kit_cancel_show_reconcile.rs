//! The runbook cases on a record a person acts on: a cancel, a multi-effect key shown with its
//! ids, and `reconcile KEY`.

use super::*;

/// Cancel: `failed` with the reason, out of the `InFlight` index, the stored request in the
/// manual queue, an audit line; `list manual` shows the item without the request's secrets.
pub async fn a_cancel_marks_failed_leaves_the_index_and_keeps_the_history<F: Fixture>(
    backend: Backend,
) {
    let w = World::<F>::new("gc-cancel", backend).await;
    let record = w.strand(3, "inv-dead#1", T0 + 1_000).await;
    w.clock.advance_ms(20 * 60_000);
    let listed = w
        .run(Action::ListInFlight {
            older_than_ms: 10 * 60_000,
        })
        .await
        .unwrap();
    assert_eq!(listed.json.as_array().unwrap().len(), 1);
    assert_eq!(listed.json[0]["event_key"], record.event_key);
    assert_eq!(listed.json[0]["age_s"], 1200);

    let out = w
        .run(Action::Cancel {
            key: record.event_key.clone(),
            reason: "done by phone".into(),
        })
        .await
        .unwrap();
    assert_eq!(out.json["outcome"], "Manual");
    let after = w.get(&record.pk).await;
    assert_eq!(after.status, RecordStatus::Failed);
    assert_eq!(
        after.error.as_deref(),
        Some("cancelled by gatectl:alice: done by phone")
    );
    assert!(after.inflight_shard.is_none() && !after.route_pending);
    let history = w.store.history(&record.pk).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        history[0].detail,
        format!(
            "marked failed and sent to the {}: done by phone",
            w.words().manual_queue
        )
    );
    let listed = w
        .run(Action::ListInFlight { older_than_ms: 0 })
        .await
        .unwrap();
    assert_eq!(listed.json, json!([]));

    let manual = w.run(Action::ListManual).await.unwrap();
    assert_eq!(manual.json.as_array().unwrap().len(), 1, "{}", manual.json);
    assert_eq!(manual.json[0]["reason"], "cancelled");
    assert_eq!(manual.json[0]["event_key"], record.event_key);
    assert_eq!(
        manual.json[0]["original_body_bytes"],
        json!(record.request.len())
    );
    w.assert_no_secret(&manual);
    let msgs = w
        .ctl
        .sqs
        .receive_message()
        .queue_url(&w.manual_url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let item: Value = serde_json::from_str(msgs.messages()[0].body().unwrap()).unwrap();
    assert_eq!(
        item["original_body"],
        String::from_utf8(record.request.clone()).unwrap()
    );

    let err = w
        .run(finish(&record.event_key, Some("S-1")))
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), exit::REFUSED);
    assert!(
        err.to_string()
            .contains("the record is failed, not in_flight (cancelled by gatectl:alice"),
        "{err}"
    );
}

/// DistinctEffectIds: the server returned two ids for one key. The multi-effect list shows the
/// key with both and the one to cancel, in the integration's words; `show` by the event's source
/// id finds it, and an unknown one is not found.
pub async fn a_multi_effect_key_is_shown_with_its_ids<F: Fixture>(backend: Backend) {
    let w = World::<F>::new("gc-multi", backend).await;
    let record = w.strand(4, "inv-1#0", T0 + 1_000).await;
    let row = w.ctl.gate.integration.business_row(&record, "EFFECT-A", T0);
    let committed = w
        .store
        .commit(&record.pk, "inv-1#0", "EFFECT-A", &row, T0)
        .await
        .unwrap();
    assert_eq!(committed, gate::store::CommitOutcome::Committed);
    w.store
        .record_effect_id(&record.pk, "EFFECT-B", T0 + 5_000)
        .await
        .unwrap();
    let words = w.words().clone();
    let listed = w.run(Action::ListMultiEffect).await.unwrap();
    let mut row = serde_json::Map::new();
    row.insert("event_key".into(), json!(record.event_key));
    row.insert(words.subject.into(), json!(words.subject_of(&record)));
    row.insert("status".into(), json!("committed"));
    row.insert(words.effect_id_key.into(), json!("EFFECT-A"));
    row.insert(words.effect_ids_key(), json!(["EFFECT-A", "EFFECT-B"]));
    row.insert("cancel".into(), json!(["EFFECT-B"]));
    assert_eq!(listed.json, json!([Value::Object(row)]));
    assert!(listed.text.contains("EFFECT-B"));
    assert!(
        listed
            .text
            .contains(&format!("cancel the others at the {}", words.server)),
        "{}",
        listed.text
    );

    let shown = w.run(Action::Show(w.fixture.source_id(4))).await.unwrap();
    assert_eq!(shown.json.as_array().unwrap().len(), 1);
    assert_eq!(
        shown.json[0][words.effect_ids_key()],
        json!(["EFFECT-A", "EFFECT-B"])
    );
    assert_eq!(
        shown.json[0][words.business_row_key][words.effect_id_key],
        "EFFECT-A"
    );
    // The row's time in the integration's words (truck-slot: `booked_at_ms`, "booked").
    let written_at = &shown.json[0][words.business_row_key][words.written_at_key()];
    assert!(
        written_at.as_i64().is_some_and(|ms| ms > 0),
        "{}",
        shown.json
    );
    let line = format!("{} EFFECT-A {} ", words.effect, words.written);
    assert!(shown.text.contains(&line), "{line:?} not in {}", shown.text);
    let none = w
        .run(Action::Show(w.fixture.source_id(404)))
        .await
        .unwrap_err();
    assert_eq!(none.exit_code(), exit::NOT_FOUND);
}

/// `reconcile KEY`: one pass for one stranded record, now; the effect made with the same key.
pub async fn reconcile_one_key_now<F: Fixture>(backend: Backend) {
    let w = World::<F>::new("gc-reconcile", backend).await;
    let record = w.strand(5, "inv-dead#2", T0 + 1_000).await;
    w.clock.advance_ms(60_000);
    let out = w
        .run(Action::Reconcile(Some(record.event_key.clone())))
        .await
        .unwrap();
    assert_eq!(out.code, exit::OK);
    assert_eq!(out.json["report"]["reconciled"], 1);
    assert_eq!(out.json["status"], "committed");
    assert!(
        out.json[w.words().effect_id_key].is_string(),
        "{}",
        out.json
    );
    assert_eq!(w.fixture.effects_made(), 1);
    let history = w.store.history(&record.pk).await.unwrap();
    assert_eq!(history[0].action, "reconcile");
    assert_eq!(history[0].detail, "1 committed");
}
