//! Human units and tables.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};
use indicatif::{ProgressBar, ProgressStyle};

/// A duration in **seconds** as a person reads it: `45 s`, `12 min 5 s`, `3 h 20 min`,
/// `17 d 4 h`; negative durations get a leading `-`.
pub fn human_s(seconds: i64) -> String {
    if seconds < 0 {
        return format!("-{}", human_s(seconds.saturating_neg()));
    }
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds % 86_400 / 3_600,
        seconds % 3_600 / 60,
        seconds % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) if s == 0 => format!("{m} min"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) if m == 0 => format!("{h} h"),
        (0, _, _) => format!("{h} h {m} min"),
        _ if h == 0 => format!("{d} d"),
        _ => format!("{d} d {h} h"),
    }
}

/// A duration in **milliseconds** as [`human_s`] (rounded down to the second).
pub fn human_ms(ms: i64) -> String {
    human_s(ms / 1000)
}

/// A table with `header`, fitted to the terminal's width.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    t
}

/// A progress bar on stderr of `len` steps (a spinner when `len` is 0) saying `what`; hidden
/// unless `visible` (and, as indicatif does, when stderr is not a terminal).
pub fn progress(len: u64, what: &str, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = if len == 0 {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::new(len)
    };
    let style = if len == 0 {
        ProgressStyle::with_template("{spinner} {msg}: {pos} {elapsed}")
    } else {
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}")
    };
    if let Ok(style) = style {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

/// The first `n` characters of `text`, with `…` when cut.
pub fn cut(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(n.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_human_units() {
        assert_eq!(human_s(45), "45 s");
        assert_eq!(human_s(600), "10 min");
        assert_eq!(human_s(725), "12 min 5 s");
        assert_eq!(human_s(12_000), "3 h 20 min");
        assert_eq!(human_s(7_200), "2 h");
        assert_eq!(human_s(17 * 86_400 + 4 * 3_600 + 59), "17 d 4 h");
        assert_eq!(human_s(-90), "-1 min 30 s");
        assert_eq!(human_ms(1_999), "1 s");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }
}
