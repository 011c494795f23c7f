//! Which of a file's errors after an edit are new: each error from before is carried through
//! the edit (a line above the changed lines keeps its number, one below moves by the lines
//! the edit added or removed, one inside is known by its text), and an error after the edit
//! that one from before matches by place and message is not the edit's doing. Pure.

use serde::Serialize;

/// An error a language server reported in a file: where (0-based line and character, as
/// the protocol counts them) and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileError {
    pub path: String,
    pub line: u32,
    pub character: u32,
    pub message: String,
    /// The server's name for the rule (`reportUndefinedVariable`, `2304`), when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl FileError {
    /// `path:line:column: message (code)`, lines and columns from 1, as the model reads it.
    pub fn line_text(&self) -> String {
        let code = self
            .code
            .as_deref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default();
        format!(
            "{}:{}:{}: error: {}{code}",
            self.path,
            self.line + 1,
            self.character + 1,
            self.message
        )
    }
}

/// Where a line of the text before the edit is after it: `None` for a line the edit changed.
struct LineMap {
    prefix: usize,
    old_len: usize,
    suffix: usize,
    delta: isize,
}

impl LineMap {
    fn new(before: &[&str], after: &[&str]) -> LineMap {
        let prefix = before
            .iter()
            .zip(after.iter())
            .take_while(|(a, b)| a == b)
            .count();
        let room = before.len().min(after.len()) - prefix;
        let suffix = before
            .iter()
            .rev()
            .zip(after.iter().rev())
            .take(room)
            .take_while(|(a, b)| a == b)
            .count();
        LineMap {
            prefix,
            old_len: before.len(),
            suffix,
            delta: after.len() as isize - before.len() as isize,
        }
    }

    fn map(&self, line: usize) -> Option<usize> {
        if line < self.prefix {
            Some(line)
        } else if line >= self.old_len - self.suffix {
            usize::try_from(line as isize + self.delta).ok()
        } else {
            None
        }
    }
}

/// The errors of `after` (the file's after the edit) that no error of `before` accounts
/// for, `before_text` and `after_text` being the file's text either side of the edit.
pub fn introduced(
    before: &[FileError],
    after: &[FileError],
    before_text: &str,
    after_text: &str,
) -> Vec<FileError> {
    let old: Vec<&str> = before_text.lines().collect();
    let new: Vec<&str> = after_text.lines().collect();
    let map = LineMap::new(&old, &new);
    let mut unused: Vec<&FileError> = before.iter().collect();
    let mut out = Vec::new();
    for e in after {
        let same = |b: &&FileError| {
            if b.message != e.message || b.character != e.character {
                return false;
            }
            match map.map(b.line as usize) {
                Some(l) => l == e.line as usize,
                // A changed line that reads the same as one before (the edit moved it).
                None => old.get(b.line as usize) == new.get(e.line as usize),
            }
        };
        match unused.iter().position(same) {
            Some(i) => {
                unused.remove(i);
            }
            None => out.push(e.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(line: u32, message: &str) -> FileError {
        FileError {
            path: "a.py".into(),
            line,
            character: 4,
            message: message.into(),
            code: None,
        }
    }

    #[test]
    fn an_old_error_below_the_edit_moves_with_it_and_is_not_new() {
        let before = "a\nb\nc\n    x = y\n";
        let after = "a\nB\nB2\nc\n    x = y\n";
        let new = introduced(
            &[err(3, "y is not defined")],
            &[err(4, "y is not defined"), err(1, "B is not defined")],
            before,
            after,
        );
        assert_eq!(new, vec![err(1, "B is not defined")]);
    }

    #[test]
    fn the_same_message_on_another_line_is_new() {
        let text = "a\nb\nc\n";
        let new = introduced(&[err(0, "m")], &[err(0, "m"), err(2, "m")], text, text);
        assert_eq!(new, vec![err(2, "m")]);
    }

    #[test]
    fn an_error_on_a_line_the_edit_moved_is_known_by_its_text() {
        let before = "x = y\nz = 1\n";
        let after = "z = 2\nx = y\n";
        assert!(introduced(&[err(0, "y")], &[err(1, "y")], before, after).is_empty());
    }
}
