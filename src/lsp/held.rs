//! A run's edits held back from a client that confirms every server edit itself (eglot
//! alone: "Server wants to edit … Proceed?" for each `workspace/applyEdit`, whatever the
//! server asked). Sent one iteration at a time, a fix of two iterations took two such
//! questions on top of the action menu. Here each iteration's change is written on disk only
//! (the tests run there), and the editor gets the run's whole change as one edit when the run
//! ends: one question for the run, whatever its number of iterations, and at a run whose
//! review found something, that question is the review's (its findings are said just before).
//! Declined, the disk goes back to what it held before the run.
//!
//! This is the run's record of what it changed; the editor shell writes the disk and sends the
//! edit (`ServerShell::hold`, `ServerShell::flush_held`), and `agent_runs::settle_held` ends
//! the run. No step is recorded per iteration: the history gets one, the run's whole change,
//! so one undo takes it back.

use std::collections::BTreeMap;

use super::workspace_edit::EditSupport;
use agent_ls_core::edit::{FileChange, FileText, change_between};

/// Each file the run changed: what it held before the run's first write (`None`: the run
/// created it), and what it holds now.
#[derive(Default)]
pub(super) struct Held {
    files: BTreeMap<String, (Option<String>, String)>,
}

impl Held {
    /// Whether a run holds its edits back: a run of the editor's buffers (not a worktree's),
    /// for a client that confirms every server edit and cannot save on request.
    pub(super) fn applies(support: EditSupport, in_worktree: bool) -> bool {
        support.confirms_edits && !support.save_files && !in_worktree
    }

    /// Each file the run changed, with its text before the run (`None`: it created it).
    pub(super) fn before_run(&self) -> impl Iterator<Item = (&String, &Option<String>)> {
        self.files.iter().map(|(path, (before, _))| (path, before))
    }

    /// The run's text of `path`, when the run changed it.
    pub(super) fn text(&self, path: &str) -> Option<FileText> {
        self.files
            .get(path)
            .map(|(_, now)| FileText::Text(now.clone()))
    }

    pub(super) fn note(&mut self, changes: &[FileChange]) {
        for c in changes {
            self.files
                .entry(c.path.clone())
                .and_modify(|(_, now)| *now = c.new_text.clone())
                .or_insert_with(|| (c.original.clone(), c.new_text.clone()));
        }
    }

    /// The run's whole change, file by file (files it changed and changed back are left out).
    pub(super) fn changes(&self) -> Vec<FileChange> {
        self.files
            .iter()
            .filter(|(_, (before, now))| before.as_deref() != Some(now.as_str()))
            .map(|(path, (before, now))| change_between(path, before.as_deref(), now))
            .collect()
    }
}
