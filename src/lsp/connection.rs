//! What the jobs that reach the editor (agent runs, undo and redo, rollbacks) share with the
//! session: the `Connection` each is handed when it starts, the `Snapshot` of open documents
//! it reads, and the `AgentMessage`s it reports through. These types sit below the session
//! and the jobs alike, so a job names them without importing the session, and the session
//! starts the jobs without the jobs importing each other back.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tower_lsp_server::ls_types::Uri;

use super::baseline::Baseline;
use super::jobs::{Panicked, Report};
use super::outbox::Outbox;
use super::refused::Refused;
use super::workspace_edit::EditSupport;
use agent_ls_core::agent::review::ReviewResult;
use agent_ls_core::edit::FileChange;
use agent_ls_core::edit::history::{StepError, StepFile};
use agent_ls_core::text::{Buffer, Encoding};
use agent_ls_runtime::drive::Outcome;
use agent_ls_runtime::lock::RunLock;
use agent_ls_runtime::runs::rewind::Rewind;
use agent_ls_runtime::tests_run::{RunError, RunResult};

/// The open documents of the workspace, by path relative to its root.
pub type Snapshot = HashMap<String, (Uri, Buffer)>;

/// What a run (or an undo, or a rollback) tells the session, or asks of it.
pub enum AgentMessage {
    /// The open documents as they are now.
    Snapshot { reply: oneshot::Sender<Snapshot> },
    /// Answer once every document named holds its text (the `didChange` that follows an
    /// applied edit); the asker gives up after its own deadline.
    AwaitTexts {
        want: Vec<(Uri, String)>,
        reply: oneshot::Sender<()>,
    },
    /// Run the tests through the session's one owner of test runs.
    RunTests {
        reply: oneshot::Sender<Result<RunResult, RunError>>,
        /// A tool's narrowed run or command in place of the tests; its result is the
        /// model's and is not published as diagnostics.
        command: Option<Vec<String>>,
    },
    /// An agent step was applied and confirmed: record it in the history.
    StepApplied(AppliedStep),
    /// The run ended.
    Finished { id: String, outcome: Box<Outcome> },
    /// The run's review, about to be asked about: its findings go on their lines now, so the
    /// user sees them in the files while deciding. Answered once they are in the outbox, so
    /// they reach the client before the question.
    Reviewed {
        review: Box<ReviewResult>,
        reply: oneshot::Sender<()>,
    },
    /// A rollback ended; `rolled_back` when the run's files are back to its checkpoint,
    /// `changed` when that changed any file.
    RollbackFinished {
        run_id: Option<String>,
        rolled_back: bool,
        changed: bool,
    },
    /// A rewind's files are back (or it was refused): the new run starts now.
    RewindFinished(Box<Rewound>),
    /// An undo (or redo) ended.
    UndoFinished {
        step: u64,
        redo: bool,
        goal: String,
        result: Result<(), UndoFailed>,
    },
}

/// What the session hears at a rewind's end (`rewind.rs`): the rewind once its files are
/// back (or why not), the instruction, and the lock and the answer the new run takes over.
pub struct Rewound {
    pub rewind: Result<Rewind, Refused>,
    pub goal: String,
    pub lock: RunLock,
    pub reply: oneshot::Sender<Result<serde_json::Value, Refused>>,
}

/// An agent step the editor applied and holds, for the history.
pub struct AppliedStep {
    pub run_id: String,
    pub goal: String,
    pub task: String,
    /// The run's iteration that made it.
    pub iteration: u32,
    pub changes: Vec<FileChange>,
    pub files: Vec<StepFile>,
}

/// Why an undo or redo did not happen; the text follows "could not undo step N: ".
#[derive(Debug, Clone, thiserror::Error)]
pub enum UndoFailed {
    /// The reversal cannot be computed from the files as they are now.
    #[error(transparent)]
    Reversal(#[from] StepError),
    /// The editor or the disk did not take it.
    #[error("{0}")]
    Apply(String),
    /// The undo failed inside agent-ls.
    #[error(transparent)]
    Panicked(#[from] Panicked),
}

/// The open documents whose file the server wrote on disk under the editor's buffer (for a
/// client without `agent-ls/saveFiles`), until the editor reads or saves the file again, each
/// with the file as it was before that first write (`Baseline`: the state the editor
/// recorded). Such an editor knows the file changed behind it: Emacs asks "changed on disk;
/// discard your edits?" before it applies the next edit to that buffer. So the next edit to
/// such a file is sent with the baseline put back on disk ("parked"), which the editor finds
/// unchanged; the change is written after it lands. A file with no baseline (it did not
/// exist) is written with the change before the edit instead, and whichever the editor's
/// answer, the buffer and the disk end up holding it.
#[derive(Clone, Default)]
pub struct WrittenUnder(Arc<Mutex<HashMap<Uri, Option<Baseline>>>>);

impl WrittenUnder {
    /// Remembers that the server wrote `uri`'s file; `before` is the file as it was, kept
    /// from the first write only (later ones follow the server's own).
    pub fn mark(&self, uri: &Uri, before: Option<Baseline>) {
        if let Ok(mut map) = self.0.lock() {
            map.entry(uri.clone()).or_insert(before);
        }
    }

    pub fn forget(&self, uri: &Uri) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(uri);
        }
    }

    pub fn contains(&self, uri: &Uri) -> bool {
        self.0.lock().is_ok_and(|map| map.contains_key(uri))
    }

    /// Gives the time of now to each file left on disk as the editor last saw it, text and
    /// time (`ServerShell::back_to_baseline`), before tests run on it: that time is older than
    /// what a build tool that compares times (make, Cargo) built from the agent's text since,
    /// which it would take for this file's. The editor then asks on its next save, as after
    /// any write behind it; a save before the tests run asks nothing.
    pub fn restamp_parked(&self, root: &Path) {
        let Ok(map) = self.0.lock() else {
            return;
        };
        for (uri, baseline) in map.iter() {
            let (Some(b), Some(path)) = (baseline, super::convert::path_from_uri(uri)) else {
                continue;
            };
            let Ok(relative) = path.strip_prefix(root) else {
                continue;
            };
            let relative = relative.to_string_lossy();
            if super::baseline::still_parked(root, &relative, b) {
                let _ = super::baseline::restamp(root, &relative);
            }
        }
    }

    /// The file as the editor last saw it, when the server wrote it since and knows that.
    pub fn baseline(&self, uri: &Uri) -> Option<Baseline> {
        self.0.lock().ok()?.get(uri).cloned().flatten()
    }
}

/// What a run needs from the client connection, the same for every run of a session.
#[derive(Clone)]
pub struct Connection {
    pub outbox: Outbox,
    pub report: Report<AgentMessage>,
    pub root: PathBuf,
    pub encoding: Encoding,
    pub support: EditSupport,
    pub progress: bool,
    pub written_under: WrittenUnder,
    /// The editor's forwarded diagnostics, when the client forwards them.
    pub forwarded: Option<std::sync::Arc<agent_ls_runtime::lsp_client::Forwarded>>,
}
