//! A proposed change on its way to the files: located on the current text (`Locating`),
//! shown for approval (`Approving`), applied (`Applying`), then tested. `Change` is that
//! way's own state: the proposal, what was refused and why (the same change again ends the
//! run), the change waiting for approval, and each applied change, to see edits alternate.
//! Each function returns where the run goes (`Next`); `flow.rs` moves it.

pub(super) mod state;
mod undo;

#[cfg(test)]
pub(super) use state::Change;

use super::next::{Next, To};
use super::{Effect, Event, Phase, Run};
use crate::edit::{EditPlan, EditStatus, FileChange, PlanOutcome, elision, verify};

/// The coder's readable edits: located, unless they are the very edits refused before.
pub(super) fn locate(run: &mut Run, plan: EditPlan) -> Next {
    // Asking, locating or applying them again would only repeat the refusal until the
    // budget is spent.
    let hash = plan_hash(&plan);
    if let Some(why) = run.change.refusal(hash) {
        let answer =
            format!("stopped: the model proposed again the change that was refused ({why})");
        return Next::fail(answer);
    }
    run.change.proposal = hash;
    run.change.replaces = replaces_of(&plan);
    Next::enter(Phase::Locating, vec![Effect::Locate(plan)])
}

/// Each edit's normalised path, SEARCH and REPLACE (a whole file's content with no SEARCH).
fn replaces_of(plan: &EditPlan) -> Vec<(String, String, String)> {
    plan.edits
        .iter()
        .filter_map(|e| {
            let path = crate::edit::normalize_path(std::path::Path::new(""), &e.path).ok()?;
            let (search, replace) = match &e.kind {
                crate::edit::EditKind::WholeFile { content } => ("", content.as_str()),
                _ => e.search_replace().map(|(s, r, _)| (s, r))?,
            };
            Some((path, search.to_string(), replace.to_string()))
        })
        .collect()
}

/// The located edits: shown for approval, or, when some did not apply, sent back to the
/// coder with the reasons.
pub(super) fn on_locating(run: &mut Run, event: Event) -> Next {
    let Event::Located(outcome) = event else {
        return Next::stay(Vec::new());
    };
    if !outcome.all_applied() || outcome.changes.is_empty() {
        return not_located(run, &outcome);
    }
    if let Some(why) = not_utf8(run, &outcome) {
        return refuse(run, "utf8", why);
    }
    if let Some(why) = whole_file_elision(run, &outcome) {
        return elided(run, why);
    }
    // The model was told why this very change was refused, and sent it again: asking again
    // would only loop until the budget is spent.
    if let Some(why) = run.change.refusal(diff_hash(&outcome.changes)) {
        let answer =
            format!("stopped: the model proposed again the change that was refused ({why})");
        return Next::fail(answer);
    }
    let diff = outcome.unified_diff();
    run.change.pending = outcome.changes;
    // The status shows what the run waits for, not the step before it.
    let files: Vec<&str> = run.change.pending.iter().map(|c| c.path.as_str()).collect();
    let effects = vec![
        Effect::Progress(format!("proposing a change to {}", files.join(", "))),
        Effect::AskApproval {
            changes: run.change.pending.clone(),
            diff,
        },
    ];
    Next::enter(Phase::Approving, effects)
}

/// A plan with nothing to approve: every edit already in place (the tests are next), or
/// some refused (none is applied, and the coder hears why).
fn not_located(run: &mut Run, outcome: &PlanOutcome) -> Next {
    if outcome.all_applied() {
        // Everything was already there: nothing to change, so check the tests.
        return Next::enter(
            Phase::Testing,
            vec![
                Effect::Progress("the edits are already in place; running the tests".into()),
                Effect::RunTests,
            ],
        );
    }
    let why: Vec<String> = outcome
        .refused()
        .map(|r| match &r.status {
            crate::edit::EditStatus::Refused { reason, .. } => {
                // The rule, without the closest lines the feedback shows.
                let rule = reason.split("; the closest lines").next().unwrap_or(reason);
                format!("{}: {rule}", r.path)
            }
            _ => r.path.clone(),
        })
        .collect();
    let proposal = run.change.proposal;
    let reason = why.join("; ");
    run.change.refused.push((proposal, reason.clone()));
    run.feedback.push(format!(
        "Some edits could not be applied, so none were. Fix them and send the whole change again \
         (the same edits again end the run):\n{}",
        outcome.refusal_report()
    ));
    let repair = Effect::Repair {
        class: repair_class(&reason),
        reason,
    };
    Next::retry("the proposed edits did not apply").after(vec![repair])
}

/// The class of a refused edit, by its reason, for the journal and `agent-ls stats`.
pub(super) fn repair_class(reason: &str) -> &'static str {
    let classes: [(&str, &'static str); 8] = [
        ("elision", "elision"),
        ("`...`", "elision"),
        ("indentation", "indentation"),
        ("not found", "not_found"),
        ("matches", "ambiguous"),
        ("is not the line you wrote", "changed_line"),
        ("overlaps", "overlap"),
        ("outside the workspace", "path"),
    ];
    classes
        .iter()
        .find(|(needle, _)| reason.contains(needle))
        .map_or("refused", |(_, class)| class)
}

/// Why a whole-file write of a fix drops most of an existing file's code, which stands for
/// an elision unless the goal asks for removal.
fn whole_file_elision(run: &Run, outcome: &PlanOutcome) -> Option<String> {
    if run.settings.intent != Some(super::goal::Intent::Fix) || asks_removal(&run.goal) {
        return None;
    }
    let whole: Vec<&str> = outcome
        .reports
        .iter()
        .filter(|r| {
            matches!(
                r.status,
                EditStatus::Applied {
                    rule: crate::edit::Rule::WholeFile,
                    ..
                }
            )
        })
        .map(|r| r.path.as_str())
        .collect();
    outcome
        .changes
        .iter()
        .filter(|c| whole.contains(&c.path.as_str()))
        .find_map(|c| {
            let original = c.original.as_deref()?;
            elision::dropped_most(original, &c.new_text).map(|why| format!("{}: {why}", c.path))
        })
}

/// Whether a goal asks for code to go.
fn asks_removal(goal: &str) -> bool {
    let goal = goal.to_lowercase();
    [
        "remove",
        "delete",
        "drop",
        "strip",
        "get rid",
        "clean up",
        "rewrite",
        "replace the file",
    ]
    .iter()
    .any(|w| goal.contains(w))
}

/// An elided change: nothing is written, and the coder is asked for the lines in full.
fn elided(run: &mut Run, why: String) -> Next {
    refuse(run, "elision", why)
}

/// A located change refused before any write, as a repair of `class`: the coder hears why.
fn refuse(run: &mut Run, class: &'static str, why: String) -> Next {
    let proposal = run.change.proposal;
    run.change.refused.push((proposal, why.clone()));
    run.feedback.push(format!(
        "The change was not applied: {why}. Nothing was written (the same edits again end the run)."
    ));
    Next::retry("the change was refused before any write")
        .after(vec![Effect::Repair { class, reason: why }])
}

/// Why a change may not be written because the answer held bytes that are not UTF-8: each
/// stands as U+FFFD in the text, and a change that brings in U+FFFD would write it.
fn not_utf8(run: &mut Run, outcome: &PlanOutcome) -> Option<String> {
    let bad = std::mem::take(&mut run.change.bad_bytes);
    if bad.is_empty() {
        return None;
    }
    let count = |t: &str| t.matches('\u{FFFD}').count();
    let c = outcome
        .changes
        .iter()
        .find(|c| count(&c.new_text) > count(c.original.as_deref().unwrap_or("")))?;
    let line = c
        .new_text
        .lines()
        .position(|l| l.contains('\u{FFFD}'))
        .map_or(1, |i| i + 1);
    Some(format!(
        "utf8: your answer held bytes that are not UTF-8 ({}), which would have been written into {} as U+FFFD at line {line}; \
         send the edit again with those characters written as UTF-8 text",
        bad.join("; "),
        c.path
    ))
}

/// The user's (or the approval policy's) answer to the proposed change. (A rejected tester's
/// test is the tester's: `flow.rs` hands it `reproduce::on_rejected` first.)
pub(super) fn on_approving(run: &mut Run, event: Event) -> Next {
    match event {
        Event::Approved => Next::enter(
            Phase::Applying,
            vec![Effect::Apply(run.change.pending.clone())],
        ),
        Event::Refused(why) => {
            let change = &mut run.change;
            change
                .refused
                .push((diff_hash(&change.pending), why.clone()));
            change.refused.push((change.proposal, why.clone()));
            change.pending.clear();
            run.feedback.push(format!(
                "The change was not applied: {why}. Make the change again without that \
                 (the same change again ends the run)."
            ));
            Next::retry("the change was refused")
        }
        Event::Rejected => {
            Next::fail("the proposed change was rejected; nothing was applied".into())
        }
        _ => Next::stay(Vec::new()),
    }
}

/// The change reached the files (the tests are next, unless the language server found
/// errors it introduced), failed, or met text that moved on.
pub(super) fn on_applying(run: &mut Run, event: Event) -> Next {
    match event {
        Event::Applied => on_applied(run, None),
        Event::AppliedWithErrors(report) => on_applied(run, Some(report)),
        Event::ApplyFailed(why) => Next::fail(format!("the change could not be applied: {why}")),
        Event::Stale(why) => {
            run.change.pending.clear();
            run.change.undoing = None;
            run.feedback.push(format!(
                "{why}. The files below are the current text; make the change again against it."
            ));
            Next::retry("the file changed while the change was prepared")
        }
        _ => Next::stay(Vec::new()),
    }
}

/// Tests that fail after a change, before the testing phase sees them (`flow.rs`): the
/// change just applied is undone first when it made them worse. `None`: the testing phase
/// takes the event.
pub(super) fn undo_if_worse(run: &mut Run, event: &Event) -> Option<Next> {
    match event {
        Event::TestsFinished(now) if !now.passed => undo::if_worse(run, now),
        _ => None,
    }
}

/// What the written files do not hold of the change, by the after-write check: lines the
/// edit did not mean to change that changed, or a REPLACE the file does not hold.
fn damaged(run: &mut Run, applied: &[FileChange]) -> Option<String> {
    let written = std::mem::take(&mut run.change.written);
    let replaces = std::mem::take(&mut run.change.replaces);
    applied.iter().find_map(|c| {
        let (_, text) = written.iter().find(|(p, _)| *p == c.path)?;
        let mine: Vec<(String, String)> = replaces
            .iter()
            .filter(|(p, _, _)| *p == c.path)
            .map(|(_, s, r)| (s.clone(), r.clone()))
            .collect();
        verify::check(c, text, &mine)
    })
}

/// A change written but not as it meant: the run may not end done on it. The coder hears
/// what is wrong, with the files as they now are, and mends them.
fn damage(run: &mut Run, why: String) -> Next {
    run.feedback.push(format!(
        "Your change was written, but the file is not what it meant: {why}. The files below \
         are their text now; send the edits that make them whole (what the change meant, \
         nothing lost and nothing added)."
    ));
    Next::retry("the written file is not what the change meant").after(vec![Effect::Repair {
        class: "damaged",
        reason: why,
    }])
}

/// Rounds in a row the coder is sent back to the language server's errors before the tests
/// run anyway (a server's error the model cannot fix must not hold the run).
const MAX_ERROR_ROUNDS: u32 = 3;

/// The applied change is the run's: its history, its files. Returns it.
fn applied(run: &mut Run) -> Vec<FileChange> {
    let pending = std::mem::take(&mut run.change.pending);
    run.change.edit_history.push(diff_hash(&pending));
    remember_originals(run, &pending);
    for c in &pending {
        if !run.files_changed.contains(&c.path) {
            run.files_changed.push(c.path.clone());
        }
    }
    pending
}

/// The change is on the files: the after-write check first (a damaged file is mended
/// before anything else), then an undo of a worse change is told to the coder, then the
/// language server's new errors (`lsp`) go back to the coder, else the tests run.
fn on_applied(run: &mut Run, lsp: Option<String>) -> Next {
    let pending = applied(run);
    if let Some(why) = damaged(run, &pending) {
        return damage(run, why);
    }
    if let Some(why) = run.change.undoing.take() {
        run.feedback.push(undo::told(&why, &pending));
        return Next::retry("the change made things worse");
    }
    run.change.last_applied = pending;
    if let Some(report) = lsp {
        return with_errors(run, report);
    }
    run.change.error_rounds = 0;
    Next::enter(
        Phase::Testing,
        vec![
            Effect::Progress("running the tests".into()),
            Effect::RunTests,
        ],
    )
}

/// The language server's new errors go to the coder as the edit's result, in the same
/// iteration; after `MAX_ERROR_ROUNDS` rounds in a row the tests run anyway.
fn with_errors(run: &mut Run, report: String) -> Next {
    run.change.error_rounds += 1;
    if run.change.error_rounds > MAX_ERROR_ROUNDS {
        run.change.error_rounds = 0;
        return Next::enter(
            Phase::Testing,
            vec![
                Effect::Progress(
                    "the language server still reports errors; running the tests".into(),
                ),
                Effect::RunTests,
            ],
        );
    }
    run.feedback.push(format!(
        "The edit was applied, but the project's language server reports errors it introduced \
         (the tests have not run). Fix them with a new edit against the current text:\n{report}"
    ));
    // The coder is asked again within the same iteration: no iteration and no retry is spent.
    Next::new(
        vec![Effect::Progress(
            "the edit introduced errors; asking the model to fix them".into(),
        )],
        To::NewTurn(Phase::Coding),
    )
}

/// Each file of an applied change: its text before the run (kept from its first change) and
/// its text now, for the steps' diff.
fn remember_originals(run: &mut Run, applied: &[FileChange]) {
    for c in applied {
        match run.originals.iter_mut().find(|(p, _, _)| *p == c.path) {
            Some(entry) => entry.2 = c.new_text.clone(),
            None => run
                .originals
                .push((c.path.clone(), c.original.clone(), c.new_text.clone())),
        }
    }
}

/// Identifies a proposal by its edits, so the same edits sent again are known.
fn plan_hash(plan: &EditPlan) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(plan).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// Identifies a located change by its files' new text.
fn diff_hash(changes: &[FileChange]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for c in changes {
        c.path.hash(&mut h);
        c.new_text.hash(&mut h);
    }
    h.finish()
}
