//! The one plan type every edit format is parsed into: an ordered list of edits, each naming
//! a file and what to change in it.

use serde::Serialize;

/// One change the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EditKind {
    /// Replace `old` at (or near) the 1-based `line` with `new`.
    Line {
        line: usize,
        old: String,
        new: String,
    },
    /// Replace the text `search` (found by the locating cascade) with `replace`.
    SearchReplace { search: String, replace: String },
    /// Replace the whole file, or create it.
    WholeFile { content: String },
    /// One hunk of a unified diff: the context and removed lines form the text to find, the
    /// context and added lines its replacement; `line` is the hunk header's old start line.
    Hunk {
        line: Option<usize>,
        search: String,
        replace: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Edit {
    /// The path as the model wrote it, relative to the workspace root.
    pub path: String,
    #[serde(flatten)]
    pub kind: EditKind,
}

impl Edit {
    /// The text this edit must find and what replaces it, with the stated line when there is
    /// one. `None` for whole-file edits, which find nothing.
    pub fn search_replace(&self) -> Option<(&str, &str, Option<usize>)> {
        match &self.kind {
            EditKind::Line { line, old, new } => Some((old, new, Some(*line))),
            EditKind::SearchReplace { search, replace } => Some((search, replace, None)),
            EditKind::Hunk {
                line,
                search,
                replace,
            } => Some((search, replace, *line)),
            EditKind::WholeFile { .. } => None,
        }
    }
}

/// What the model proposed, in the order it proposed it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct EditPlan {
    pub edits: Vec<Edit>,
}

impl EditPlan {
    /// The distinct paths the plan touches, in first-mention order.
    pub fn paths(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        for e in &self.edits {
            if !seen.contains(&e.path.as_str()) {
                seen.push(&e.path);
            }
        }
        seen
    }
}
