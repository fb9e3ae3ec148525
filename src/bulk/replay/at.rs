//! A replayed row's `at`: its time as milliseconds since the Unix epoch,
//! from RFC 3339 (`2026-03-01T12:00:00Z`, `2026-03-01 12:00:00.250+01:00`)
//! or Unix seconds (`1772366400`, `1772366400.25`).
//!
//! Written here rather than taken from a crate: humantime 2 (already built)
//! reads RFC 3339 only in UTC (`Z`), and exports often carry an offset; a
//! date crate for one column is more than this needs. Milliseconds because
//! that is the finest time the rules use (admission windows).

/// Why an `at` cell cannot be read.
pub const EXPECTED: &str = "at: must be an RFC 3339 time (2026-03-01T12:00:00Z, with an offset or \
                            Z) or Unix seconds";

/// The time in `text` (ASCII blanks trimmed); `Ok(None)` when empty.
pub fn parse(text: &str) -> Result<Option<i64>, &'static str> {
    let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if text.is_empty() {
        return Ok(None);
    }
    let millis = if text.len() > 10 && text.as_bytes()[4] == b'-' {
        rfc3339(text.as_bytes())
    } else {
        unix_seconds(text)
    };
    millis.map(Some).ok_or(EXPECTED)
}

/// `-?digits(.digits)?`: whole seconds and up to millisecond precision
/// (finer digits are dropped).
fn unix_seconds(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit())
        || (digits.contains('.') && fraction.is_empty())
    {
        return None;
    }
    let seconds: i64 = whole.parse().ok()?;
    let millis = seconds
        .checked_mul(1000)?
        .checked_add(fraction_millis(fraction.as_bytes()))?;
    Some(if negative { -millis } else { millis })
}

/// The first three digits of a decimal fraction as milliseconds.
fn fraction_millis(digits: &[u8]) -> i64 {
    let mut millis = 0;
    for place in 0..3 {
        millis = millis * 10 + digits.get(place).map_or(0, |d| i64::from(d - b'0'));
    }
    millis
}

/// `YYYY-MM-DD(T|t| )HH:MM:SS(.fraction)?(Z|z|±HH:MM)`.
fn rfc3339(b: &[u8]) -> Option<i64> {
    let number = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| digits.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let separated = |at: usize, by: &[u8]| b.get(at).is_some_and(|c| by.contains(c));
    let shaped = [
        (4, &b"-"[..]),
        (7, b"-"),
        (10, b"Tt "),
        (13, b":"),
        (16, b":"),
    ];
    if !shaped.iter().all(|(at, by)| separated(*at, by)) {
        return None;
    }
    let (year, month, day) = (number(0, 4)?, number(5, 2)?, number(8, 2)?);
    let (hour, minute, second) = (number(11, 2)?, number(14, 2)?, number(17, 2)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut at = 19;
    let mut millis = 0;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        millis = fraction_millis(&b[at + 1..at + 1 + digits]);
        at += 1 + digits;
    }
    let offset_minutes = match b.get(at..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), ..] if b.len() == at + 6 && b[at + 3] == b':' => {
            let (hours, minutes) = (number(at + 1, 2)?, number(at + 4, 2)?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 60 + minutes;
            if *sign == b'-' { -offset } else { offset }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1000 + millis)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_with_or_without_a_fraction() {
        assert_eq!(parse("0"), Ok(Some(0)));
        assert_eq!(parse(" 1772366400 "), Ok(Some(1_772_366_400_000)));
        assert_eq!(parse("1772366400.25"), Ok(Some(1_772_366_400_250)));
        assert_eq!(parse("1.2345"), Ok(Some(1_234)));
        assert_eq!(parse("-1.5"), Ok(Some(-1_500)));
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("  "), Ok(None));
    }

    #[test]
    fn rfc3339_in_utc_and_with_offsets() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), Ok(Some(0)));
        assert_eq!(parse("2026-03-01T12:00:00Z"), Ok(Some(1_772_366_400_000)));
        assert_eq!(parse("2026-03-01t12:00:00z"), Ok(Some(1_772_366_400_000)));
        assert_eq!(
            parse("2026-03-01 13:00:00.250+01:00"),
            Ok(Some(1_772_366_400_250))
        );
        assert_eq!(
            parse("2026-03-01T06:30:00-05:30"),
            Ok(Some(1_772_366_400_000))
        );
        assert_eq!(parse("2024-02-29T00:00:00Z"), Ok(Some(1_709_164_800_000)));
        assert_eq!(parse("1969-12-31T23:59:59Z"), Ok(Some(-1_000)));
    }

    #[test]
    fn anything_else_is_refused_by_name() {
        for bad in [
            "yesterday",
            "12:00",
            "1e9",
            "1.",
            ".5",
            "--1",
            "2026-03-01",
            "2026-03-01T12:00:00",
            "2026-03-01T12:00:00+0100",
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-03-01T24:00:00Z",
            "2026-03-01T12:00:00.Z",
            "2026-03-01T12:00:00+24:00",
            "2026-03-01T12:00:00Zjunk",
            "99999999999999999999",
        ] {
            assert_eq!(parse(bad), Err(EXPECTED), "{bad}");
        }
        assert!(EXPECTED.starts_with("at: "));
    }
}
