//! The hostile terminal: answers each container's mode, echoing the secrets in its form.

use super::*;

/// The terminal's state: each container's mode, each key's container, calls per container.
#[derive(Default)]
pub(crate) struct Terminal {
    pub(crate) modes: HashMap<String, (usize, Kind)>,
    pub(crate) keys: HashMap<String, String>,
    pub(crate) posts: HashMap<String, usize>,
}

pub(crate) fn json_answer(status: u16, value: Value) -> Answer {
    (
        status,
        vec![("content-type", "application/json".to_string())],
        value.to_string().into_bytes(),
    )
}

pub(crate) fn hostile(state: Arc<Mutex<Terminal>>) -> impl Fn(&Seen) -> Answer + Send + Sync {
    move |seen| {
        let mut t = state.lock().unwrap();
        let token = seen
            .header("authorization")
            .unwrap_or("")
            .trim_start_matches("Bearer ")
            .to_string();
        if seen.method == "GET" {
            let key = seen.uri.split("idempotency_key=").nth(1).unwrap_or("");
            let Some(c) = t.keys.get(key).cloned() else {
                return raw(404, "unknown key");
            };
            let (n, kind) = t.modes[&c];
            let f = lossy(&both(n, b"", &token));
            return match kind {
                // The token's form alone as the id (the claims' ids carry the PIN's).
                Kind::Lookup200Id => json_answer(
                    200,
                    json!({"slot": {"slot_id": lossy(&form(n, &token, token.as_bytes()))}}),
                ),
                Kind::Lookup200Fields => json_answer(
                    200,
                    json!({"slot": {"slot_id": format!("S-L{n}"), "equipment_number": c,
                                    "pin": f, "note": f}}),
                ),
                Kind::Lookup200Subject => json_answer(
                    200,
                    json!({"slot": {"slot_id": format!("S-O{n}"), "equipment_number": f}}),
                ),
                Kind::Lookup404 => json_answer(404, json!({"type": "not_found", "detail": f})),
                _ => (500, vec![], both(n, b"", &token)),
            };
        }
        let request: Value = serde_json::from_slice(&seen.body).unwrap_or(Value::Null);
        let c = request["equipment_number"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let Some(&(n, kind)) = t.modes.get(&c) else {
            return raw(400, "unknown container");
        };
        if let Some(key) = seen.header("idempotency-key") {
            t.keys.insert(key.trim_matches('"').to_string(), c.clone());
        }
        let calls = {
            let calls = t.posts.entry(c.clone()).or_default();
            *calls += 1;
            *calls
        };
        let body = both(n, &seen.body, &token);
        let f = lossy(&body);
        // The PIN's form alone as a slot id: many fit the default format (hex, base64 without
        // padding, separators changed), so the second line must refuse them.
        let id = lossy(&form(n, PIN, &seen.body));
        let html = |status: u16| {
            (
                status,
                vec![("content-type", "text/html".to_string())],
                body.clone(),
            )
        };
        match kind {
            Kind::Claim201Id => json_answer(201, json!({"slot_id": id, "equipment_number": c})),
            Kind::Claim201Fields => json_answer(
                201,
                json!({"slot_id": format!("S-F{n}"), "equipment_number": c, "pin": f,
                       "note": f, "request": lossy(&seen.body)}),
            ),
            Kind::Claim201Subject => json_answer(
                201,
                json!({"slot_id": format!("S-S{n}"), "equipment_number": f}),
            ),
            Kind::Claim201NotJson => html(201),
            Kind::Claim303 => (
                303,
                vec![(
                    "location",
                    format!(
                        "https://evil.example/?q={}",
                        f.bytes().map(|b| format!("%{b:02X}")).collect::<String>()
                    )
                    .chars()
                    .take(4_000)
                    .collect(),
                )],
                body.clone(),
            ),
            Kind::Claim400 => json_answer(
                400,
                json!({"type": "invalid_request", "title": f, "detail": f}),
            ),
            Kind::Claim401 => html(401),
            Kind::Claim409Mismatch => {
                json_answer(409, json!({"type": "idempotency_mismatch", "detail": f}))
            }
            Kind::Claim409InFlight => json_answer(
                409,
                json!({"type": "idempotency_key_in_flight", "detail": f}),
            ),
            Kind::Claim422 => html(422),
            Kind::Claim500 => html(500),
            Kind::Replay201Fields if calls > 1 => json_answer(
                201,
                json!({"slot_id": format!("S-R{n}"), "equipment_number": c, "note": f}),
            ),
            Kind::Replay201Id if calls > 1 => {
                json_answer(201, json!({"slot_id": id, "equipment_number": c}))
            }
            Kind::Replay201Fields | Kind::Replay201Id => html(504),
            // Lookup kinds: transient until the lookup.
            _ => html(503),
        }
    }
}
