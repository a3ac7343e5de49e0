//! `Retry-After` read from an answer (RFC 9110 §10.2.3): delta-seconds (`1*DIGIT`) or an
//! HTTP-date (§5.6.7: the IMF-fixdate, and the obsolete RFC 850 and asctime forms a recipient
//! must accept). Anything else is no delay: the answer is retried as any transient one.

use chrono::{NaiveDateTime, TimeZone, Utc};

use crate::effect::RetryAfter;

/// The delay a `Retry-After` header value asks for, `None` when it is neither form (garbage,
/// empty, a negative or fractional number, a date without `GMT`).
pub fn parse_retry_after(value: &str) -> Option<RetryAfter> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than a u64 holds is still "a long time": saturate.
        let seconds = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(RetryAfter::Seconds(seconds));
    }
    http_date_ms(value).map(RetryAfter::At)
}

/// An HTTP-date as epoch **milliseconds**: `Sun, 06 Nov 1994 08:49:37 GMT` (IMF-fixdate),
/// `Sunday, 06-Nov-94 08:49:37 GMT` (RFC 850; a two-digit year is read as chrono reads `%y`,
/// 1969..2068) or `Sun Nov  6 08:49:37 1994` (asctime). The weekday is checked by chrono.
fn http_date_ms(value: &str) -> Option<i64> {
    const FORMATS: [&str; 3] = [
        "%a, %d %b %Y %H:%M:%S GMT",
        "%A, %d-%b-%y %H:%M:%S GMT",
        "%a %b %e %H:%M:%S %Y",
    ];
    FORMATS.iter().find_map(|format| {
        let at = NaiveDateTime::parse_from_str(value, format).ok()?;
        Some(Utc.from_utc_datetime(&at).timestamp_millis())
    })
}

#[cfg(test)]
mod tests {
    use super::parse_retry_after;
    use crate::effect::RetryAfter;

    /// 1994-11-06T08:49:37Z in epoch milliseconds (RFC 9110's example date).
    const RFC_EXAMPLE_MS: i64 = 784_111_777_000;

    #[test]
    fn delta_seconds_are_a_delay_in_seconds() {
        assert_eq!(parse_retry_after("120"), Some(RetryAfter::Seconds(120)));
        assert_eq!(parse_retry_after(" 0 "), Some(RetryAfter::Seconds(0)));
        assert_eq!(
            parse_retry_after("99999999999999999999999"),
            Some(RetryAfter::Seconds(u64::MAX))
        );
    }

    #[test]
    fn every_http_date_form_is_the_same_instant() {
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                parse_retry_after(form),
                Some(RetryAfter::At(RFC_EXAMPLE_MS)),
                "{form}"
            );
        }
    }

    #[test]
    fn garbage_is_no_delay() {
        for garbage in [
            "",
            "soon",
            "-5",
            "1.5",
            "12 s",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn a_delay_counts_from_now_and_never_below_zero() {
        assert_eq!(RetryAfter::Seconds(3).delay_ms(1_000), 3_000);
        assert_eq!(
            RetryAfter::At(RFC_EXAMPLE_MS).delay_ms(RFC_EXAMPLE_MS - 2_500),
            2_500
        );
        assert_eq!(
            RetryAfter::At(RFC_EXAMPLE_MS).delay_ms(RFC_EXAMPLE_MS + 1),
            0
        );
        assert_eq!(RetryAfter::Seconds(u64::MAX).delay_ms(0), i64::MAX);
    }
}
