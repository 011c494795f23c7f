//! Reading code by its structure: a file's outline (its definitions, by line), one definition
//! read whole by name, and the numbered lines every reading tool returns, filled up to the
//! result's byte budget and stopped at a line's end, so a tool result never loses the middle
//! of a file (issue 51 saw the model spend rounds reading back lines a cap had cut).

use agent_ls_core::repomap::tags::{self, Span};
use agent_ls_core::syntax::Lang;

/// Lines `first..=last` of `lines` (1-based), numbered, as many as fit in `budget` bytes; the
/// text and the last line given. A line longer than the whole budget is cut, and says so.
pub(super) fn numbered(
    lines: &[&str],
    (first, last): (usize, usize),
    budget: usize,
) -> (String, usize) {
    let mut out = String::new();
    let mut shown = first.saturating_sub(1);
    for n in first..=last {
        let line = format!("{n:>6}| {}\n", lines[n - 1]);
        if out.len() + line.len() > budget {
            if out.is_empty() {
                let mut cut = budget.saturating_sub(64).min(line.len());
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.push_str(&line[..cut]);
                out.push_str(&format!("\n[line {n} is {} bytes; cut here]\n", line.len()));
                shown = n;
            }
            break;
        }
        out.push_str(&line);
        shown = n;
    }
    (out, shown)
}

/// The language of `rel` when the repo map reads it.
fn lang_of(rel: &str, text: &str) -> Option<Lang> {
    Lang::of(rel, text).filter(|l| *l != Lang::Shell)
}

/// `text`'s definitions as an outline: each signature on its line number, indented by how
/// deep it sits; at most `budget` bytes. `None` for a language the map does not read.
pub(super) fn outline_of(rel: &str, text: &str, budget: usize) -> Option<String> {
    let lang = lang_of(rel, text)?;
    let spans = tags::spans(lang, text)?;
    let mut out = String::new();
    for (shown, s) in spans.iter().enumerate() {
        let depth = spans
            .iter()
            .filter(|o| o.first < s.first && o.last >= s.last)
            .count();
        let signature = tags::signature_at(text, s.first).unwrap_or_default();
        // `  12  def f():`, not `    12| …`: an outline is not the file's lines, and the
        // conversation's de-duplication of read lines must not take it for them.
        let line = format!("{:>6}  {}{signature}\n", s.first, "  ".repeat(depth));
        if out.len() + line.len() > budget {
            out.push_str(&format!("[... {} more definitions]\n", spans.len() - shown));
            break;
        }
        out.push_str(&line);
    }
    if spans.is_empty() {
        out.push_str("(no definitions)\n");
    }
    Some(out)
}

/// The definitions named `name` (inside one named `within`, when given) among `files`
/// (workspace path and text), at most `MAX_SYMBOLS`: each file's path, the span, and its text.
pub(super) fn definitions(
    (name, within): (&str, Option<&str>),
    files: impl Iterator<Item = (String, String)>,
) -> Vec<(String, Span, String)> {
    let mut found = Vec::new();
    for (rel, text) in files {
        if !text.contains(name) {
            continue;
        }
        let Some(spans) = lang_of(&rel, &text).and_then(|l| tags::spans(l, &text)) else {
            continue;
        };
        let inside = |s: &Span| {
            within.is_none_or(|w| {
                spans
                    .iter()
                    .any(|o| o.name == w && o.first <= s.first && o.last >= s.last && o != s)
            })
        };
        for s in spans.iter().filter(|s| s.name == name && inside(s)) {
            found.push((rel.clone(), s.clone(), text.clone()));
        }
        if found.len() >= MAX_SYMBOLS {
            found.truncate(MAX_SYMBOLS);
            break;
        }
    }
    found
}

/// The definitions found, each as its path and line range, then its numbered lines, within
/// `budget` bytes; one that does not fit whole says where to read on.
pub(super) fn show_definitions(found: &[(String, Span, String)], budget: usize) -> String {
    let mut out = String::new();
    for (rel, s, text) in found {
        let lines: Vec<&str> = text.lines().collect();
        let last = (s.last as usize).min(lines.len());
        let room = budget.saturating_sub(out.len());
        if room < 200 {
            out.push_str(&format!(
                "[also {rel}:{}; read_symbol with its path]\n",
                s.first
            ));
            continue;
        }
        out.push_str(&format!("{rel}:{}-{last}\n", s.first));
        let (body, shown) = numbered(&lines, (s.first as usize, last), room);
        out.push_str(&body);
        if shown < last {
            out.push_str(&format!(
                "[lines {}-{shown} of {}-{last}; read_file {rel} with start_line {} reads on]\n",
                s.first,
                s.first,
                shown + 1
            ));
        }
    }
    out
}

/// The most definitions of one name `read_symbol` returns.
pub(super) const MAX_SYMBOLS: usize = 5;
