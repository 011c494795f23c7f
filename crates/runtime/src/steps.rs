//! Agent steps applied straight to the disk, outside an editor: `apply_edit` of `agent-ls mcp`
//! and `agent-ls undo`. A step is located by the edit engine, refused as a whole when any edit
//! does not apply or a protected file is touched, written atomically, and recorded in the
//! workspace's store, the same history the language server keeps, so it can be undone.

use std::path::Path;

use crate::store::Store;
use agent_ls_core::edit::history::{History, Step, StepFile, text_hash};
use agent_ls_core::edit::{self, EditPlan, FileChange, Limits};

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
) -> Result<Applied, String> {
    let outcome = crate::files::plan_on_disk(plan, root, limits);
    if !outcome.all_applied() {
        return Err(format!(
            "no file was changed; some edits could not be applied:\n{}",
            outcome.refusal_report()
        ));
    }
    if outcome.changes.is_empty() {
        return Err("the edits are already in place; nothing to change".into());
    }
    let protected = crate::files::protected_in(root, &outcome.changes);
    if let Some((path, why)) = protected.first() {
        return Err(format!(
            "no file was changed: {path} is protected ({why}); only the user may change it, in the editor or with agent-ls run --allow-protected"
        ));
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
) -> Result<u64, String> {
    let (mut store, _) = Store::open(root).map_err(|e| e.to_string())?;
    let next = store
        .load_steps()
        .map_err(|e| e.to_string())?
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
    store
        .record_step(&step)
        .map_err(|e| format!("the files were written, but the step was not recorded: {e}"))?;
    Ok(next)
}

/// Redoes the step undone last, on the files as they are now.
pub fn redo(root: &Path, limits: &Limits) -> Result<(u64, Vec<String>), String> {
    let (store, _) = Store::open(root).map_err(|e| e.to_string())?;
    let history = History::restore(store.load_steps().map_err(|e| e.to_string())?);
    let step = history
        .last_undone()
        .ok_or("there is no undone step to redo")?;
    let current = |rel: &str| match crate::files::read_for_plan(root, rel) {
        edit::FileText::Text(t) => Some(t),
        _ => None,
    };
    let changes = edit::history::reapply(step, current, limits).map_err(|e| e.to_string())?;
    crate::files::write_changes(root, &changes)?;
    store
        .set_undone(step.id, false)
        .map_err(|e| e.to_string())?;
    Ok((step.id, changes.iter().map(|c| c.path.clone()).collect()))
}

/// Undoes step `id` (the latest applied one when `None`) on the files as they are now: the
/// user's edits elsewhere stay; lines changed since are a refusal that says which.
pub fn undo(root: &Path, id: Option<u64>, limits: &Limits) -> Result<(u64, Vec<String>), String> {
    let (store, _) = Store::open(root).map_err(|e| e.to_string())?;
    let history = History::restore(store.load_steps().map_err(|e| e.to_string())?);
    let step = match id {
        Some(id) => history
            .find_done(id)
            .ok_or_else(|| format!("there is no applied step {id} to undo"))?,
        None => history
            .last_done()
            .ok_or("there is no applied step to undo")?,
    };
    let current = |rel: &str| match crate::files::read_for_plan(root, rel) {
        edit::FileText::Text(t) => Some(t),
        _ => None,
    };
    let reversal = edit::history::revert(step, current, limits).map_err(|e| e.to_string())?;
    crate::files::write_changes(root, &reversal.changes)?;
    for path in &reversal.deletes {
        if let Ok(p) = crate::files::resolve(root, path) {
            std::fs::remove_file(&p).map_err(|e| format!("cannot delete {path}: {e}"))?;
        }
    }
    store.set_undone(step.id, true).map_err(|e| e.to_string())?;
    let mut files: Vec<String> = reversal
        .changes
        .iter()
        .map(|c: &FileChange| c.path.clone())
        .collect();
    files.extend(reversal.deletes);
    Ok((step.id, files))
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
        let err = apply(root, &hook, &limits, "mcp", "hook", false).unwrap_err();
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
