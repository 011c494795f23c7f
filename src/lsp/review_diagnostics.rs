//! The reviewer's findings as diagnostics (source `agent-ls review`; P0/P1 error, P2
//! warning, P3 information), made here from the core's `Finding` values, and where a run's
//! failing tests pointed (source `agent-ls locate`, hints, docs/locate.md) from its
//! `Suspect`s: each covers its whole lines, so its range is the same in every position
//! encoding. Kept per document by
//! 0-based line, moved with edits above them, and dropped when their own lines are edited or
//! a step is undone. A publish replaces a document's diagnostics, so the session sends these
//! together with the test run's of the same document.

use std::collections::HashMap;
use std::path::Path;

use agent_ls_core::agent::review::{Finding, ReviewResult};
use agent_ls_core::locate::Suspect;
use agent_ls_core::text::TextChange;
use tower_lsp_server::ls_types::{
    Diagnostic, DiagnosticSeverity, NumberOrString, Position, Range, Uri,
};

pub const SOURCE: &str = "agent-ls review";
/// The source of the tests' suspects.
pub const LOCATE_SOURCE: &str = "agent-ls locate";

/// One finding or suspect placed in a document: its first and last line (0-based), and what
/// it says.
#[derive(Debug, Clone)]
struct Placed {
    first: u32,
    last: u32,
    what: What,
}

#[derive(Debug, Clone)]
enum What {
    Finding(Finding),
    Suspect(Suspect),
}

#[derive(Default)]
pub struct ReviewDiagnostics {
    by_uri: HashMap<Uri, Vec<Placed>>,
}

impl ReviewDiagnostics {
    /// Replaces the findings with a new review's; the documents whose diagnostics change.
    pub fn set(&mut self, root: &Path, result: Option<&ReviewResult>) -> Vec<Uri> {
        let findings = match result {
            Some(ReviewResult::Reviewed { review, .. }) => review.findings.as_slice(),
            _ => &[],
        };
        let placed = findings.iter().map(|f| {
            let (first, last) = (f.start_line, f.end_line);
            (f.path.as_str(), (first, last), What::Finding(f.clone()))
        });
        self.replace(root, |w| matches!(w, What::Finding(_)), placed)
    }

    /// Replaces where the failing tests point (a run that did not fix what they found);
    /// the documents whose diagnostics change.
    pub fn set_suspects(&mut self, root: &Path, suspects: &[Suspect]) -> Vec<Uri> {
        let placed = suspects
            .iter()
            .map(|s| (s.path.as_str(), (s.first, s.last), What::Suspect(s.clone())));
        self.replace(root, |w| matches!(w, What::Suspect(_)), placed)
    }

    /// Drops what `old` matches and places `new` (paths below `root`, 1-based lines).
    fn replace<'a>(
        &mut self,
        root: &Path,
        old: impl Fn(&What) -> bool,
        new: impl Iterator<Item = (&'a str, (u32, u32), What)>,
    ) -> Vec<Uri> {
        let mut touched = Vec::new();
        for (uri, placed) in self.by_uri.iter_mut() {
            let before = placed.len();
            placed.retain(|p| !old(&p.what));
            if placed.len() != before {
                touched.push(uri.clone());
            }
        }
        self.by_uri.retain(|_, placed| !placed.is_empty());
        for (path, (first, last), what) in new {
            let Some(uri) = Uri::from_file_path(root.join(path)) else {
                continue;
            };
            self.by_uri.entry(uri.clone()).or_default().push(Placed {
                first: first.saturating_sub(1),
                last: last.saturating_sub(1),
                what,
            });
            if !touched.contains(&uri) {
                touched.push(uri);
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
    let f = match &p.what {
        What::Finding(f) => f,
        What::Suspect(s) => return suspect(p, s),
    };
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

/// A suspect as a hint over its function: "executed by 2 failing tests and 0 passing".
fn suspect(p: &Placed, s: &Suspect) -> Diagnostic {
    let lines: Vec<String> = s.lines.iter().map(u32::to_string).collect();
    let name = if s.name.is_empty() {
        "this code".to_string()
    } else {
        format!("`{}`", s.name)
    };
    Diagnostic {
        range: whole_lines(p.first, p.last),
        severity: Some(DiagnosticSeverity::HINT),
        source: Some(LOCATE_SOURCE.into()),
        message: format!(
            "where the failing tests point: {name} was executed by {} failing test(s) and {} passing (score {:.2}); look at line(s) {}",
            s.failing,
            s.passing,
            s.score,
            lines.join(", ")
        ),
        ..Diagnostic::default()
    }
}

/// From the first line's start to the start of the line after the last.
fn whole_lines(first: u32, last: u32) -> Range {
    Range {
        start: Position {
            line: first,
            character: 0,
        },
        end: Position {
            line: last + 1,
            character: 0,
        },
    }
}
