//! Agent steps applied straight to the disk, outside an editor: `apply_edit` of `agent-ls mcp`
//! and `agent-ls undo`. A step is located by the edit engine, refused as a whole when any edit
//! does not apply or a protected file is touched, written atomically, and recorded in the
//! workspace's store, the same history the language server keeps, so it can be undone.

use std::path::Path;

use crate::files::FileError;
use crate::store::{Store, StoreError};
use agent_ls_core::edit::history::{History, Step, StepFile, text_hash};
use agent_ls_core::edit::{self, EditPlan, FileChange, Limits};

/// Why a step was not applied, recorded, undone or redone.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("no file was changed; some edits could not be applied:\n{0}")]
    NotApplied(String),
    #[error("the edits are already in place; nothing to change")]
    AlreadyInPlace,
    #[error(
        "no file was changed: {path} is protected ({why}); only the user may change it, in the editor or with agent-ls run --allow-protected"
    )]
    Protected { path: String, why: &'static str },
    #[error(transparent)]
    Files(#[from] FileError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the files were written, but the step was not recorded: {0}")]
    NotRecorded(StoreError),
    #[error("there is no undone step to redo")]
    NothingToRedo,
    #[error("there is no applied step {0} to undo")]
    NoSuchStep(u64),
    #[error("there is no applied step to undo")]
    NothingToUndo,
    /// The edit engine cannot move the step onto the files as they are now; it says why.
    #[error("{0}")]
    Reversal(String),
    #[error("cannot delete {path}: {source}")]
    Delete {
        path: String,
        source: std::io::Error,
    },
}

/// What an applied step did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Applied {
    pub step: u64,
    pub files: Vec<String>,
    pub diff: String,
}

/// Locates `plan` on the files under `root` and, unless `dry_run`, writes it and records it
/// as a step of `source` ("mcp"). Nothing is written when anything is refused.
pub fn apply(
    root: &Path,
    plan: &EditPlan,
    limits: &Limits,
    source: &str,
    goal: &str,
    dry_run: bool,
) -> Result<Applied, StepError> {
    let outcome = crate::files::plan_on_disk(plan, root, limits);
    if !outcome.all_applied() {
        return Err(StepError::NotApplied(outcome.refusal_report()));
    }
    if outcome.changes.is_empty() {
        return Err(StepError::AlreadyInPlace);
    }
    let protected = crate::trust::protected::in_changes(&outcome.changes);
    if let Some((path, why)) = protected.first() {
        return Err(StepError::Protected {
            path: path.clone(),
            why,
        });
    }
    let diff = outcome.unified_diff();
    let files: Vec<String> = outcome.changes.iter().map(|c| c.path.clone()).collect();
    if dry_run {
        return Ok(Applied {
            step: 0,
            files,
            diff,
        });
    }
    crate::files::write_changes(root, &outcome.changes)?;
    let next = record(root, outcome.changes, source, goal)?;
    Ok(Applied {
        step: next,
        files,
        diff,
    })
}

/// Records changes already written as the next step of the store's history.
pub fn record(
    root: &Path,
    changes: Vec<FileChange>,
    source: &str,
    goal: &str,
) -> Result<u64, StepError> {
    let (mut store, _) = Store::open(root)?;
    let next = store
        .load_steps()?
        .iter()
        .map(|(s, _)| s.id)
        .max()
        .unwrap_or(0)
        + 1;
    let step = Step {
        id: next,
        run_id: source.into(),
        goal: goal.into(),
        task: String::new(),
        files: changes
            .iter()
            .map(|c| StepFile {
                path: c.path.clone(),
                hash: text_hash(&c.new_text),
                version: None,
            })
            .collect(),
        changes,
    };
    store.record_step(&step).map_err(StepError::NotRecorded)?;
    Ok(next)
}

/// A step moved back (undo) or forward (redo) onto the files as they are now, not yet
/// written: a front end that writes through its client (ACP's `fs/write_text_file`) writes
/// `changes` and deletes `deletes` itself, then `settle`s the move.
#[derive(Debug, Clone)]
pub struct Move {
    pub step: u64,
    pub undo: bool,
    pub changes: Vec<FileChange>,
    /// Files the undone step created, to delete.
    pub deletes: Vec<String>,
}

impl Move {
    /// The files it changes or deletes.
    pub fn files(&self) -> Vec<String> {
        let mut files: Vec<String> = self.changes.iter().map(|c| c.path.clone()).collect();
        files.extend(self.deletes.iter().cloned());
        files
    }
}

/// Redoes the step undone last, on the files as they are now.
pub fn redo(root: &Path, limits: &Limits) -> Result<(u64, Vec<String>), StepError> {
    let m = plan_redo(root, limits, |rel| on_disk(root, rel))?;
    write_move(root, &m)?;
    settle(root, &m)?;
    Ok((m.step, m.files()))
}

/// The redo of the step undone last, on the files as `read` gives them.
pub fn plan_redo(
    root: &Path,
    limits: &Limits,
    read: impl Fn(&str) -> Option<String>,
) -> Result<Move, StepError> {
    let (store, _) = Store::open(root)?;
    let history = History::restore(store.load_steps()?);
    let step = history.last_undone().ok_or(StepError::NothingToRedo)?;
    let changes = edit::history::reapply(step, read, limits)
        .map_err(|e| StepError::Reversal(e.to_string()))?;
    Ok(Move {
        step: step.id,
        undo: false,
        changes,
        deletes: Vec::new(),
    })
}

/// Undoes step `id` (the latest applied one when `None`) on the files as they are now: the
/// user's edits elsewhere stay; lines changed since are a refusal that says which.
pub fn undo(
    root: &Path,
    id: Option<u64>,
    limits: &Limits,
) -> Result<(u64, Vec<String>), StepError> {
    let m = plan_undo(root, id, limits, |rel| on_disk(root, rel))?;
    write_move(root, &m)?;
    settle(root, &m)?;
    Ok((m.step, m.files()))
}

/// The undo of step `id` (the latest applied one when `None`), on the files as `read` gives
/// them.
pub fn plan_undo(
    root: &Path,
    id: Option<u64>,
    limits: &Limits,
    read: impl Fn(&str) -> Option<String>,
) -> Result<Move, StepError> {
    let (store, _) = Store::open(root)?;
    let history = History::restore(store.load_steps()?);
    let step = match id {
        Some(id) => history.find_done(id).ok_or(StepError::NoSuchStep(id))?,
        None => history.last_done().ok_or(StepError::NothingToUndo)?,
    };
    let reversal = edit::history::revert(step, read, limits)
        .map_err(|e| StepError::Reversal(e.to_string()))?;
    Ok(Move {
        step: step.id,
        undo: true,
        changes: reversal.changes,
        deletes: reversal.deletes,
    })
}

/// Writes a move's changes to disk and deletes the files it removes.
fn write_move(root: &Path, m: &Move) -> Result<(), StepError> {
    crate::files::write_changes(root, &m.changes)?;
    delete_created(root, &m.deletes)
}

/// Deletes the files an undone step had created.
pub fn delete_created(root: &Path, deletes: &[String]) -> Result<(), StepError> {
    for path in deletes {
        if let Ok(p) = crate::files::resolve(root, path) {
            std::fs::remove_file(&p).map_err(|source| StepError::Delete {
                path: path.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

/// Records in the store that a move's files were written: the step is undone, or done again.
pub fn settle(root: &Path, m: &Move) -> Result<(), StepError> {
    let (store, _) = Store::open(root)?;
    mark(&store, m.step, m.undo)?;
    Ok(())
}

/// Marks step `id` undone or done again. A step redone applies its run again, so the run's
/// rollback is forgotten: rolling it back later is a first rollback, not a second.
pub fn mark(store: &Store, id: u64, undone: bool) -> Result<(), StoreError> {
    store.set_undone(id, undone)?;
    if !undone && let Some(run) = store.step_run(id)? {
        store.forget_rollback(&run)?;
    }
    Ok(())
}

/// A file's text on disk, for moving a step onto it; `None` when it cannot be read.
fn on_disk(root: &Path, relative: &str) -> Option<String> {
    match crate::files::read_for_plan(root, relative) {
        edit::FileText::Text(t) => Some(t),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_applied_on_disk_is_recorded_and_undone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
        let plan = edit::parse_plan(
            "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        let limits = Limits::default();
        let dry = apply(root, &plan, &limits, "mcp", "fix", true).unwrap();
        assert_eq!(dry.step, 0);
        assert!(
            std::fs::read_to_string(root.join("calc.py"))
                .unwrap()
                .contains("a - b")
        );
        let done = apply(root, &plan, &limits, "mcp", "fix", false).unwrap();
        assert_eq!(
            (done.step, done.files.clone()),
            (1, vec!["calc.py".to_string()])
        );
        assert!(
            std::fs::read_to_string(root.join("calc.py"))
                .unwrap()
                .contains("a + b")
        );
        // The same edit again is refused: nothing to change.
        assert!(apply(root, &plan, &limits, "mcp", "fix", false).is_err());
        // A protected file is refused whole.
        let hook = edit::parse_plan(
            ".git/hooks/pre-commit\n<<<<<<< SEARCH\n=======\necho hi\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        let err = apply(root, &hook, &limits, "mcp", "hook", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("protected"), "{err}");
        assert!(!root.join(".git/hooks/pre-commit").exists());
        let (id, files) = undo(root, None, &limits).unwrap();
        assert_eq!((id, files), (1, vec!["calc.py".to_string()]));
        assert!(
            std::fs::read_to_string(root.join("calc.py"))
                .unwrap()
                .contains("a - b")
        );
        assert!(undo(root, None, &limits).is_err());
        let (id, _) = redo(root, &limits).unwrap();
        assert_eq!(id, 1);
        assert!(
            std::fs::read_to_string(root.join("calc.py"))
                .unwrap()
                .contains("a + b")
        );
        assert!(redo(root, &limits).is_err());
    }
}
