//! The reviewer's findings as diagnostics (source `agent-ls review`; P0/P1 error, P2
//! warning, P3 information), made here from the core's `Finding` values: each covers its
//! whole lines, so its range is the same in every position encoding. Kept per document by
//! 0-based line, moved with edits above them, and dropped when their own lines are edited or
//! a step is undone. A publish replaces a document's diagnostics, so the session sends these
//! together with the test run's of the same document.

use std::collections::HashMap;
use std::path::Path;

use agent_ls_core::agent::review::{Finding, ReviewResult};
use agent_ls_core::text::TextChange;
use tower_lsp_server::ls_types::{
    Diagnostic, DiagnosticSeverity, NumberOrString, Position, Range, Uri,
};

pub const SOURCE: &str = "agent-ls review";

/// One finding placed in a document: its first and last line (0-based), and what it says.
#[derive(Debug, Clone)]
struct Placed {
    first: u32,
    last: u32,
    finding: Finding,
}

#[derive(Default)]
pub struct ReviewDiagnostics {
    by_uri: HashMap<Uri, Vec<Placed>>,
}

impl ReviewDiagnostics {
    /// Replaces the findings with a new review's; the documents whose diagnostics change.
    pub fn set(&mut self, root: &Path, result: Option<&ReviewResult>) -> Vec<Uri> {
        let mut touched: Vec<Uri> = self.by_uri.keys().cloned().collect();
        self.by_uri.clear();
        if let Some(ReviewResult::Reviewed { review, .. }) = result {
            for f in &review.findings {
                let Some(uri) = Uri::from_file_path(root.join(&f.path)) else {
                    continue;
                };
                self.by_uri.entry(uri.clone()).or_default().push(Placed {
                    first: f.start_line.saturating_sub(1),
                    last: f.end_line.saturating_sub(1),
                    finding: f.clone(),
                });
                if !touched.contains(&uri) {
                    touched.push(uri);
                }
            }
        }
        touched
    }

    /// Drops every finding (a step was undone); the documents that had some.
    pub fn clear(&mut self) -> Vec<Uri> {
        self.by_uri.drain().map(|(uri, _)| uri).collect()
    }

    /// Follows an edit of `uri`: a finding whose lines it touches goes, one below it moves
    /// by the lines it added or removed. Whether anything changed.
    pub fn edited(&mut self, uri: &Uri, changes: &[TextChange]) -> bool {
        let Some(placed) = self.by_uri.get_mut(uri) else {
            return false;
        };
        let before: Vec<(u32, u32)> = placed.iter().map(|p| (p.first, p.last)).collect();
        for change in changes {
            let Some(range) = change.range else {
                // The whole text replaced: nothing is where it was.
                placed.clear();
                break;
            };
            let (from, to) = (range.start.line, range.end.line);
            let added = change.text.matches('\n').count() as i64;
            let delta = added - i64::from(to - from);
            placed.retain(|p| !(from <= p.last && p.first <= to));
            for p in placed.iter_mut().filter(|p| p.first > to) {
                p.first = (i64::from(p.first) + delta).max(0) as u32;
                p.last = (i64::from(p.last) + delta).max(0) as u32;
            }
        }
        let after: Vec<(u32, u32)> = placed.iter().map(|p| (p.first, p.last)).collect();
        if placed.is_empty() {
            self.by_uri.remove(uri);
        }
        before != after
    }

    /// The diagnostics of `uri`.
    pub fn of(&self, uri: &Uri) -> Vec<Diagnostic> {
        self.by_uri
            .get(uri)
            .map(|placed| placed.iter().map(diagnostic).collect())
            .unwrap_or_default()
    }
}

fn diagnostic(p: &Placed) -> Diagnostic {
    let f = &p.finding;
    let severity = match f.priority {
        0 | 1 => DiagnosticSeverity::ERROR,
        2 => DiagnosticSeverity::WARNING,
        _ => DiagnosticSeverity::INFORMATION,
    };
    let title = f.title.trim();
    let tag = format!("[P{}]", f.priority);
    let title = title.strip_prefix(&tag).unwrap_or(title).trim();
    let mut message = format!("{tag} {title}");
    if !f.body.is_empty() {
        message.push_str(&format!("\n{}", f.body));
    }
    message.push_str(&format!("\n(confidence {:.2})", f.confidence));
    Diagnostic {
        // Whole lines: from the first line's start to the start of the line after the last.
        range: Range {
            start: Position {
                line: p.first,
                character: 0,
            },
            end: Position {
                line: p.last + 1,
                character: 0,
            },
        },
        severity: Some(severity),
        code: Some(NumberOrString::String(format!("P{}", f.priority))),
        source: Some(SOURCE.into()),
        message,
        ..Diagnostic::default()
    }
}
