//! The edit engine, pure: model output becomes an `EditPlan`, each edit is located in the file
//! it names, and the located edits are applied with their inverses kept. No IO, no LSP types;
//! the caller supplies file contents and decides what to do with the result.

pub mod apply;
mod between;
mod change;
pub mod elision;
pub mod history;
pub mod locate;
pub mod parse;
pub mod plan;
pub mod verify;

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde::Serialize;

pub use apply::TextEdit;
pub use between::change_between;
pub use change::FileChange;
pub use locate::{Differing, Found, LocateError, LocateOptions, NumberedLine, Rule};
pub use parse::{ParseError, parse_plan, plan_from_tool_calls};
pub use plan::{Edit, EditKind, EditPlan};

/// Limits on what a model may change.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_edits_per_file: usize,
    pub max_file_bytes: usize,
    pub line_window: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_edits_per_file: 30,
            max_file_bytes: 1024 * 1024,
            line_window: 20,
        }
    }
}

/// What happened to one edit of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum EditStatus {
    Applied {
        rule: Rule,
        /// 1-based first line of the original text the edit replaced.
        line: usize,
        chosen_by_line: bool,
        /// Under a rule looser than exact, the located lines that differ from the model's
        /// copy (the lines the edit keeps stay the file's own).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        differing: Vec<Differing>,
    },
    AlreadyApplied,
    Refused {
        reason: String,
        closest: Vec<NumberedLine>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EditReport {
    /// 1-based position of the edit in the plan.
    pub index: usize,
    pub path: String,
    #[serde(flatten)]
    pub status: EditStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlanOutcome {
    pub reports: Vec<EditReport>,
    /// Files whose text changes, with only the edits that applied.
    pub changes: Vec<FileChange>,
}

impl PlanOutcome {
    /// Every edit applied or was already there.
    pub fn all_applied(&self) -> bool {
        self.reports
            .iter()
            .all(|r| !matches!(r.status, EditStatus::Refused { .. }))
    }

    pub fn refused(&self) -> impl Iterator<Item = &EditReport> {
        self.reports
            .iter()
            .filter(|r| matches!(r.status, EditStatus::Refused { .. }))
    }

    /// A unified diff of every changed file, for approval prompts and logs.
    pub fn unified_diff(&self) -> String {
        self.changes.iter().map(file_diff).collect()
    }

    /// What the model needs to hear about the edits that did not apply.
    pub fn refusal_report(&self) -> String {
        let mut out = String::new();
        for r in &self.reports {
            match &r.status {
                EditStatus::Applied { rule, line, .. } => out.push_str(&format!(
                    "edit {} to {}: applied at line {line} ({})\n",
                    r.index,
                    r.path,
                    rule.as_str()
                )),
                EditStatus::AlreadyApplied => out.push_str(&format!(
                    "edit {} to {}: already applied, nothing changed\n",
                    r.index, r.path
                )),
                EditStatus::Refused { reason, .. } => out.push_str(&format!(
                    "edit {} to {}: NOT applied: {reason}\n",
                    r.index, r.path
                )),
            }
        }
        out
    }
}

pub fn file_diff(change: &FileChange) -> String {
    let old = change.original.as_deref().unwrap_or("");
    let from = if change.creates() {
        "/dev/null".to_string()
    } else {
        format!("a/{}", change.path)
    };
    similar::TextDiff::from_lines(old, &change.new_text)
        .unified_diff()
        .context_radius(3)
        .header(&from, &format!("b/{}", change.path))
        .to_string()
}

/// Why a path may not be edited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path is empty")]
    Empty,
    #[error("`{0}` is outside the workspace; edit only files inside it, named from its root")]
    Outside(String),
}

/// A model's path as a clean path relative to the workspace root, refusing anything that
/// leaves it: `..` past the root, or an absolute path elsewhere. Symlinks need the file
/// system and are checked by the caller.
pub fn normalize_path(root: &Path, raw: &str) -> Result<String, PathError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(PathError::Empty);
    }
    let path = Path::new(raw);
    let relative = if path.is_absolute() {
        path.strip_prefix(root)
            .map_err(|_| PathError::Outside(raw.to_string()))?
    } else {
        path
    };
    let mut parts: Vec<&str> = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(p) => parts.push(
                p.to_str()
                    .ok_or_else(|| PathError::Outside(raw.to_string()))?,
            ),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(PathError::Outside(raw.to_string()));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(PathError::Outside(raw.to_string()));
            }
        }
    }
    if parts.is_empty() {
        return Err(PathError::Empty);
    }
    Ok(parts.join("/"))
}

/// What the caller knows about a file the plan names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileText {
    /// The file's current text (from the editor's buffer or the disk).
    Text(String),
    /// No such file: a whole-file edit creates it.
    Missing,
    /// The file may not be edited (outside the workspace through a symlink, unreadable...).
    Refused(String),
}

/// Locates and applies every edit of `plan`. `read` is asked once per distinct path, with the
/// path already normalised relative to `root`.
pub fn apply_plan(
    plan: &EditPlan,
    root: &Path,
    limits: &Limits,
    mut read: impl FnMut(&str) -> FileText,
) -> PlanOutcome {
    let mut reports: Vec<Option<EditReport>> = vec![None; plan.edits.len()];
    let mut changes = Vec::new();
    for (path, indices) in group_by_file(plan, root, &mut reports) {
        let mut report = |i: usize, status: EditStatus| {
            reports[i] = Some(EditReport {
                index: i + 1,
                path: path.clone(),
                status,
            })
        };
        let text = read(&path);
        if let Some(change) = change_file(plan, &path, &indices, text, limits, &mut report) {
            changes.push(change);
        }
    }
    PlanOutcome {
        reports: reports.into_iter().flatten().collect(),
        changes,
    }
}

/// The plan's edits grouped by their normalised path, files in the order the plan first
/// names them and edits in plan order inside each; a path that may not be edited is
/// reported refused here.
fn group_by_file(
    plan: &EditPlan,
    root: &Path,
    reports: &mut [Option<EditReport>],
) -> Vec<(String, Vec<usize>)> {
    let mut files: Vec<(String, Vec<usize>)> = Vec::new();
    let mut position: BTreeMap<String, usize> = BTreeMap::new();
    for (i, edit) in plan.edits.iter().enumerate() {
        match normalize_path(root, &edit.path) {
            Ok(path) => match position.get(&path) {
                Some(&at) => files[at].1.push(i),
                None => {
                    position.insert(path.clone(), files.len());
                    files.push((path, vec![i]));
                }
            },
            Err(err) => {
                reports[i] = Some(EditReport {
                    index: i + 1,
                    path: edit.path.clone(),
                    status: refused(err.to_string()),
                })
            }
        }
    }
    files
}

/// One file's edits (`indices` into the plan) on its text: each is reported through
/// `report`, and the change made of those that apply is returned, if any do.
fn change_file(
    plan: &EditPlan,
    path: &str,
    indices: &[usize],
    text: FileText,
    limits: &Limits,
    report: &mut impl FnMut(usize, EditStatus),
) -> Option<FileChange> {
    let original = match text {
        FileText::Text(t) => Some(t),
        FileText::Missing => None,
        FileText::Refused(reason) => {
            indices
                .iter()
                .for_each(|&i| report(i, refused(reason.clone())));
            return None;
        }
    };
    if let Some(reason) = over_limits(indices.len(), original.as_deref(), limits) {
        indices
            .iter()
            .for_each(|&i| report(i, refused(reason.clone())));
        return None;
    }
    let located = locate_all(plan, indices, original.as_deref(), limits, report);
    let located = without_overlaps(located, report);
    if located.is_empty() {
        return None;
    }
    let edits: Vec<TextEdit> = located.into_iter().map(|(_, e)| e).collect();
    let base = original.clone().unwrap_or_default();
    // Overlaps were removed above, so this cannot fail; an error would mean a bug, and
    // dropping the file's change is the safe answer.
    let (new_text, inverse) = apply::apply_to_string(&base, &edits).ok()?;
    Some(FileChange {
        path: path.to_string(),
        original,
        new_text,
        edits,
        inverse,
    })
}

/// Why a file's edits are all refused before any is located: too many for one file, or a
/// file too large for model edits.
fn over_limits(edits: usize, original: Option<&str>, limits: &Limits) -> Option<String> {
    if edits > limits.max_edits_per_file {
        return Some(format!(
            "{} edits to one file is over the limit of {}; split the change into smaller steps",
            edits, limits.max_edits_per_file
        ));
    }
    match original {
        Some(text) if text.len() > limits.max_file_bytes => Some(format!(
            "the file is {} bytes, over the {}-byte limit for model edits",
            text.len(),
            limits.max_file_bytes
        )),
        _ => None,
    }
}

/// Locates every edit against the original text (`None`: the file does not exist), reporting
/// each; the located ones come back with their plan index.
fn locate_all(
    plan: &EditPlan,
    indices: &[usize],
    original: Option<&str>,
    limits: &Limits,
    report: &mut impl FnMut(usize, EditStatus),
) -> Vec<(usize, TextEdit)> {
    let opts = LocateOptions {
        line_window: limits.line_window,
    };
    let locator = locate::Locator::new(original.unwrap_or_default());
    let mut located = Vec::new();
    for &i in indices {
        let (status, edit) = locate_edit(&plan.edits[i], original, &locator, &opts);
        // No elision is ever written: a marker standing for code refuses the edit.
        let (status, edit) = match (&status, edit, original) {
            (EditStatus::Applied { line, .. }, Some(e), Some(text)) => {
                match elision::check(&text[e.range.clone()], &e.text, *line) {
                    Some(why) => (refused(why), None),
                    None => (status, Some(e)),
                }
            }
            (_, edit, _) => (status, edit),
        };
        if let Some(edit) = edit {
            located.push((i, edit));
        }
        report(i, status);
    }
    located
}

/// One edit on the original text: what happened to it, and the text edit when it applies.
fn locate_edit(
    edit: &Edit,
    original: Option<&str>,
    locator: &locate::Locator,
    opts: &LocateOptions,
) -> (EditStatus, Option<TextEdit>) {
    let whole_file = |range: std::ops::Range<usize>, text: String| {
        let status = EditStatus::Applied {
            rule: Rule::WholeFile,
            line: 1,
            chosen_by_line: false,
            differing: Vec::new(),
        };
        (status, Some(TextEdit { range, text }))
    };
    match (&edit.kind, original) {
        (EditKind::WholeFile { content }, Some(text)) if text == content.as_str() => {
            (EditStatus::AlreadyApplied, None)
        }
        (EditKind::WholeFile { content }, original) => {
            whole_file(0..original.map_or(0, str::len), content.clone())
        }
        // An empty SEARCH on a file that does not exist creates it, as the coder's prompt
        // says.
        (_, None) if edit.search_replace().is_some_and(|(s, _, _)| s.trim().is_empty()) => {
            let content = edit.search_replace().map_or("", |(_, r, _)| r).to_string();
            whole_file(0..0, content)
        }
        (_, None) => (
            refused(
                "the file does not exist; create it with an empty SEARCH, or a whole-file edit (path and content)"
                    .into(),
            ),
            None,
        ),
        (_, Some(_)) => {
            let (search, replace, line) = edit.search_replace().unwrap_or(("", "", None));
            located_status(locator.locate(search, replace, line, opts))
        }
    }
}

/// What the locating cascade's answer means for one edit: its status, and the text edit
/// when it applies.
fn located_status(found: Result<Found, LocateError>) -> (EditStatus, Option<TextEdit>) {
    match found {
        Ok(Found::At(l)) => (
            EditStatus::Applied {
                rule: l.rule,
                line: l.line,
                chosen_by_line: l.chosen_by_line,
                differing: l.differing,
            },
            Some(TextEdit {
                range: l.range,
                text: l.replacement,
            }),
        ),
        Ok(Found::AlreadyApplied) => (EditStatus::AlreadyApplied, None),
        Err(err) => {
            let closest = match &err {
                LocateError::NotFound { closest } => closest.clone(),
                _ => Vec::new(),
            };
            let reason = err.to_string();
            (EditStatus::Refused { reason, closest }, None)
        }
    }
}

/// Refuses the later of any two edits that overlap, until none do.
fn without_overlaps(
    mut located: Vec<(usize, TextEdit)>,
    report: &mut impl FnMut(usize, EditStatus),
) -> Vec<(usize, TextEdit)> {
    loop {
        let edits: Vec<TextEdit> = located.iter().map(|(_, e)| e.clone()).collect();
        let Err(overlap) = apply::check_overlaps(&edits) else {
            return located;
        };
        let (first, second) = (located[overlap.first].0, located[overlap.second].0);
        report(
            second,
            refused(format!(
                "it overlaps edit {} to the same text; merge them into one edit",
                first + 1
            )),
        );
        located.remove(overlap.second);
    }
}

/// An edit refused for `reason`, with no closest lines to show.
fn refused(reason: String) -> EditStatus {
    EditStatus::Refused {
        reason,
        closest: Vec::new(),
    }
}

/// Moves a change computed against `change.original` onto `current`, the file's text now
/// (the user typed meanwhile, or the disk lacks the editor's unsaved changes). Each edit is
/// re-located by the cascade with its whole lines as the search text; `None` when one cannot
/// be placed exactly once.
pub fn relocate(change: &FileChange, current: &str, limits: &Limits) -> Option<FileChange> {
    let original = change.original.as_deref()?;
    if original == current {
        return Some(change.clone());
    }
    let locator = locate::Locator::new(current);
    let opts = LocateOptions {
        line_window: limits.line_window,
    };
    let mut moved = Vec::new();
    for e in &change.edits {
        // Widen to whole lines so the search text carries its context.
        let start = original[..e.range.start].rfind('\n').map_or(0, |i| i + 1);
        let end = original[e.range.end..]
            .find('\n')
            .map_or(original.len(), |i| e.range.end + i);
        // Whole lines, so they match whole lines only.
        let search = format!("{}\n", &original[start..end]);
        let replace = format!(
            "{}{}{}\n",
            &original[start..e.range.start],
            e.text,
            &original[e.range.end..end]
        );
        if search.trim().is_empty() {
            return None;
        }
        match locator.locate(&search, &replace, None, &opts) {
            Ok(Found::At(l)) if l.rule == Rule::Exact => moved.push(TextEdit {
                range: l.range,
                text: l.replacement,
            }),
            _ => return None,
        }
    }
    let (new_text, inverse) = apply::apply_to_string(current, &moved).ok()?;
    Some(FileChange {
        path: change.path.clone(),
        original: Some(current.to_string()),
        new_text,
        edits: moved,
        inverse,
    })
}

/// A file that changed while a change to it was prepared, where the change cannot be moved
/// onto its new text: the step is to be redone on fresh text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} changed while the change was prepared")]
pub struct Stale {
    pub path: String,
}

/// Moves a change onto the files as they are now, the one policy for text that moved on while
/// a change was prepared (the user typed, the disk changed): a file that still holds the text
/// the change was computed for keeps it as is; one that changed elsewhere gets it re-located
/// (`relocate`); otherwise the answer names the file, and the step is to be redone on fresh
/// text. `current` gives a file's text now, `None` when it does not exist.
pub fn rebase(
    changes: &[FileChange],
    mut current: impl FnMut(&str) -> Option<String>,
    limits: &Limits,
) -> Result<Vec<FileChange>, Stale> {
    let mut out = Vec::with_capacity(changes.len());
    for c in changes {
        let now = current(&c.path);
        if now == c.original {
            out.push(c.clone());
            continue;
        }
        match now.as_deref().and_then(|t| relocate(c, t, limits)) {
            Some(moved) => out.push(moved),
            None => {
                return Err(Stale {
                    path: c.path.clone(),
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `b = 2` becomes `b = 20` in f.py, which holds `original`.
    fn b_to_20(original: &str) -> PlanOutcome {
        let plan =
            parse_plan(r#"{"path": "f.py", "search": "b = 2", "replace": "b = 20"}"#).unwrap();
        apply_plan(&plan, Path::new("/ws"), &Limits::default(), |_| {
            FileText::Text(original.into())
        })
    }

    #[test]
    fn a_change_moves_onto_text_edited_elsewhere_but_not_onto_its_own_lines() {
        let original = "a = 1\nb = 2\nc = 3\n";
        let outcome = b_to_20(original);
        let change = &outcome.changes[0];
        let typed_above = "# new comment\na = 1\nb = 2\nc = 3\n";
        let moved = relocate(change, typed_above, &Limits::default()).unwrap();
        assert_eq!(moved.new_text, "# new comment\na = 1\nb = 20\nc = 3\n");
        assert!(relocate(change, "a = 1\nb = 5\nc = 3\n", &Limits::default()).is_none());
    }

    #[test]
    fn rebase_keeps_relocates_or_names_the_file_that_moved_on() {
        let original = "a = 1\nb = 2\nc = 3\n";
        let outcome = b_to_20(original);
        let limits = Limits::default();
        let same = rebase(&outcome.changes, |_| Some(original.into()), &limits).unwrap();
        assert_eq!(same, outcome.changes);
        let moved = rebase(
            &outcome.changes,
            |_| Some(format!("# top\n{original}")),
            &limits,
        )
        .unwrap();
        assert_eq!(moved[0].new_text, "# top\na = 1\nb = 20\nc = 3\n");
        let err = rebase(&outcome.changes, |_| Some("a = 1\nb = 5\n".into()), &limits)
            .unwrap_err()
            .to_string();
        assert!(err.contains("f.py changed"), "{err}");
        assert!(rebase(&outcome.changes, |_| None, &limits).is_err());
    }

    #[test]
    fn paths_outside_the_workspace_are_refused() {
        let root = Path::new("/ws");
        assert_eq!(normalize_path(root, "src/../lib.rs"), Ok("lib.rs".into()));
        assert_eq!(normalize_path(root, "./a/b.rs"), Ok("a/b.rs".into()));
        assert_eq!(normalize_path(root, "/ws/a.rs"), Ok("a.rs".into()));
        assert!(normalize_path(root, "../etc/passwd").is_err());
        assert!(normalize_path(root, "a/../../x").is_err());
        assert!(normalize_path(root, "/etc/passwd").is_err());
        assert!(normalize_path(root, "").is_err());
    }
}
