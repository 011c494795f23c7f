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

#[cfg(test)]
mod tests {
    #[test]
    fn now_is_after_2020_and_does_not_go_back() {
        let (a, b) = (super::now_ms(), super::now_ms());
        assert!(a > 1_577_836_800_000, "{a}");
        assert!(b >= a);
    }
}
