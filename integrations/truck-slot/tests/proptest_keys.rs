//! Properties of step 1: the event key, the fingerprint and the stored claim request are stable
//! under any JSON re-serialisation of the same body (key order, whitespace, number forms such as
//! `25000` / `25000.0` / `2.5E4`, string escapes, equipment number and time-zone spellings), and
//! the fingerprint changes when any business field changes (the event key too when the
//! notification id or the container changes).

use gate::consumer::DerivedKeys;
use proptest::prelude::*;
use truck_slot::derive_keys;
use truck_slot::iso6346::check_digit;
use truck_slot::notification::parse_notification;

/// 2025-06-01T00:00:00Z: before every generated window.
const NOW: i64 = 1_748_736_000_000;
const HOUR: i64 = 3_600_000;

fn terminals() -> Vec<String> {
    vec!["ECT-DELTA".to_string(), "APMT-MV2".to_string()]
}

/// A JSON value whose numbers remember their exact decimal value, so they can be written in
/// several forms.
#[derive(Debug, Clone, PartialEq)]
enum J {
    Null,
    Bool(bool),
    /// An integer, at most 2^53 in magnitude (exact in an f64).
    Int(i64),
    /// `n / 10^k`.
    Dec(i64, u32),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

fn any_j() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(J::Int),
        (-1_000_000_000i64..1_000_000_000, 1u32..6).prop_map(|(n, k)| J::Dec(n, k)),
        any::<String>().prop_map(J::Str),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(J::Arr),
            prop::collection::btree_map("[a-z]{1,8}", inner, 0..5)
                .prop_map(|m| J::Obj(m.into_iter().collect())),
        ]
    })
}

/// How to write JSON: a stream of choices consumed while writing.
struct Style {
    choices: Vec<u8>,
    at: usize,
}

impl Style {
    fn pick(&mut self, n: u8) -> u8 {
        if self.choices.is_empty() || n == 0 {
            return 0;
        }
        let c = self.choices[self.at % self.choices.len()];
        self.at += 1;
        c % n
    }

    fn ws(&mut self) -> &'static str {
        ["", " ", "\n  ", "\t", ""][self.pick(5) as usize]
    }
}

fn write_str(s: &str, style: &mut Style, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if style.pick(2) == 1 => out.push_str("\\/"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0xFFFF && style.pick(4) == 0 => {
                if style.pick(2) == 0 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\u{:04X}", c as u32));
                }
            }
            c if (c as u32) > 0xFFFF && style.pick(3) == 0 => {
                // A surrogate pair.
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{:04x}", u));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The digits of `|n|` with a decimal point `k` places from the right.
fn decimal(n: i64, k: u32) -> String {
    let sign = if n < 0 { "-" } else { "" };
    let digits = n.unsigned_abs().to_string();
    let k = k as usize;
    let padded = if digits.len() <= k {
        format!("{}{digits}", "0".repeat(k + 1 - digits.len()))
    } else {
        digits
    };
    let (int, frac) = padded.split_at(padded.len() - k);
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

fn write_number(n: i64, k: u32, style: &mut Style, out: &mut String) {
    let e = ["e", "E", "e+", "E+"][style.pick(4) as usize];
    let form = style.pick(6);
    let s = match form {
        // As is: 25000 or 2.5.
        0 => decimal(n, k),
        // Trailing zeros: 25000.0, 2.50.
        1 if k == 0 => format!("{n}.0"),
        1 => format!("{}00", decimal(n, k)),
        // Mantissa and exponent: 25E3 (k = 0) or 25E-1.
        2 => {
            if k == 0 {
                let digits = n.unsigned_abs().to_string();
                let trimmed = digits.trim_end_matches('0');
                let zeros = digits.len() - trimmed.len();
                if trimmed.is_empty() {
                    format!("0{e}0")
                } else {
                    let sign = if n < 0 { "-" } else { "" };
                    format!("{sign}{trimmed}{e}{zeros}")
                }
            } else {
                format!("{n}{}-{k}", &e[..1])
            }
        }
        // Scientific with one digit before the point: 2.5E4.
        3 => {
            let sign = if n < 0 { "-" } else { "" };
            let digits = n.unsigned_abs().to_string();
            let exp = digits.len() as i64 - 1 - k as i64;
            let frac = digits[1..].trim_end_matches('0');
            let mantissa = if frac.is_empty() {
                digits[..1].to_string()
            } else {
                format!("{}.{frac}", &digits[..1])
            };
            if exp < 0 {
                format!("{sign}{mantissa}{}{exp}", &e[..1])
            } else {
                format!("{sign}{mantissa}{e}{exp}")
            }
        }
        // Negative zero for zero.
        4 if n == 0 => "-0.0".to_string(),
        _ => decimal(n, k),
    };
    out.push_str(&s);
}

fn write_j(j: &J, style: &mut Style, out: &mut String) {
    match j {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Int(n) => write_number(*n, 0, style, out),
        J::Dec(n, k) => write_number(*n, *k, style, out),
        J::Str(s) => write_str(s, style, out),
        J::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let ws = style.ws();
                out.push_str(ws);
                write_j(item, style, out);
            }
            out.push(']');
        }
        J::Obj(fields) => {
            let mut order: Vec<&(String, J)> = fields.iter().collect();
            match style.pick(3) {
                1 => order.reverse(),
                2 if order.len() > 1 => {
                    let r = style.pick(order.len() as u8) as usize;
                    order.rotate_left(r);
                }
                _ => {}
            }
            out.push('{');
            for (i, (k, v)) in order.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let ws = style.ws();
                out.push_str(ws);
                write_str(k, style, out);
                let ws = style.ws();
                out.push_str(ws);
                out.push(':');
                let ws = style.ws();
                out.push_str(ws);
                write_j(v, style, out);
            }
            let ws = style.ws();
            out.push_str(ws);
            out.push('}');
        }
    }
}

/// A notification's business fields.
#[derive(Debug, Clone)]
struct Fields {
    notification_id: String,
    owner_serial: String,
    start_ms: i64,
    end_ms: i64,
    terminal: usize,
    pin: String,
    extra: Vec<(String, J)>,
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        "[A-Za-z0-9][A-Za-z0-9-]{0,19}",
        "[A-Z]{3}[UJZ][0-9]{6}",
        0i64..24 * 30,
        1i64..12,
        0usize..2,
        "[0-9]{4,8}",
        prop::collection::btree_map("[a-z_]{1,12}", any_j(), 0..5),
    )
        .prop_map(|(id, ten, start_h, len_h, terminal, pin, extra)| Fields {
            notification_id: id,
            owner_serial: ten,
            start_ms: NOW + HOUR + start_h * HOUR,
            end_ms: NOW + HOUR + (start_h + len_h) * HOUR,
            terminal,
            pin,
            extra: extra
                .into_iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "pin" | "terminal" | "equipment_number" | "preferred_window"
                    )
                })
                .collect(),
        })
}

fn container(f: &Fields) -> String {
    let digit = check_digit(&f.owner_serial).unwrap_or(0);
    format!("{}{digit}", f.owner_serial)
}

fn time(ms: i64, style: &mut Style) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
    match style.pick(4) {
        0 => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        1 => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        2 => {
            let offset_h = i64::from(style.pick(27)) - 12;
            let local = t + chrono::Duration::hours(offset_h);
            let sign = if offset_h < 0 { '-' } else { '+' };
            format!(
                "{}{sign}{:02}:00",
                local.format("%Y-%m-%dT%H:%M:%S"),
                offset_h.abs()
            )
        }
        _ => t.format("%Y-%m-%dt%H:%M:%Sz").to_string(),
    }
}

/// Writes the body for `f` in the style `choices` pick.
fn body(f: &Fields, choices: Vec<u8>) -> String {
    let mut style = Style { choices, at: 0 };
    let canonical = container(f);
    let number = match style.pick(4) {
        0 => canonical.clone(),
        1 => canonical.to_ascii_lowercase(),
        2 => format!(
            "{} {}-{}",
            &canonical[..4],
            &canonical[4..10],
            &canonical[10..]
        ),
        _ => format!("{}-{}", &canonical[..4], &canonical[4..]),
    };
    let window = J::Obj(vec![
        ("start".into(), J::Str(time(f.start_ms, &mut style))),
        ("end".into(), J::Str(time(f.end_ms, &mut style))),
    ]);
    let mut all = vec![
        (
            "notificationId".to_string(),
            J::Str(f.notification_id.clone()),
        ),
        ("equipment_number".to_string(), J::Str(number)),
        ("preferred_window".to_string(), window),
        (
            "terminal".to_string(),
            J::Str(terminals()[f.terminal].clone()),
        ),
        ("pin".to_string(), J::Str(f.pin.clone())),
    ];
    all.extend(f.extra.iter().cloned());
    let mut out = String::new();
    let ws = style.ws();
    out.push_str(ws);
    write_j(&J::Obj(all), &mut style, &mut out);
    let ws = style.ws();
    out.push_str(ws);
    out
}

fn keys(body: &str) -> DerivedKeys {
    let n = parse_notification(body, NOW, &terminals()).unwrap_or_else(|e| panic!("{e}: {body}"));
    derive_keys(&n).expect("keys")
}

/// One business change.
#[derive(Debug, Clone)]
enum Change {
    NotificationId,
    Container,
    Pin,
    WindowStart,
    WindowEnd,
    Terminal,
    ExtraValue(usize),
    ExtraAdded,
    ExtraRemoved(usize),
}

fn change_j(j: &J) -> J {
    match j {
        J::Null => J::Int(0),
        J::Bool(b) => J::Bool(!b),
        J::Int(n) => J::Int(if *n == 1 << 53 { n - 1 } else { n + 1 }),
        J::Dec(n, k) => J::Dec(n + 1, *k),
        J::Str(s) => J::Str(format!("{s}x")),
        J::Arr(items) => {
            let mut items = items.clone();
            items.push(J::Null);
            J::Arr(items)
        }
        J::Obj(fields) => {
            let mut fields = fields.clone();
            fields.retain(|(k, _)| k != "~");
            fields.push(("~".into(), J::Null));
            J::Obj(fields)
        }
    }
}

fn apply(f: &Fields, change: &Change) -> Option<Fields> {
    let mut g = f.clone();
    match change {
        Change::NotificationId => g.notification_id.push('7'),
        Change::Container => {
            let last = g.owner_serial.pop()?;
            let d = last.to_digit(10)?;
            g.owner_serial.push(char::from_digit((d + 1) % 10, 10)?);
        }
        Change::Pin => g.pin.push('1'),
        Change::WindowStart => g.start_ms -= HOUR,
        Change::WindowEnd => g.end_ms += HOUR,
        Change::Terminal => g.terminal = 1 - g.terminal,
        Change::ExtraValue(i) => {
            let len = g.extra.len();
            let (_, v) = g.extra.get_mut(i % len.max(1))?;
            *v = change_j(v);
        }
        Change::ExtraAdded => {
            if g.extra.iter().any(|(k, _)| k == "added_field") {
                return None;
            }
            g.extra.push(("added_field".into(), J::Null));
        }
        Change::ExtraRemoved(i) => {
            if g.extra.is_empty() {
                return None;
            }
            let len = g.extra.len();
            g.extra.remove(i % len);
        }
    }
    Some(g)
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        Just(Change::NotificationId),
        Just(Change::Container),
        Just(Change::Pin),
        Just(Change::WindowStart),
        Just(Change::WindowEnd),
        Just(Change::Terminal),
        any::<usize>().prop_map(Change::ExtraValue),
        Just(Change::ExtraAdded),
        any::<usize>().prop_map(Change::ExtraRemoved),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn keys_and_fingerprint_are_stable_under_reserialisation(
        f in fields(),
        a in prop::collection::vec(any::<u8>(), 0..64),
        b in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let (one, two) = (body(&f, a), body(&f, b));
        let (k1, k2) = (keys(&one), keys(&two));
        prop_assert_eq!(&k1.event_key, &k2.event_key, "{}\n{}", one, two);
        prop_assert_eq!(&k1.fingerprint, &k2.fingerprint, "{}\n{}", one, two);
        prop_assert_eq!(&k1.op_key, &k2.op_key);
        prop_assert_eq!(&k1.request, &k2.request);
    }

    #[test]
    fn the_fingerprint_changes_with_any_business_field(
        f in fields(),
        change in change(),
        a in prop::collection::vec(any::<u8>(), 0..64),
        b in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let Some(g) = apply(&f, &change) else { return Ok(()) };
        let (before, after) = (keys(&body(&f, a)), keys(&body(&g, b)));
        prop_assert_ne!(&before.fingerprint, &after.fingerprint, "{:?}", change);
        let identity = matches!(change, Change::NotificationId | Change::Container);
        prop_assert_eq!(before.event_key != after.event_key, identity, "{:?}", change);
        prop_assert_eq!(before.op_key != after.op_key, identity);
    }
}

#[test]
fn known_number_forms_are_one_fingerprint() {
    let f = Fields {
        notification_id: "PCS-1".into(),
        owner_serial: "CSQU305438".into(),
        start_ms: NOW + 2 * HOUR,
        end_ms: NOW + 4 * HOUR,
        terminal: 0,
        pin: "4711".into(),
        extra: vec![("gross_mass_kg".into(), J::Int(25_000))],
    };
    let base = keys(&body(&f, vec![0]));
    for form in ["25000", "25000.0", "2.5E4", "2.5e+4", "25E3", "250000e-1"] {
        let text = body(&f, vec![0]).replace("25000", form);
        assert_eq!(keys(&text).fingerprint, base.fingerprint, "{text}");
    }
}
