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

/// Waits on `changed` until `look` (whether the source is alive, and the latest fresh
/// publication with its count) has given the same publication for `quiet`.
pub(super) async fn settle<T>(
    changed: &Notify,
    quiet: Duration,
    deadline: Instant,
    mut look: impl FnMut() -> (bool, Option<(u64, T)>),
) -> Settled<T> {
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
