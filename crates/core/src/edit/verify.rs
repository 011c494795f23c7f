//! After an edit is written: the lines it did not mean to change are intact, and the file
//! holds what its REPLACE said. The engine computes a change exactly, but what lands in the
//! file may still differ from it (two names of one file through a symlink, each written with
//! only its own edits; a writer between our write and our read), and a file damaged that way
//! must never be called done. The caller reads the file back and asks `check`.

use super::FileChange;
use super::elision::is_marker;

/// What is wrong with `written`, the text of `change.path` read back after the change was
/// written, or `None` when it is what the change meant. `replaces` are the REPLACE texts (and
/// the SEARCH each went with) of the plan's edits to this file.
pub fn check(change: &FileChange, written: &str, replaces: &[(String, String)]) -> Option<String> {
    if let Some(why) = differs(change, written) {
        return Some(why);
    }
    replaces
        .iter()
        .find_map(|(search, replace)| missing(search, replace, written))
        .map(|why| format!("{}: {why}", change.path))
}

/// Where `written` differs from the text the change meant to write: a line the edit did not
/// touch, or one of its own.
fn differs(change: &FileChange, written: &str) -> Option<String> {
    // Whitespace alone (an editor that trims trailing spaces, or a formatter on save, as the
    // user set it up) is not damage: asking the model to undo it would fight the editor.
    let squash = |t: &str| t.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    if written == change.new_text || squash(written) == squash(&change.new_text) {
        return None;
    }
    let meant: Vec<&str> = change.new_text.lines().collect();
    let now: Vec<&str> = written.lines().collect();
    // The edit's own lines in the meant text (the inverse edits are in its coordinates).
    let line_of = |byte: usize| {
        change.new_text[..byte.min(change.new_text.len())]
            .matches('\n')
            .count()
    };
    let landed: Vec<(usize, usize)> = change
        .inverse
        .iter()
        .map(|e| {
            (
                line_of(e.range.start),
                line_of(e.range.end.max(e.range.start + 1) - 1),
            )
        })
        .collect();
    let touched = |i: usize| landed.iter().any(|&(a, b)| i >= a && i <= b);
    let first = (0..meant.len().max(now.len()))
        .find(|&i| meant.get(i) != now.get(i))
        .unwrap_or(0);
    let whose = if touched(first) {
        "a line of the edit"
    } else {
        "a line the edit did not touch"
    };
    let line =
        |l: Option<&&str>| l.map_or("(nothing: the file ends)".to_string(), |l| format!("`{l}`"));
    Some(format!(
        "{}: after the write, line {} reads {} where the edit left {} ({whose}); the file has {} lines where the edit left {}",
        change.path,
        first + 1,
        line(now.get(first)),
        line(meant.get(first)),
        now.len(),
        meant.len()
    ))
}

/// The first line a REPLACE adds (one its SEARCH does not have, not blank, not an elision
/// the engine keeps the file's lines for) that `written` does not hold, in order.
fn missing(search: &str, replace: &str, written: &str) -> Option<String> {
    let kept: Vec<&str> = search.lines().map(str::trim).collect();
    let mut lines = written.lines().map(str::trim);
    for added in replace
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !kept.contains(l) && !is_marker(l))
    {
        if !lines.any(|l| l == added) {
            return Some(format!(
                "after the write, the file does not hold the line `{added}` of the REPLACE"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::TextEdit;

    /// The fix of `add`'s line 2 (bytes 15..32 of the new text).
    fn change(original: &str, new_text: &str) -> FileChange {
        FileChange {
            path: "calc.py".into(),
            original: Some(original.into()),
            new_text: new_text.into(),
            edits: Vec::new(),
            inverse: vec![TextEdit {
                range: 15..32,
                text: "    return a - b\n".into(),
            }],
        }
    }

    const OLD: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
    const NEW: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n";

    fn fix() -> Vec<(String, String)> {
        vec![("    return a - b\n".into(), "    return a + b\n".into())]
    }

    #[test]
    fn a_file_written_as_meant_passes() {
        assert_eq!(check(&change(OLD, NEW), NEW, &fix()), None);
    }

    #[test]
    fn a_line_the_edit_did_not_touch_that_changed_is_named() {
        let written = NEW.replace("a * b", "a ** b");
        let why = check(&change(OLD, NEW), &written, &fix()).unwrap();
        assert!(why.contains("line 6 reads `    return a ** b`"), "{why}");
        assert!(why.contains("a line the edit did not touch"), "{why}");
    }

    #[test]
    fn whitespace_the_editor_changed_is_not_damage() {
        let written = NEW.replace("a * b", "a*b  ");
        assert_eq!(check(&change(OLD, NEW), &written, &fix()), None);
    }

    #[test]
    fn the_edit_s_own_line_lost_is_named() {
        let why = check(&change(OLD, NEW), OLD, &fix()).unwrap();
        assert!(why.contains("line 2 reads `    return a - b`"), "{why}");
        assert!(why.contains("a line of the edit"), "{why}");
    }

    #[test]
    fn a_replace_the_file_does_not_hold_is_named() {
        let replaces = vec![(
            "    return a - b\n".to_string(),
            "    return a + b  # sum\n".to_string(),
        )];
        let why = check(&change(OLD, NEW), NEW, &replaces).unwrap();
        assert!(
            why.contains("does not hold the line `return a + b  # sum`"),
            "{why}"
        );
    }
}
