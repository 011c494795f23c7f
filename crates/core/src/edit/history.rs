//! The history of applied agent steps, and the changes that undo or redo one on the files as
//! they are now: refused when the user changed the lines the step touched, allowed when the
//! user's edits are elsewhere. Pure; the caller supplies the current texts.

use serde::Serialize;

use super::{FileChange, Limits, relocate};

/// One applied step: its changes as applied (`original` before, `new_text` after), the run
/// and task it belongs to, and each file's state after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub id: u64,
    pub run_id: String,
    pub goal: String,
    /// The plan's task the step worked on ("T1 add a subtract function").
    pub task: String,
    pub changes: Vec<FileChange>,
    pub files: Vec<StepFile>,
}

/// A file as the step left it: a hash of its text and the editor's buffer version, when the
/// file was open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StepFile {
    pub path: String,
    /// FNV-1a 64 of the text, in hex: stable across builds, so stored hashes stay comparable.
    pub hash: String,
    pub version: Option<i32>,
}

/// The text hash a `StepFile` records.
pub fn text_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl Step {
    /// The files' records for changes as applied, with the buffer versions the editor
    /// reported after them.
    pub fn files_after(
        changes: &[FileChange],
        version: impl Fn(&str) -> Option<i32>,
    ) -> Vec<StepFile> {
        changes
            .iter()
            .map(|c| StepFile {
                path: c.path.clone(),
                hash: text_hash(&c.new_text),
                version: version(&c.path),
            })
            .collect()
    }
}

/// What `agent-ls.status` lists of a step.
#[derive(Debug, Clone, Serialize)]
pub struct StepSummary {
    pub id: u64,
    pub run_id: String,
    pub goal: String,
    pub task: String,
    pub files: Vec<String>,
    pub undone: bool,
}

#[derive(Debug, Default)]
pub struct History {
    done: Vec<Step>,
    undone: Vec<Step>,
    next_id: u64,
}

impl History {
    /// Records an applied step; a new step clears what could be redone.
    pub fn record(
        &mut self,
        run_id: &str,
        goal: &str,
        task: &str,
        changes: Vec<FileChange>,
        files: Vec<StepFile>,
    ) -> u64 {
        self.next_id += 1;
        self.undone.clear();
        self.done.push(Step {
            id: self.next_id,
            run_id: run_id.into(),
            goal: goal.into(),
            task: task.into(),
            changes,
            files,
        });
        self.next_id
    }

    pub fn last_done(&self) -> Option<&Step> {
        self.done.last()
    }

    pub fn last_undone(&self) -> Option<&Step> {
        self.undone.last()
    }

    /// An applied step by its id (for undo of a named step).
    pub fn find_done(&self, id: u64) -> Option<&Step> {
        self.done.iter().find(|s| s.id == id)
    }

    /// The applied steps of one run, newest first (a rolled-back run's, to mark undone).
    pub fn done_of_run(&self, run_id: &str) -> Vec<u64> {
        self.done
            .iter()
            .rev()
            .filter(|s| s.run_id == run_id)
            .map(|s| s.id)
            .collect()
    }

    /// A step was undone (the latest, or a named older one): it moves to the redo stack.
    pub fn mark_undone(&mut self, id: u64) {
        if let Some(i) = self.done.iter().position(|s| s.id == id) {
            let s = self.done.remove(i);
            self.undone.push(s);
        }
    }

    /// The latest undone step was redone.
    pub fn mark_redone(&mut self, id: u64) {
        if self.undone.last().is_some_and(|s| s.id == id)
            && let Some(s) = self.undone.pop()
        {
            self.done.push(s);
        }
    }

    /// Rebuilds the history from stored steps and whether each is undone.
    pub fn restore(mut steps: Vec<(Step, bool)>) -> History {
        steps.sort_by_key(|(s, _)| s.id);
        let next_id = steps.last().map_or(0, |(s, _)| s.id);
        let (undone, done): (Vec<_>, Vec<_>) = steps.into_iter().partition(|(_, u)| *u);
        let mut undone: Vec<Step> = undone.into_iter().map(|(s, _)| s).collect();
        // The redo stack's top is the step undone last, which is the oldest undone one.
        undone.reverse();
        History {
            done: done.into_iter().map(|(s, _)| s).collect(),
            undone,
            next_id,
        }
    }

    /// Recent steps, newest first.
    pub fn summaries(&self, limit: usize) -> Vec<StepSummary> {
        let summary = |s: &Step, undone| StepSummary {
            id: s.id,
            run_id: s.run_id.clone(),
            goal: s.goal.clone(),
            task: s.task.clone(),
            files: s.changes.iter().map(|c| c.path.clone()).collect(),
            undone,
        };
        let mut out: Vec<StepSummary> = self.undone.iter().map(|s| summary(s, true)).collect();
        out.extend(self.done.iter().rev().map(|s| summary(s, false)));
        out.truncate(limit);
        out
    }
}

/// What reverts a step: changes to files it edited, and files it created, to delete.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reversal {
    pub changes: Vec<FileChange>,
    pub deletes: Vec<String>,
}

/// Which way a step is moved: taken back, or applied again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Undo,
    Redo,
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::Undo => "undo",
            Direction::Redo => "redo",
        })
    }
}

/// Why a step cannot be undone or redone on the files as they are now; each says which file
/// is in the way, and that the user's typing is kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error(
        "cannot undo step {step}: {path} was created by it and has changed since; undo never deletes your typing"
    )]
    CreatedFileChanged { step: u64, path: String },
    #[error("cannot redo step {step}: {path} exists again")]
    CreatedFileExists { step: u64, path: String },
    #[error("cannot {direction} step {step}: {path} no longer exists")]
    FileGone {
        direction: Direction,
        step: u64,
        path: String,
    },
    /// `lines` names the step's lines in the file ("2", "4-6, 9").
    #[error(
        "cannot {direction} step {step}: {path} was changed at the lines the step touched (line {lines}); undo never overwrites your typing"
    )]
    LinesChanged {
        direction: Direction,
        step: u64,
        path: String,
        lines: String,
    },
}

/// What reverts `step` on the current texts (`current(path)`). A file the step created is
/// deleted, but only while it holds exactly what the step wrote.
pub fn revert(
    step: &Step,
    current: impl Fn(&str) -> Option<String>,
    limits: &Limits,
) -> Result<Reversal, StepError> {
    let mut out = Reversal::default();
    for c in &step.changes {
        let Some(before) = &c.original else {
            match current(&c.path) {
                Some(now) if now == c.new_text => out.deletes.push(c.path.clone()),
                Some(_) => {
                    return Err(StepError::CreatedFileChanged {
                        step: step.id,
                        path: c.path.clone(),
                    });
                }
                // Already gone: nothing to delete.
                None => {}
            }
            continue;
        };
        let inverse = FileChange {
            path: c.path.clone(),
            original: Some(c.new_text.clone()),
            new_text: before.clone(),
            edits: c.inverse.clone(),
            inverse: c.edits.clone(),
        };
        out.changes.push(place(
            step.id,
            Direction::Undo,
            &inverse,
            current(&c.path),
            limits,
        )?);
    }
    Ok(out)
}

/// The changes that apply `step` again on the current texts.
pub fn reapply(
    step: &Step,
    current: impl Fn(&str) -> Option<String>,
    limits: &Limits,
) -> Result<Vec<FileChange>, StepError> {
    step.changes
        .iter()
        .map(|c| match (c.creates(), current(&c.path)) {
            // A created file comes back only where nothing is in its way.
            (true, None) => Ok(c.clone()),
            (true, Some(_)) => Err(StepError::CreatedFileExists {
                step: step.id,
                path: c.path.clone(),
            }),
            (false, now) => place(step.id, Direction::Redo, c, now, limits),
        })
        .collect()
}

/// Moves `change` onto the file's current text, or explains which lines block it.
fn place(
    id: u64,
    direction: Direction,
    change: &FileChange,
    now: Option<String>,
    limits: &Limits,
) -> Result<FileChange, StepError> {
    let Some(now) = now else {
        return Err(StepError::FileGone {
            direction,
            step: id,
            path: change.path.clone(),
        });
    };
    relocate(change, &now, limits).ok_or_else(|| {
        let from = change.original.as_deref().unwrap_or("");
        let lines: Vec<String> = change
            .edits
            .iter()
            .map(|e| {
                let first = from[..e.range.start].matches('\n').count() + 1;
                let last = first + from[e.range.clone()].matches('\n').count();
                if first == last {
                    format!("{first}")
                } else {
                    format!("{first}-{last}")
                }
            })
            .collect();
        StepError::LinesChanged {
            direction,
            step: id,
            path: change.path.clone(),
            lines: lines.join(", "),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::{FileText, apply_plan, parse_plan};
    use std::path::Path;

    const BEFORE: &str = "a = 1\nb = 2\nc = 3\n";

    fn step() -> Step {
        let plan =
            parse_plan(r#"{"path": "f.py", "search": "b = 2", "replace": "b = 20"}"#).unwrap();
        let outcome = apply_plan(&plan, Path::new("/ws"), &Limits::default(), |_| {
            FileText::Text(BEFORE.into())
        });
        Step {
            id: 1,
            run_id: "run_1".into(),
            goal: "g".into(),
            task: "T1 g".into(),
            files: Step::files_after(&outcome.changes, |_| Some(2)),
            changes: outcome.changes,
        }
    }

    #[test]
    fn undo_restores_and_redo_reapplies() {
        let s = step();
        let after = &s.changes[0].new_text;
        let undo = revert(&s, |_| Some(after.clone()), &Limits::default()).unwrap();
        assert_eq!(undo.changes[0].new_text, BEFORE);
        let redo = reapply(&s, |_| Some(BEFORE.into()), &Limits::default()).unwrap();
        assert_eq!(&redo[0].new_text, after);
    }

    #[test]
    fn undo_keeps_the_users_edits_elsewhere_and_refuses_on_the_same_lines() {
        let s = step();
        let undo = revert(
            &s,
            |_| Some("a = 1\nb = 20\nc = 3\nd = 4\n".into()),
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(undo.changes[0].new_text, "a = 1\nb = 2\nc = 3\nd = 4\n");
        let err = revert(
            &s,
            |_| Some("a = 1\nb = 21\nc = 3\n".into()),
            &Limits::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("f.py") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn refusals_read_as_they_always_have() {
        let path = || "f.py".to_string();
        let cases = [
            (
                StepError::CreatedFileChanged {
                    step: 3,
                    path: path(),
                },
                "cannot undo step 3: f.py was created by it and has changed since; undo never deletes your typing",
            ),
            (
                StepError::CreatedFileExists {
                    step: 3,
                    path: path(),
                },
                "cannot redo step 3: f.py exists again",
            ),
            (
                StepError::FileGone {
                    direction: Direction::Redo,
                    step: 3,
                    path: path(),
                },
                "cannot redo step 3: f.py no longer exists",
            ),
            (
                StepError::LinesChanged {
                    direction: Direction::Undo,
                    step: 3,
                    path: path(),
                    lines: "2, 4-6".into(),
                },
                "cannot undo step 3: f.py was changed at the lines the step touched (line 2, 4-6); undo never overwrites your typing",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn a_step_records_each_files_hash_and_version() {
        let s = step();
        assert_eq!(s.files[0].path, "f.py");
        assert_eq!(s.files[0].version, Some(2));
        assert_eq!(s.files[0].hash, text_hash("a = 1\nb = 20\nc = 3\n"));
        // FNV-1a of the empty text is its offset basis: the hash does not depend on the build.
        assert_eq!(text_hash(""), "cbf29ce484222325");
        assert_ne!(text_hash("a"), text_hash("b"));
    }

    #[test]
    fn a_created_file_is_deleted_on_undo_only_while_unchanged_and_comes_back_on_redo() {
        let created = FileChange {
            path: "new.py".into(),
            original: None,
            new_text: "x = 1\n".into(),
            edits: Vec::new(),
            inverse: Vec::new(),
        };
        let s = Step {
            id: 4,
            run_id: "run_1".into(),
            goal: "g".into(),
            task: "T1 g".into(),
            files: Vec::new(),
            changes: vec![created],
        };
        let limits = Limits::default();
        let undo = revert(&s, |_| Some("x = 1\n".into()), &limits).unwrap();
        assert_eq!(undo.deletes, vec!["new.py".to_string()]);
        assert!(undo.changes.is_empty());
        let err = revert(&s, |_| Some("x = 2\n".into()), &limits)
            .unwrap_err()
            .to_string();
        assert!(err.contains("new.py") && err.contains("changed"), "{err}");
        let redo = reapply(&s, |_| None, &limits).unwrap();
        assert!(redo[0].creates());
        assert!(reapply(&s, |_| Some(String::new()), &limits).is_err());
    }

    #[test]
    fn a_named_older_step_can_be_undone_and_goes_to_the_redo_stack() {
        let mut h = History::default();
        let first = h.record("run_1", "first", "T1", step().changes, Vec::new());
        let second = h.record("run_2", "second", "T1", step().changes, Vec::new());
        assert!(h.find_done(first).is_some());
        h.mark_undone(first);
        assert_eq!(h.last_done().map(|s| s.id), Some(second));
        assert_eq!(h.last_undone().map(|s| s.id), Some(first));
        assert!(h.find_done(first).is_none());
    }

    #[test]
    fn a_new_step_clears_redo_and_status_lists_newest_first() {
        let mut h = History::default();
        let id = h.record("run_1", "first", "T1", step().changes, Vec::new());
        h.mark_undone(id);
        assert!(h.last_undone().is_some());
        h.record("run_2", "second", "T1", step().changes, Vec::new());
        assert!(h.last_undone().is_none());
        assert_eq!(h.summaries(10)[0].goal, "second");
    }
}
