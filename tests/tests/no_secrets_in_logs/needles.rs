//! The secrets, every form a server may echo them in ([`forms`]: any case, separators dropped or
//! changed, JSON `\u` escapes, percent-encoding, HTML references, hex, base64, full-width), and
//! the capture searched for them.

use super::*;

pub(crate) const PIN: &str = "PIN-XYZZY-7731";
pub(crate) const TOKEN: &str = "tok-PLUGH-0042";
/// The distinctive parts, searched for on their own as well (a secret cut in half, or escaped,
/// still shows one of them); [`needles`] adds their base64 forms.
pub(crate) const NEEDLES: &[&str] = &[PIN, TOKEN, "XYZZY", "PLUGH"];

pub(crate) fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// `secret` in every form the hostile terminal echoes it: as sent, lower and upper case,
/// separators dropped or changed, JSON `\u` escapes (one character, every character),
/// percent-encoded (separators, every character), HTML numeric references, hex, base64 (standard
/// and URL-safe, at another alignment) and full-width.
pub(crate) fn forms(secret: &str) -> Vec<String> {
    let mut chars = secret.chars();
    let first = chars.next().unwrap_or('?');
    let rest: String = chars.collect();
    let fullwidth: String = secret
        .chars()
        .map(|c| match c {
            '!'..='~' => char::from_u32(u32::from(c) - 0x21 + 0xFF01).unwrap_or(c),
            c => c,
        })
        .collect();
    let url_safe = base64(format!("xy{secret}").as_bytes())
        .replace('+', "-")
        .replace('/', "_");
    vec![
        secret.to_string(),
        secret.to_lowercase(),
        secret.to_uppercase(),
        secret.replace('-', ""),
        secret.replace('-', " "),
        secret.replace('-', "_").to_lowercase(),
        format!("\\u{:04x}{rest}", u32::from(first)),
        secret
            .chars()
            .map(|c| format!("\\u{:04X}", u32::from(c)))
            .collect(),
        secret.replace('-', "%2D"),
        secret.bytes().map(|b| format!("%{b:02X}")).collect(),
        format!("&#{};{rest}", u32::from(first)),
        secret.bytes().map(|b| format!("{b:02x}")).collect(),
        base64(secret.as_bytes()),
        url_safe,
        fullwidth,
        // The hostile-server forms, a representative subset (every form runs through the in-process
        // consumer and reconciler in `integrations/truck-slot/tests/hostile_server.rs`): mixed
        // case in hex and base64, numeric references without `;`, a named dash entity, a
        // separator between every character, a split value.
        hex_of(&mixed_case(secret)),
        base64(mixed_case(secret).as_bytes()),
        secret
            .chars()
            .map(|c| format!("&#{}", u32::from(c)))
            .collect(),
        secret.replace('-', "&minus;"),
        format!(
            "{{\"first\":\"{}\",\"rest\":\"{}\"}}",
            &secret[..6],
            &secret[6..]
        ),
    ]
}

/// `Pin-xyzzy-7731`: the first character upper case, the rest lower.
pub(crate) fn mixed_case(secret: &str) -> String {
    let lower = secret.to_lowercase();
    let mut chars = lower.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

pub(crate) fn hex_of(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Every text in which the hostile terminal echoes both secrets, each in every form.
pub(crate) fn echoed_forms() -> String {
    let mut all = forms(PIN);
    all.extend(forms(TOKEN));
    all.join(" | ")
}

/// Every needle: the secrets in every form of [`forms`], their distinctive parts, and for the
/// secrets the base64 of each at the three alignments it can have inside a longer base64 text
/// (DynamoDB binary attributes travel as base64): the characters that encode only the secret's
/// bits. [`assert_clean`] also searches the distinctive parts in any case.
pub(crate) fn needles() -> Vec<String> {
    let mut all: Vec<String> = NEEDLES.iter().map(|n| n.to_string()).collect();
    all.extend(forms(PIN));
    all.extend(forms(TOKEN));
    for secret in [PIN, TOKEN] {
        for offset in 0..3usize {
            let mut bytes = vec![0u8; offset];
            bytes.extend_from_slice(secret.as_bytes());
            let encoded = base64(&bytes);
            let start = (offset * 8).div_ceil(6);
            let end = (bytes.len() * 8) / 6;
            all.push(encoded[start..end].to_string());
        }
    }
    all
}

// --- the capture --------------------------------------------------------------------------------

#[derive(Clone, Default)]
pub(crate) struct Buffer(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
    type Writer = Buffer;
    fn make_writer(&'a self) -> Buffer {
        self.clone()
    }
}

/// The two captures: `functions` is what the functions log at TRACE (every event of every
/// target at TRACE, through the functions' own filter `gate_lambda::logging::allowed`), as text and as
/// JSON; `everything` is every event at TRACE without that filter, as JSON.
#[derive(Clone)]
pub(crate) struct Capture {
    pub(crate) functions: Buffer,
    pub(crate) everything: Buffer,
}

/// Installs, once per process, the subscriber of [`Capture`] (the `log` crate's records go
/// through it too).
pub(crate) fn capture() -> Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            use tracing_subscriber::layer::SubscriberExt;
            use tracing_subscriber::util::SubscriberInitExt;
            use tracing_subscriber::Layer;
            let capture = Capture {
                functions: Buffer::default(),
                everything: Buffer::default(),
            };
            let allowed = || tracing_subscriber::filter::filter_fn(gate_lambda::logging::allowed);
            tracing_subscriber::registry()
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(false)
                        .with_writer(capture.functions.clone())
                        .with_filter(allowed()),
                )
                .with(
                    tracing_subscriber::fmt::layer()
                        .json()
                        .with_writer(capture.functions.clone())
                        .with_filter(allowed()),
                )
                .with(
                    tracing_subscriber::fmt::layer()
                        .json()
                        .with_writer(capture.everything.clone()),
                )
                .with(tracing_subscriber::filter::LevelFilter::TRACE)
                .try_init()
                .expect("the only subscriber of this test process");
            capture
        })
        .clone()
}

pub(crate) fn assert_clean(what: &str, text: &str) {
    let lower = text.to_lowercase();
    for part in ["xyzzy", "plugh"] {
        if let Some(at) = lower.find(part) {
            let from = at.saturating_sub(300);
            panic!(
                "{what} holds {part:?} (any case): …{}…",
                text.get(from..(at + 300).min(text.len())).unwrap_or(text)
            );
        }
    }
    for needle in needles() {
        if let Some(at) = text.find(&needle) {
            let from = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let to = text[at..].find('\n').map_or(text.len(), |i| at + i);
            let line = &text[from..to];
            panic!(
                "{what} holds {needle:?}: {}",
                &line[..line.len().min(2_000)]
            );
        }
    }
}

/// Every line of the unfiltered capture that holds a secret comes from another crate below
/// `INFO` (the AWS SDK printing a request or response body, `lambda_runtime` printing the
/// event): exactly what the functions' filter drops. Returns how many such lines there were.
pub(crate) fn assert_only_filtered_lines_hold_secrets(everything: &str) -> usize {
    let needles = needles();
    let mut held = 0;
    for line in everything.lines() {
        if !needles.iter().any(|n| line.contains(n.as_str())) {
            continue;
        }
        held += 1;
        let event: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        let target = event["target"].as_str().unwrap_or("?");
        let level: tracing::Level = event["level"]
            .as_str()
            .and_then(|l| l.parse().ok())
            .unwrap_or(tracing::Level::ERROR);
        assert!(
            !gate_lambda::logging::allowed_target(target, level),
            "a secret in a line the functions would log ({target}, {level}): {}",
            &line[..line.len().min(2_000)]
        );
    }
    held
}
