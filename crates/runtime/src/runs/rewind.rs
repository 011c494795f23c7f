//! A rewind, as every surface makes it (docs/rewind.md): a run taken back to one of its steps,
//! code and conversation together, to go on from there with a new instruction. `plan` finds
//! the step and its run, moves each applied step of that run after it back (newest first,
//! through the same reversal `agent-ls undo` makes, so a file edited since at the lines a
//! step touched is a refusal that names it) on the files as the front end gives them, and
//! reads back the run's conversation up to the step; the front end writes the files (the
//! disk here, `write`; an editor's WorkspaceEdit), then `settle` marks the steps undone, and
//! the new run is `request`'s: a new run of the instruction that follows the conversation.

use std::collections::BTreeMap;
use std::path::Path;

use agent_ls_core::conversation::Earlier;
use agent_ls_core::edit::history::{self, History, Step};
use agent_ls_core::edit::{self, FileChange, Limits};

use super::{Begin, RunRequest};
use crate::drive::{ResumeError, recorded_store};
use crate::steps::StepError;
use crate::store::StoreError;

/// Why a run was not rewound; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum NotRewound {
    #[error(transparent)]
    NoStore(#[from] ResumeError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("there is no applied step {0} to rewind to (`agent-ls.status` lists the steps)")]
    NoSuchStep(u64),
    /// A later step cannot be taken back on the files as they are: the reversal names the
    /// file and its lines.
    #[error("nothing was rewound: {0}")]
    Changed(history::StepError),
    #[error(transparent)]
    Files(#[from] StepError),
}

/// A rewind decided but not written.
#[derive(Debug, Clone)]
pub struct Rewind {
    /// The run rewound, and the step it goes back to.
    pub run_id: String,
    pub step: u64,
    /// The run's later steps taken back, newest first.
    pub undone: Vec<u64>,
    /// What each file the later steps changed becomes.
    pub changes: Vec<FileChange>,
    /// Files the later steps created, to delete.
    pub deletes: Vec<String>,
    /// The run's conversation up to the step.
    pub earlier: Earlier,
}

impl Rewind {
    /// The files it writes or deletes.
    pub fn files(&self) -> Vec<String> {
        let mut files: Vec<String> = self.changes.iter().map(|c| c.path.clone()).collect();
        files.extend(self.deletes.iter().cloned());
        files
    }

    /// What was done, as every surface says it: "rewound run R to step N: undid step(s) 5, 4
    /// (calc.py, notes.py)".
    pub fn describe(&self) -> String {
        let or_none = |list: Vec<String>, none: &str| match list.is_empty() {
            true => none.to_string(),
            false => list.join(", "),
        };
        format!(
            "rewound run {} to step {}: undid step(s) {} ({})",
            self.run_id,
            self.step,
            or_none(self.undone.iter().map(u64::to_string).collect(), "none"),
            or_none(self.files(), "no files")
        )
    }

    /// The new run: `instruction`, following the conversation up to the step, in the
    /// checkout where the rewound run's files are.
    pub fn request(&self, instruction: impl Into<String>) -> RunRequest {
        RunRequest {
            begin: self.begin(),
            ..RunRequest::new(instruction)
        }
    }

    /// How the new run begins: following the conversation up to the step.
    pub fn begin(&self) -> Begin {
        Begin::Rewound(Box::new(self.earlier.clone()))
    }
}

/// Decides the rewind to step `step` in the workspace at `root`, on the files as `read`
/// gives them (an editor's buffers, else the disk). Blocking: the store and the journal.
pub fn plan(
    root: &Path,
    step: u64,
    limits: &Limits,
    read: impl Fn(&str) -> Option<String>,
) -> Result<Rewind, NotRewound> {
    let store = recorded_store(root)?;
    let history = History::restore(store.load_steps()?);
    let at = history
        .find_done(step)
        .ok_or(NotRewound::NoSuchStep(step))?;
    let run_id = at.run_id.clone();
    let mut later: Vec<&Step> = history
        .done_of_run(&run_id)
        .into_iter()
        .filter(|id| *id > step)
        .filter_map(|id| history.find_done(id))
        .collect();
    later.sort_by_key(|s| std::cmp::Reverse(s.id));
    // Each step is taken back on the texts the newer ones left: the files as they will be.
    let mut after: BTreeMap<String, Option<String>> = BTreeMap::new();
    for s in &later {
        let now = |path: &str| after.get(path).cloned().unwrap_or_else(|| read(path));
        let reversal = history::revert(s, now, limits).map_err(NotRewound::Changed)?;
        for c in reversal.changes {
            after.insert(c.path, Some(c.new_text));
        }
        for path in reversal.deletes {
            after.insert(path, None);
        }
    }
    let (mut changes, mut deletes) = (Vec::new(), Vec::new());
    for (path, text) in after {
        let before = read(&path);
        match text {
            Some(t) if before.as_deref() != Some(t.as_str()) => {
                changes.push(edit::change_between(&path, before.as_deref(), &t));
            }
            None if before.is_some() => deletes.push(path),
            _ => {}
        }
    }
    let recorded_ms = store.step_recorded_ms(step)?.unwrap_or(i64::MAX);
    Ok(Rewind {
        earlier: super::earlier::at_step(root, &run_id, step, recorded_ms),
        undone: later.iter().map(|s| s.id).collect(),
        run_id,
        step,
        changes,
        deletes,
    })
}

/// Writes a planned rewind's files on disk (the CLI's and MCP's way).
pub fn write(root: &Path, rewind: &Rewind) -> Result<(), NotRewound> {
    crate::files::write_changes(root, &rewind.changes).map_err(StepError::from)?;
    crate::steps::delete_created(root, &rewind.deletes)?;
    Ok(())
}

/// After the files are back: the later steps are undone in the store, so `agent-ls undo`
/// does not take them back a second time and redo can bring them back.
pub fn settle(root: &Path, rewind: &Rewind) -> Result<(), NotRewound> {
    let store = recorded_store(root)?;
    for id in &rewind.undone {
        crate::steps::mark(&store, *id, true)?;
    }
    Ok(())
}

/// Plans, writes and settles a rewind on the files on disk.
pub fn on_disk(root: &Path, step: u64, limits: &Limits) -> Result<Rewind, NotRewound> {
    let rewind = plan(
        root,
        step,
        limits,
        |path| match crate::files::read_for_plan(root, path) {
            edit::FileText::Text(t) => Some(t),
            _ => None,
        },
    )?;
    write(root, &rewind)?;
    settle(root, &rewind)?;
    Ok(rewind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps;

    const V0: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a\n";
    const V1: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a\n";
    const V2: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * a\n";

    /// Run `run_a` changed calc.py twice (steps 1 and 2) and created notes.txt (step 3);
    /// another run's step 4 changed other.py.
    fn three_steps() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |path: &str, before: Option<&str>, after: &str, run: &str| {
            std::fs::write(root.join(path), after).unwrap();
            let change = edit::change_between(path, before, after);
            steps::record(root, vec![change], run, "fix").unwrap();
        };
        write("calc.py", Some(V0), V1, "run_a");
        write("calc.py", Some(V1), V2, "run_a");
        write("notes.txt", None, "tried mul\n", "run_a");
        write("other.py", Some(""), "x = 1\n", "run_b");
        dir
    }

    #[test]
    fn the_runs_later_steps_go_back_and_other_runs_stay() {
        let dir = three_steps();
        let root = dir.path();
        let done = on_disk(root, 1, &Limits::default()).unwrap();
        assert_eq!(
            (done.run_id.as_str(), done.undone.clone()),
            ("run_a", vec![3, 2])
        );
        assert_eq!(std::fs::read_to_string(root.join("calc.py")).unwrap(), V1);
        assert!(!root.join("notes.txt").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("other.py")).unwrap(),
            "x = 1\n"
        );
        // The steps are undone: redo brings back the one undone last, step 2.
        let (redone, _) = steps::redo(root, &Limits::default()).unwrap();
        assert_eq!(redone, 2);
        assert!(matches!(
            on_disk(root, 9, &Limits::default()),
            Err(NotRewound::NoSuchStep(9))
        ));
    }

    #[test]
    fn a_file_edited_since_at_a_later_steps_lines_refuses_naming_it() {
        let dir = three_steps();
        let root = dir.path();
        let edited = V2.replace("a * a", "a * a * 2");
        std::fs::write(root.join("calc.py"), &edited).unwrap();
        let refused = on_disk(root, 1, &Limits::default()).unwrap_err();
        assert!(refused.to_string().contains("calc.py"), "{refused}");
        // Nothing was changed: the file and the created one stay.
        assert_eq!(
            std::fs::read_to_string(root.join("calc.py")).unwrap(),
            edited
        );
        assert!(root.join("notes.txt").exists());
    }
}
