//! Printing replay reports: one column, or naive and gated side by side.

use crate::replay::Report;
use crate::signals::SignalSummary;

/// The report's rows: label and value.
fn rows(r: &Report) -> Vec<(&'static str, String)> {
    let mut rows = vec![("notifications", r.notifications.to_string())];
    if let Some(w) = &r.webhook {
        rows.extend([
            ("webhooks sent", w.webhooks.to_string()),
            ("webhook attempts", w.attempts.to_string()),
            ("answered 503 (queue failed)", w.answered_5xx.to_string()),
            ("202s lost (sender retried)", w.responses_lost.to_string()),
            ("webhooks abandoned", w.abandoned.to_string()),
        ]);
    }
    rows.extend(vec![
        ("SQS messages sent", r.messages.to_string()),
        ("deliveries to the handler", r.deliveries.to_string()),
        ("slots the terminal issued", r.slots_issued.to_string()),
        (
            "containers with a slot",
            r.containers_with_a_slot.to_string(),
        ),
        (
            "most slots for one container",
            r.max_slots_per_container.to_string(),
        ),
        (
            "containers with extra slots",
            r.containers_with_extra_slots.to_string(),
        ),
        ("TMS bookings", r.tms_bookings.to_string()),
        ("duplicates suppressed", r.duplicates_suppressed.to_string()),
        ("mismatches", r.mismatches.to_string()),
        ("routed to manual", r.routed_to_manual.to_string()),
        ("still in_flight", r.still_in_flight.to_string()),
        ("leases taken over", r.taken_over.to_string()),
        ("batch item failures", r.batch_item_failures.to_string()),
        ("worker crashes", r.crashes.to_string()),
        ("dead-lettered", r.dead_lettered.to_string()),
        ("reconciled", r.reconciled.to_string()),
        ("simulated seconds", r.simulated_seconds.to_string()),
        (
            "duplicate ratio",
            signal(r, |s| format!("{:.1} %", s.duplicate_ratio * 100.0)),
        ),
        (
            "oldest in_flight, max (s)",
            signal(r, |s| s.max_oldest_in_flight_age_s.to_string()),
        ),
        (
            "distinct slot ids per key, max",
            signal(r, |s| s.max_distinct_effect_ids.to_string()),
        ),
        (
            "natural-key collisions",
            signal(r, |s| s.natural_key_collisions.to_string()),
        ),
        ("alarms fired", signal(r, alarms)),
    ]);
    rows
}

fn signal(r: &Report, f: impl Fn(&SignalSummary) -> String) -> String {
    r.signals.as_ref().map_or_else(|| "-".to_string(), f)
}

fn alarms(s: &SignalSummary) -> String {
    if s.alarms.is_empty() {
        "none".to_string()
    } else {
        s.alarms
            .iter()
            .map(|a| format!("{} at {}", a.alarm, elapsed(a.at_s)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Seconds after the start as `+HhMM` (`+3d04h10` past a day).
pub fn elapsed(at_s: i64) -> String {
    let (d, h, m) = (at_s / 86_400, at_s % 86_400 / 3_600, at_s % 3_600 / 60);
    if d > 0 {
        format!("+{d}d{h:02}h{m:02}")
    } else {
        format!("+{h}h{m:02}")
    }
}

/// The manual-queue items by reason, one line each (`manual, <reason code>   N`); none when the
/// queue is empty.
fn manual_lines(r: &Report, column: &str) -> String {
    r.manual_reasons
        .iter()
        .map(|(code, n)| {
            let label = format!("manual, {code}");
            format!("  {label:<32} {column}{n:>8}\n")
        })
        .collect()
}

/// Per terminal (a replay of several): one line each; none for one terminal.
fn terminal_lines(r: &Report) -> String {
    let mut out = String::new();
    if r.per_terminal.is_empty() {
        return out;
    }
    out.push_str(&format!(
        "  {:<10} {:<16} {:>5} {:>6} {:>6} {:>12} {:>9} {:>7} {:>13}\n",
        "terminal",
        "api",
        "keys",
        "notif.",
        "slots",
        "max/contain.",
        "bookings",
        "manual",
        "calls at once"
    ));
    for t in &r.per_terminal {
        out.push_str(&format!(
            "  {:<10} {:<16} {:>5} {:>6} {:>6} {:>12} {:>9} {:>7} {:>13}\n",
            t.terminal,
            t.api,
            if t.supports_idempotency_key {
                "yes"
            } else {
                "no"
            },
            t.notifications,
            t.slots_issued,
            t.max_slots_per_container,
            t.tms_bookings,
            t.manual_items,
            format!("{} of {}", t.most_calls_at_once, t.max_concurrent_calls),
        ));
    }
    out
}

/// One report as a table.
pub fn render(r: &Report) -> String {
    let mut out = format!("{} ({:?} handler)\n", r.scenario, r.handler);
    for (label, value) in rows(r) {
        out.push_str(&format!("  {label:<32} {value:>8}\n"));
    }
    out.push_str(&manual_lines(r, ""));
    out.push_str(&terminal_lines(r));
    out
}

/// Two reports side by side.
pub fn render_side_by_side(left: &Report, right: &Report) -> String {
    let mut out = format!(
        "{}\n  {:<32} {:>8} {:>8}\n",
        left.scenario, "", "naive", "gated"
    );
    for ((label, a), (_, b)) in rows(left).into_iter().zip(rows(right)) {
        out.push_str(&format!("  {label:<32} {a:>8} {b:>8}\n"));
    }
    // Manual reasons, naive column first (the naive handler routes nothing), then gated.
    out.push_str(&manual_lines(left, ""));
    out.push_str(&manual_lines(right, &" ".repeat(9)));
    out
}
