//! The next-edit suggestion, pure: from the edits the user just made in a file, the prompt
//! that asks the edit model for the one edit that should follow elsewhere in it (a rename's
//! other uses, a changed signature's callers), the answer read as an `old` → `new`
//! replacement, and where that lands in the text as it is now. The LSP front end keeps the
//! recent edits, asks the model, and offers the result; nothing here applies anything.

use serde::Deserialize;

/// The most recent edits kept per document, and the most bytes of each one's text.
pub const KEPT_EDITS: usize = 8;
pub const EDIT_TEXT_BYTES: usize = 160;

/// One edit the user made: the line it started on and the text it put there (cut).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentEdit {
    /// 0-based line of the edit's start, in the text before it.
    pub line: u32,
    pub inserted: String,
}

impl RecentEdit {
    /// An edit at `line` inserting `text`, its text cut to `EDIT_TEXT_BYTES`: the
    /// bookkeeping of every keystroke, so it must stay O(1) whatever was pasted.
    pub fn new(line: u32, text: &str) -> RecentEdit {
        let mut end = text.len().min(EDIT_TEXT_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        RecentEdit {
            line,
            inserted: text[..end].to_string(),
        }
    }
}

/// The predicted edit: replace `old` (text of the file as it is now) with `new`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Predicted {
    pub old: String,
    pub new: String,
}

/// The instructions of the next-edit call.
pub const SYSTEM: &str = "You predict the next edit a programmer will make in a file, from the \
edits they just made (a rename's other uses, a changed signature's callers, the same fix \
elsewhere). Answer with one JSON object and nothing else: {\"old\": TEXT, \"new\": TEXT}, where \
TEXT old is copied exactly from the file as it is now (whole lines, unique in the file) and new \
is what it becomes. If no further edit follows from the recent ones, answer {\"old\": \"\", \
\"new\": \"\"}.";

/// The user message: the file's numbered lines around the recent edits (within `max`
/// bytes) and the edits, the latest last.
pub fn prompt(path: &str, text: &str, edits: &[RecentEdit], max: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let focus = edits.last().map_or(0, |e| e.line as usize);
    // Lines outward from the latest edit while they fit.
    let (mut lo, mut hi, mut used) = (focus.min(lines.len()), focus.min(lines.len()), 0);
    while (lo > 0 || hi < lines.len()) && used < max {
        if hi < lines.len() {
            used += lines[hi].len() + 8;
            hi += 1;
        }
        if lo > 0 && used < max {
            lo -= 1;
            used += lines[lo].len() + 8;
        }
    }
    let mut out = format!("File {path}, lines {}-{}:\n", lo + 1, hi);
    for (i, l) in lines[lo..hi].iter().enumerate() {
        out.push_str(&format!("{:>5} | {l}\n", lo + i + 1));
    }
    out.push_str("\nThe edits just made, the latest last:\n");
    for e in edits {
        out.push_str(&format!(
            "- at line {}: typed {:?}\n",
            e.line + 1,
            e.inserted
        ));
    }
    out.push_str("\nThe next edit, as {\"old\", \"new\"}:");
    out
}

/// The model's answer as a replacement; `None` when it predicts nothing or cannot be read.
pub fn parse(answer: &str) -> Option<Predicted> {
    let start = answer.find('{')?;
    let end = answer.rfind('}')?;
    let p: Predicted = serde_json::from_str(answer.get(start..=end)?).ok()?;
    (!p.old.trim().is_empty() && p.old != p.new).then_some(p)
}

/// The byte range of `p.old` in `text`: the occurrence nearest `line` (0-based), so a
/// prediction about one call among several lands on the one the model meant when it
/// copied enough of it; `None` when the file no longer holds it.
pub fn locate(text: &str, p: &Predicted, line: usize) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for (at, _) in text.match_indices(p.old.as_str()) {
        let l = text[..at].matches('\n').count();
        let distance = l.abs_diff(line);
        if best.is_none_or(|(_, d)| distance < d) {
            best = Some((at, distance));
        }
    }
    best.map(|(at, _)| (at, at + p.old.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_numbers_the_lines_around_the_latest_edit_and_lists_the_edits() {
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let edits = [RecentEdit::new(49, "x")];
        let p = prompt("a.py", &text, &edits, 200);
        assert!(p.contains("   50 | line 50\n"), "{p}");
        assert!(
            !p.contains("| line 1\n"),
            "the budget keeps far lines out: {p}"
        );
        assert!(p.contains("- at line 50: typed \"x\""));
    }

    #[test]
    fn an_edit_keeps_a_bounded_copy_of_its_text() {
        let e = RecentEdit::new(3, &"é".repeat(500));
        assert!(e.inserted.len() <= EDIT_TEXT_BYTES);
    }

    #[test]
    fn answers_are_read_in_fences_and_nothing_predicted_is_none() {
        let p = parse(
            "```json\n{\"old\": \"print(area(2, 3))\", \"new\": \"print(surface(2, 3))\"}\n```",
        );
        assert_eq!(p.unwrap().new, "print(surface(2, 3))");
        assert_eq!(parse("{\"old\": \"\", \"new\": \"\"}"), None);
        assert_eq!(parse("{\"old\": \"a\", \"new\": \"a\"}"), None);
        assert_eq!(parse("I think you should rename it"), None);
    }

    #[test]
    fn the_occurrence_nearest_the_edit_is_the_one_replaced() {
        let text = "f(1)\nx\nf(1)\ny\nz\n";
        let p = Predicted {
            old: "f(1)".into(),
            new: "g(1)".into(),
        };
        assert_eq!(locate(text, &p, 0), Some((0, 4)));
        assert_eq!(locate(text, &p, 4), Some((7, 11)));
        let gone = Predicted {
            old: "h()".into(),
            new: "k()".into(),
        };
        assert_eq!(locate(text, &gone, 0), None);
    }
}
