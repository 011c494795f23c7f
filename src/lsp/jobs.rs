//! The panic guard every job the session spawns runs under (agent runs, undo and redo, test
//! runs, configuration reloads, rollbacks), and `Report`, the way such a job reports back. A
//! job that panics must still report its end, or the session would stay "busy" or
//! "reloading" until a restart: `caught` turns the panic into a `Panicked` error the job's own
//! end-report carries.
//!
//! It also holds the test hook that makes a job of a given kind panic once, so the tests can
//! show the session serving the next request after each kind of panic.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use futures::FutureExt;
use tracing::error;

use super::ext;

/// How a subsystem reports to the session: a function that takes its own message type (the
/// session wraps it into its `Event`), so the subsystem never sees the session.
pub type Report<T> = Arc<dyn Fn(T) + Send + Sync>;

/// A job panicked; the text is what its end-report shows the user.
#[derive(Debug, Clone, thiserror::Error)]
#[error("agent-ls failed inside the {}: {message}", .kind.describe())]
pub struct Panicked {
    pub kind: Kind,
    /// The panic's own message.
    pub message: String,
}

/// The kinds of job the session spawns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    AgentRun,
    Undo,
    TestRun,
    ConfigReload,
    Rollback,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::AgentRun,
        Kind::Undo,
        Kind::TestRun,
        Kind::ConfigReload,
        Kind::Rollback,
    ];

    /// The name used in logs and in the test hook's variable.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::AgentRun => "agent_run",
            Kind::Undo => "undo",
            Kind::TestRun => "test_run",
            Kind::ConfigReload => "config_reload",
            Kind::Rollback => "rollback",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Runs a job's body, turning a panic into the error that its end-report carries. The
/// body's own values (a run lock, a reply channel) are dropped as it unwinds, so a lock is
/// released before the end is reported.
pub async fn caught<T>(kind: Kind, body: impl Future<Output = T>) -> Result<T, Panicked> {
    AssertUnwindSafe(body)
        .catch_unwind()
        .await
        .map_err(|panic| panicked(kind, &panic))
}

/// Like `caught`, for a job that runs on a blocking thread.
pub fn caught_blocking<T>(kind: Kind, body: impl FnOnce() -> T) -> Result<T, Panicked> {
    std::panic::catch_unwind(AssertUnwindSafe(body)).map_err(|panic| panicked(kind, &panic))
}

/// Logs a caught panic of a `kind` job and makes its error.
fn panicked(kind: Kind, panic: &Box<dyn Any + Send>) -> Panicked {
    let message = panic_message(panic);
    error!("a {} job panicked: {message}", kind.as_str());
    Panicked { kind, message }
}

/// The text a panic was raised with (`panic!`'s message), or "unknown panic".
pub fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::AgentRun => "agent run",
            Kind::Undo => "undo",
            Kind::TestRun => "test run",
            Kind::ConfigReload => "configuration reload",
            Kind::Rollback => "rollback",
        }
    }
}

/// Test hook: panics when `AGENT_LS_TEST_HOOKS=1` and `AGENT_LS_TEST_PANIC` names this kind
/// (a comma-separated list), the first time only, so the next job of the kind runs normally
/// and shows the session recovered. Without both variables it does nothing.
pub fn injected_panic(kind: Kind) {
    static ARMED: OnceLock<[AtomicBool; 5]> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        let hooks = std::env::var(ext::TEST_HOOKS_ENV).is_ok_and(|v| v == "1");
        let wanted = std::env::var(ext::TEST_PANIC_ENV).unwrap_or_default();
        Kind::ALL
            .map(|k| AtomicBool::new(hooks && wanted.split(',').any(|w| w.trim() == k.as_str())))
    });
    if armed[kind.index()].swap(false, Ordering::SeqCst) {
        panic!(
            "injected panic in a {} job ({})",
            kind.as_str(),
            ext::TEST_PANIC_ENV
        );
    }
}
