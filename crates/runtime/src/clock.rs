//! The wall clock as the store, the journal and the results files write it: milliseconds
//! since the Unix epoch, in one place so every record agrees on the unit and the type.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch. An `i64`, as SQLite and PostgreSQL store it;
/// a clock set before 1970 reads as 0 rather than failing a write over a timestamp.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `ms` (since the Unix epoch) as ISO 8601 in UTC (`2026-12-06T22:17:32Z`), as protocols that
/// carry a time as text want it.
pub fn iso8601(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil: the proleptic Gregorian date of a day number.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso8601_gives_the_utc_date_and_time() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::iso8601(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(super::iso8601(1_796_595_452_999), "2026-12-06T22:17:32Z");
    }

    #[test]
    fn now_is_after_2020_and_does_not_go_back() {
        let (a, b) = (super::now_ms(), super::now_ms());
        assert!(a > 1_577_836_800_000, "{a}");
        assert!(b >= a);
    }
}
