//! Waiting for a file's diagnostics to settle, for a server's own publications and the
//! editor's forwarded ones alike: the first publication after a mark, then quiet for a while
//! (servers publish a file's errors in steps: syntax, then types), within a deadline.

use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How a wait ended.
pub(super) enum Settled<T> {
    /// The latest publication after the mark, once quiet (or at the deadline).
    Value(T),
    /// The source is gone (the server exited).
    Gone,
    /// Nothing was published by the deadline.
    Timeout,
}

/// The longest the quiet may grow to with a slow first publication.
const MAX_QUIET: Duration = Duration::from_secs(2);

/// Waits on `changed` until `look` (whether the source is alive, and the latest fresh
/// publication with its count) has given the same publication for `quiet`, or for as long
/// as the first fresh publication took to come (up to `MAX_QUIET`), when that is longer: a server slowed down
/// (a busy machine, a big project) is as slow between its steps, and a fixed wait took its
/// first step (syntax, no errors) for the result while the types were still being checked.
pub(super) async fn settle<T>(
    changed: &Notify,
    quiet: Duration,
    deadline: Instant,
    mut look: impl FnMut() -> (bool, Option<(u64, T)>),
) -> Settled<T> {
    let started = Instant::now();
    let mut quiet = quiet;
    let mut seen: Option<(u64, Instant)> = None;
    loop {
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (alive, fresh) = look();
        let now = Instant::now();
        if let Some((count, _)) = &fresh
            && seen.is_none_or(|(c, _)| c != *count)
        {
            // At most MAX_QUIET: a first answer slowed by the server's start (loading its
            // project) would otherwise double every first check's wait.
            if seen.is_none() {
                quiet = quiet.max((now - started).min(MAX_QUIET));
            }
            seen = Some((*count, now));
        }
        match (fresh, seen) {
            (Some((_, value)), Some((_, at))) if now >= at + quiet || now >= deadline => {
                return Settled::Value(value);
            }
            _ if !alive => return Settled::Gone,
            _ if now >= deadline => return Settled::Timeout,
            _ => {}
        }
        let until = seen.map_or(deadline, |(_, at)| (at + quiet).min(deadline));
        let _ = tokio::time::timeout_at(until, notified).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// The latest publication: its count and value.
    type Latest = Arc<Mutex<Option<(u64, &'static str)>>>;

    /// A source that publishes `steps` (after each delay, a value), notifying as it does.
    fn source(steps: Vec<(u64, &'static str)>) -> (Arc<Notify>, Latest) {
        let changed = Arc::new(Notify::new());
        let latest = Arc::new(Mutex::new(None));
        let (c, l) = (changed.clone(), latest.clone());
        tokio::spawn(async move {
            for (n, (after_ms, value)) in steps.into_iter().enumerate() {
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                *l.lock().unwrap() = Some((n as u64 + 1, value));
                c.notify_waiters();
            }
        });
        (changed, latest)
    }

    async fn settled(steps: Vec<(u64, &'static str)>) -> Option<&'static str> {
        let (changed, latest) = source(steps);
        let deadline = Instant::now() + Duration::from_secs(60);
        match settle(&changed, Duration::from_millis(20), deadline, || {
            (true, *latest.lock().unwrap())
        })
        .await
        {
            Settled::Value(v) => Some(v),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_slow_servers_second_step_is_waited_for_as_long_as_its_first_took() {
        // Quick: the types come 10 ms after the syntax, within the 20 ms of quiet.
        assert_eq!(
            settled(vec![(5, "syntax"), (10, "types")]).await,
            Some("types")
        );
        // Slowed down: the syntax after 300 ms, the types 150 ms later; 20 ms of quiet alone
        // took the syntax step for the result.
        assert_eq!(
            settled(vec![(300, "syntax"), (150, "types")]).await,
            Some("types")
        );
        // A step that never comes is waited for about as long as the first one took.
        let at = Instant::now();
        assert_eq!(settled(vec![(300, "only")]).await, Some("only"));
        assert!(at.elapsed() < Duration::from_secs(3), "{:?}", at.elapsed());
    }
}
