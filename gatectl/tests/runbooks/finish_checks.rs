//! truck-slot's `finish` checks the slot id it is given: again under its lease (a slow holder
//! may record one meanwhile), and against the format the gate takes from a terminal.

use super::*;

/// The slow holder, while the operator reads the plan: records the slot id its claim returned
/// (`ADD effect_ids`, which no lease fences: a slot id is never lost), then lets the operator go on.
struct SlowHolderRecords {
    store: Arc<DynamoStore>,
    pk: String,
    effect_id: String,
    now_ms: i64,
}

impl Confirm for SlowHolderRecords {
    fn confirm(&mut self, _plan: &str) -> bool {
        let (store, pk, slot, now) = (
            self.store.clone(),
            self.pk.clone(),
            self.effect_id.clone(),
            self.now_ms,
        );
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async move {
                store.record_effect_id(&pk, &slot, now).await.unwrap();
            })
        });
        true
    }
}

/// FINDING (break-16-17): `finish --slot-id` checked the given slot id against the slot ids
/// the record held when gatectl read it, not when the operator's take-over held the lease. A
/// holder whose lease had expired can still record the slot its late claim returned (the slot-id
/// `ADD` is not fenced) while the operator reads the prompt; the operator then committed the
/// other slot, leaving the terminal's real slot unbooked in the TMS and two slots held. The
/// slot ids are checked again under the operator's lease, and the lease handed back on refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_rechecks_the_slot_ids_under_its_lease() {
    let w = World::new("gc-finish-race").await;
    let record = w
        .strand(
            &World::body("N-RACE", "CSQU3054383"),
            "inv-slow#0",
            T0 + 1_000,
        )
        .await;
    w.clock.advance_ms(15 * 60_000);
    let mut slow = SlowHolderRecords {
        store: w.store.clone(),
        pk: record.pk.clone(),
        effect_id: "SLOT-LATE".into(),
        now_ms: w.clock.now_ms(),
    };
    let err = w
        .ctl
        .run(
            &finish(&record.event_key, Some("SLOT-TYPED")),
            false,
            &mut slow,
        )
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), exit::REFUSED, "{err}");
    assert!(err.to_string().contains("SLOT-LATE"), "{err}");
    let after = w.get(&record.pk).await;
    assert_eq!(after.status, RecordStatus::InFlight);
    assert_eq!(after.effect_id, None);
    assert!(w
        .store
        .business_row(&record.event_key)
        .await
        .unwrap()
        .is_none());
    // The lease is handed back: the reconciler (or `finish --slot-id SLOT-LATE`) may go on now.
    assert!(!after.lease_is_live(w.clock.now_ms()), "{after:?}");
}

/// FINDING (break-16-17): `finish --slot-id` committed any text as the slot id: an empty
/// argument, a pasted line break (`"S-1\n"`, which is not the terminal's `S-1`), a paragraph.
/// The gate refuses such slot ids from a terminal; from an operator they are refused too, and
/// nothing is written.
#[tokio::test]
async fn finish_refuses_a_slot_id_the_gate_would_not_take_from_a_terminal() {
    let w = World::new("gc-finish-slotid").await;
    let record = w
        .strand(
            &World::body("N-SLOT", "CSQU3054383"),
            "inv-dead#0",
            T0 + 1_000,
        )
        .await;
    w.clock.advance_ms(15 * 60_000);
    for bad in [
        String::new(),
        "   ".to_string(),
        "S-1\n".to_string(),
        "S-1\u{7}".to_string(),
        "S".repeat(truck_slot::terminal::MAX_SLOT_ID_CHARS + 1),
    ] {
        let err = w
            .run(finish(&record.event_key, Some(&bad)))
            .await
            .unwrap_err();
        assert_eq!(err.exit_code(), exit::REFUSED, "{bad:?}: {err}");
        assert_eq!(w.get(&record.pk).await, record, "{bad:?}: nothing written");
    }
    assert!(w.store.history(&record.pk).await.unwrap().is_empty());
    let done = w
        .run(finish(&record.event_key, Some("ECTD-20260601-0800-0042")))
        .await
        .unwrap();
    assert_eq!(done.json["outcome"], "Committed");
}
