//! UTC days as the experiment counts name them: `YYYYMMDD` numbers, from a
//! Unix time, and the last N of them. Pure arithmetic (the civil-from-days
//! algorithm of Howard Hinnant's `chrono`-compatible date library), so no
//! time-zone database or date crate is needed for a UTC calendar.

use crate::process::unix_millis;

const MS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 (UTC) of a Unix time in milliseconds.
pub fn day_number(unix_ms: i64) -> i64 {
    unix_ms.div_euclid(MS_PER_DAY)
}

/// The `YYYYMMDD` of a day number (days since 1970-01-01); 0 for a day
/// before year 0 or after year 9999, which no clock gives.
pub fn yyyymmdd(day_number: i64) -> u32 {
    let z = day_number + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if !(0..=9999).contains(&year) {
        return 0;
    }
    u32::try_from(year * 10_000 + month * 100 + day).unwrap_or(0)
}

/// Today's `YYYYMMDD` in UTC.
pub fn today() -> u32 {
    yyyymmdd(day_number(unix_millis()))
}

/// The last `n` UTC days at `unix_ms`, today first, as `YYYYMMDD`.
pub fn last_days(n: u32, unix_ms: i64) -> Vec<u32> {
    let today = day_number(unix_ms);
    (0..i64::from(n))
        .map(|back| yyyymmdd(today - back))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_follow_the_utc_calendar() {
        assert_eq!(yyyymmdd(0), 19700101);
        assert_eq!(yyyymmdd(-1), 19691231);
        // 2026-12-02T15:20:39Z and the millisecond before its midnight.
        assert_eq!(yyyymmdd(day_number(1_796_224_839_000)), 20261202);
        assert_eq!(yyyymmdd(day_number(1_796_169_600_000 - 1)), 20261201);
        assert_eq!(yyyymmdd(day_number(1_796_169_600_000)), 20261202);
        // Leap days, centuries, the year's end.
        assert_eq!(yyyymmdd(day_number(951_782_400_000)), 20000229);
        assert_eq!(yyyymmdd(day_number(1_709_164_800_000)), 20240229);
        assert_eq!(yyyymmdd(day_number(1_709_251_200_000)), 20240301);
        assert_eq!(yyyymmdd(day_number(4_107_283_200_000)), 21000226);
        assert_eq!(yyyymmdd(day_number(4_107_542_400_000)), 21000301);
        assert_eq!(
            last_days(3, 1_767_225_600_000),
            vec![20260101, 20251231, 20251230]
        );
        assert!(last_days(0, 0).is_empty());
        assert_eq!(yyyymmdd(i64::MAX / MS_PER_DAY), 0);
    }

    /// Every day of four centuries follows the one before: the date
    /// increments by one day, rolling month and year as the calendar does.
    #[test]
    fn consecutive_day_numbers_are_consecutive_dates() {
        let days_in = |y: u32, m: u32| match m {
            2 if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut before = yyyymmdd(-365 * 30);
        for n in (-365 * 30 + 1)..(146_097 + 20_000) {
            let date = yyyymmdd(n);
            let (y, m, d) = (before / 10_000, before / 100 % 100, before % 100);
            let next = if d < days_in(y, m) {
                before + 1
            } else if m < 12 {
                y * 10_000 + (m + 1) * 100 + 1
            } else {
                (y + 1) * 10_000 + 101
            };
            assert_eq!(date, next, "day {n}");
            before = date;
        }
    }
}
