//! The editor's own diagnostics, forwarded by its agent-ls add-on (`agent-ls/diagnostics`,
//! docs/lsp-extensions.md): with them a run in the editor starts no language server of its
//! own. Each file keeps its last few publications, each with a count over all files, so a
//! check can tell the errors before an edit (published by the mark taken before applying it)
//! from those after (published since).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::compare::FileError;
use super::settle::{Settled, settle};

/// Publications kept per file: enough for an edit's before and after.
const KEPT: usize = 8;

#[derive(Default)]
pub struct Forwarded {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Default)]
struct State {
    count: u64,
    files: HashMap<String, Vec<(u64, Vec<FileError>)>>,
}

impl Forwarded {
    /// The editor's errors of `path` (relative to the workspace) now.
    pub fn publish(&self, path: &str, errors: Vec<FileError>) {
        let mut s = self.lock();
        s.count += 1;
        let count = s.count;
        let list = s.files.entry(path.to_string()).or_default();
        list.push((count, errors));
        if list.len() > KEPT {
            list.remove(0);
        }
        drop(s);
        self.changed.notify_waiters();
    }

    /// Whether the editor ever published diagnostics of `path`.
    pub fn known(&self, path: &str) -> bool {
        self.lock().files.contains_key(path)
    }

    /// The mark to take before an edit: the count of publications so far.
    pub fn mark(&self) -> u64 {
        self.lock().count
    }

    /// The errors of `path` as last published by `mark` (none: the editor reported none).
    pub fn at(&self, path: &str, mark: u64) -> Vec<FileError> {
        self.lock()
            .files
            .get(path)
            .and_then(|l| l.iter().rev().find(|(c, _)| *c <= mark))
            .map(|(_, e)| e.clone())
            .unwrap_or_default()
    }

    /// The errors of `path` published after `mark`, once the editor has been quiet about it
    /// for `quiet`; `None` when nothing came by `deadline`.
    pub async fn after(
        &self,
        path: &str,
        mark: u64,
        quiet: Duration,
        deadline: Instant,
    ) -> Option<Vec<FileError>> {
        let look = || {
            let latest = self
                .lock()
                .files
                .get(path)
                .and_then(|l| l.last())
                .filter(|(c, _)| *c > mark)
                .cloned();
            (true, latest)
        };
        match settle(&self.changed, quiet, deadline, look).await {
            Settled::Value(errors) => Some(errors),
            Settled::Gone | Settled::Timeout => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
