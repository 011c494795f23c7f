//! How a batch or a worker stops: SIGINT and SIGTERM cancel it. Below batch.rs and
//! queue/work.rs, which both watch for them; it uses neither.

use tokio_util::sync::CancellationToken;

/// SIGINT and SIGTERM cancel the batch: no task starts, running ones are ended (their
/// results are not written), and finished results stay as they were written.
pub(super) fn watch_signals(cancel: CancellationToken) {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("agent-ls: interrupted; stopping the running tasks");
        cancel.cancel();
    });
}
