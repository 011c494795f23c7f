//! The editor's own diagnostics, forwarded by its agent-ls add-on
//! (`agent-ls/editorDiagnostics`, docs/lsp-extensions.md): with them a run in the editor
//! starts no language server of its own. Each file keeps its last few publications, each
//! with a count over all files, so a check can tell the errors before an edit (published by
//! the mark taken before applying it) from those after (published since).
//!
//! A publication carries the document version the editor was at when it had those
//! diagnostics, and the server notes the version at which the editor's document came to hold
//! an edit (`edited`): a publication after the mark but for an older version is the editor
//! saying again what it thought of the text before the edit, never the edit's result.

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
    files: HashMap<String, Vec<Publication>>,
    /// Each file's document version that holds the latest agent edit of it.
    edited: HashMap<String, i32>,
}

#[derive(Clone)]
struct Publication {
    count: u64,
    /// The editor's document version then; `None` when it sent none (a file not open).
    version: Option<i32>,
    errors: Vec<FileError>,
}

impl Forwarded {
    /// The editor's errors of `path` (relative to the workspace) now, when its document was
    /// at `version`.
    pub fn publish(&self, path: &str, version: Option<i32>, errors: Vec<FileError>) {
        let mut s = self.lock();
        s.count += 1;
        let count = s.count;
        let list = s.files.entry(path.to_string()).or_default();
        list.push(Publication {
            count,
            version,
            errors,
        });
        if list.len() > KEPT {
            list.remove(0);
        }
        drop(s);
        self.changed.notify_waiters();
    }

    /// The editor's document of `path` holds an agent edit from `version` on.
    pub fn edited(&self, path: &str, version: i32) {
        self.lock().edited.insert(path.to_string(), version);
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
            .and_then(|l| l.iter().rev().find(|p| p.count <= mark))
            .map(|p| p.errors.clone())
            .unwrap_or_default()
    }

    /// The errors of `path` published after `mark` for the text the edit left (a version at
    /// or after the one `edited` noted, or no version), once the editor has been quiet about
    /// it for `quiet`; `None` when nothing came by `deadline`.
    pub async fn after(
        &self,
        path: &str,
        mark: u64,
        quiet: Duration,
        deadline: Instant,
    ) -> Option<Vec<FileError>> {
        let look = || {
            let s = self.lock();
            let edited = s.edited.get(path).copied();
            let latest = s
                .files
                .get(path)
                .and_then(|l| l.last())
                .filter(|p| p.count > mark)
                .filter(|p| match (p.version, edited) {
                    (Some(v), Some(e)) => v >= e,
                    _ => true,
                })
                .map(|p| (p.count, p.errors.clone()));
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
