//! An applied change that made things worse is undone before the coder tries again: a test
//! that passed before it fails, or it left a syntax or import error. Its files are put back
//! with the step's own inverse, and the coder hears what was undone and sees the restored
//! text, so the next attempt starts from code that worked as well as before, not worse.

use super::super::next::Next;
use super::super::{Effect, Phase, Run, TestSummary};
use crate::edit::{FileChange, apply};

/// Errors that say the code no longer loads, whatever its tests.
const BROKEN: [&str; 5] = [
    "SyntaxError",
    "IndentationError",
    "TabError",
    "ImportError",
    "ModuleNotFoundError",
];

/// Why the tests `now` are worse than `before`, if they are.
pub(super) fn worse(before: &TestSummary, now: &TestSummary) -> Option<String> {
    if now.no_tests || before.no_tests {
        return None;
    }
    if now.passed_count < before.passed_count {
        return Some(format!(
            "{} test(s) passed before it and {} pass after it",
            before.passed_count, now.passed_count
        ));
    }
    BROKEN
        .iter()
        .find(|e| now.report.contains(*e) && !before.report.contains(*e))
        .map(|e| format!("it left a {e}"))
}

/// The change that puts `applied` back: each file's text before it, by the step's inverse.
/// `None` when a file was created by it (nothing to restore it to) or the inverse does not
/// apply.
pub(super) fn inverse(applied: &[FileChange]) -> Option<Vec<FileChange>> {
    applied
        .iter()
        .map(|c| {
            c.original.as_ref()?;
            let (restored, inverse) = apply::apply_to_string(&c.new_text, &c.inverse).ok()?;
            Some(FileChange {
                path: c.path.clone(),
                original: Some(c.new_text.clone()),
                new_text: restored,
                edits: c.inverse.clone(),
                inverse,
            })
        })
        .collect()
}

/// After tests that fail: when the change just applied made them worse (and the setting is
/// on), its files are put back before anything else. `None`: the run goes on as before.
pub(super) fn if_worse(run: &mut Run, now: &TestSummary) -> Option<Next> {
    if !run.settings.undo_worse {
        return None;
    }
    let why = worse(run.tests.as_ref()?, now)?;
    let back = inverse(&run.change.last_applied)?;
    if back.is_empty() {
        return None;
    }
    let files: Vec<&str> = back.iter().map(|c| c.path.as_str()).collect();
    let reason = format!(
        "the change to {} made things worse: {why}",
        files.join(", ")
    );
    run.change.undoing = Some(reason.clone());
    run.change.pending = back.clone();
    Some(Next::enter(
        Phase::Applying,
        vec![
            Effect::Repair {
                class: "worse",
                reason,
            },
            Effect::Progress("undoing the change that made things worse".into()),
            Effect::Apply(back),
        ],
    ))
}

/// What the coder hears once the change is undone: why, and the restored text of each
/// place it had changed, numbered as the file is now.
pub(super) fn told(why: &str, restored: &[FileChange]) -> String {
    let mut s = format!(
        "Your last change was undone because {why}. The files are back to their text before it. \
         Make the change again without breaking what worked. The restored text:\n"
    );
    for c in restored {
        // `edits` are in the worse text's coordinates: each lands where the ones before it
        // (in document order) moved it.
        let mut edits: Vec<_> = c.edits.iter().collect();
        edits.sort_by_key(|e| e.range.start);
        let mut shift: isize = 0;
        for e in edits {
            let at = (e.range.start as isize + shift).max(0) as usize;
            shift += e.text.len() as isize - e.range.len() as isize;
            let first = c.new_text[..at.min(c.new_text.len())].matches('\n').count() + 1;
            s.push_str(&format!("{} (from line {first}):\n", c.path));
            for (i, line) in e.text.lines().enumerate() {
                s.push_str(&format!("{:>5} | {line}\n", first + i));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::TextEdit;

    fn summary(passed: u32, report: &str) -> TestSummary {
        TestSummary {
            passed: false,
            passed_count: passed,
            failed_count: 1,
            report: report.into(),
            fingerprint: String::new(),
            no_tests: false,
            stopped: None,
        }
    }

    #[test]
    fn fewer_passing_tests_or_a_new_syntax_error_is_worse() {
        assert!(
            worse(&summary(2, ""), &summary(1, ""))
                .unwrap()
                .contains("2 test(s) passed")
        );
        assert_eq!(worse(&summary(1, ""), &summary(1, "")), None);
        assert_eq!(
            worse(&summary(0, "SyntaxError"), &summary(0, "SyntaxError")),
            None
        );
        assert!(
            worse(
                &summary(0, ""),
                &summary(0, "E   SyntaxError: invalid syntax")
            )
            .is_some()
        );
    }

    #[test]
    fn the_inverse_puts_the_text_back_and_names_the_restored_lines() {
        let old = "a = 1\nb = 2\n";
        let edits = vec![TextEdit {
            range: 6..12,
            text: "b = 3\n".into(),
        }];
        let (new_text, inverse) = apply::apply_to_string(old, &edits).unwrap();
        let change = FileChange {
            path: "x.py".into(),
            original: Some(old.into()),
            new_text,
            edits,
            inverse,
        };
        let back = super::inverse(&[change]).unwrap();
        assert_eq!(back[0].new_text, old);
        let said = told("it broke", &back);
        assert!(
            said.contains("x.py (from line 2):\n    2 | b = 2\n"),
            "{said}"
        );
    }
}
