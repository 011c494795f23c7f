//! An open document: a rope, the version the client gave it, and whether it must be resynced.
//! Changes apply all-or-nothing so a bad change never leaves half-applied text behind.

use ropey::Rope;
use thiserror::Error;

use super::position::{Encoding, PositionError, Range, to_char_index};

/// One content change as the client sent it: a range edit, or the whole text when `range` is
/// `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextChange {
    pub range: Option<Range>,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChangeError {
    #[error("change {index} of {count}: {source}")]
    Position {
        index: usize,
        count: usize,
        source: PositionError,
    },
    #[error("change {index} of {count}: the range ends before it starts")]
    InvertedRange { index: usize, count: usize },
    #[error(
        "the document is out of sync after an earlier rejected change; only a full-text change can resync it"
    )]
    NeedsResync,
}

/// The server's copy of an open document.
#[derive(Debug, Clone)]
pub struct Buffer {
    rope: Rope,
    version: i32,
    needs_resync: bool,
}

impl Buffer {
    pub fn new(text: &str, version: i32) -> Self {
        Buffer {
            rope: Rope::from_str(text),
            version,
            needs_resync: false,
        }
    }

    /// A buffer over a rope built elsewhere (the transport reads `didOpen` text straight into
    /// one).
    pub fn from_rope(rope: Rope, version: i32) -> Self {
        Buffer {
            rope,
            version,
            needs_resync: false,
        }
    }

    pub fn len_bytes(&self) -> usize {
        self.rope.len_bytes()
    }

    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    pub fn text(&self) -> String {
        self.rope.to_string()
    }

    pub fn version(&self) -> i32 {
        self.version
    }

    /// True after a change was refused: the server's text can no longer be trusted to match the
    /// client's, so nothing may be computed from it until a full-text change arrives.
    pub fn needs_resync(&self) -> bool {
        self.needs_resync
    }

    /// Applies the changes of one `didChange` in order, each against the text left by the one
    /// before, as the protocol says. Either all of them apply and the version moves on, or none
    /// does and the buffer is marked for resync.
    pub fn apply_changes(
        &mut self,
        changes: &[TextChange],
        version: i32,
        encoding: Encoding,
    ) -> Result<(), ChangeError> {
        // A single change is checked before anything is touched, so it can edit the rope in
        // place; several changes each depend on the text the previous ones left, so they run on
        // a copy (cheap to take, but every node it touches is copied) that replaces the rope
        // only when all of them applied.
        let result = if changes.len() == 1 {
            apply_all(&mut self.rope, changes, self.needs_resync, encoding)
        } else {
            let mut copy = self.rope.clone();
            apply_all(&mut copy, changes, self.needs_resync, encoding).inspect(|_| self.rope = copy)
        };
        match result {
            Ok(resynced) => {
                self.version = version;
                if resynced {
                    self.needs_resync = false;
                }
                Ok(())
            }
            Err(err) => {
                self.needs_resync = true;
                Err(err)
            }
        }
    }

    /// Marks the buffer as out of sync; the caller decides when a change is untrustworthy.
    pub fn mark_needs_resync(&mut self) {
        self.needs_resync = true;
    }
}

/// Applies `changes` to `rope` in order, returning whether a full-text change resynced it.
/// Each change is fully checked before it touches the rope.
fn apply_all(
    rope: &mut Rope,
    changes: &[TextChange],
    needs_resync: bool,
    encoding: Encoding,
) -> Result<bool, ChangeError> {
    let count = changes.len();
    let mut resynced = false;
    for (index, change) in changes.iter().enumerate() {
        let Some(range) = change.range else {
            *rope = Rope::from_str(&change.text);
            resynced = true;
            continue;
        };
        if needs_resync && !resynced {
            return Err(ChangeError::NeedsResync);
        }
        let at = |p| {
            to_char_index(rope, p, encoding).map_err(|source| ChangeError::Position {
                index: index + 1,
                count,
                source,
            })
        };
        let start = at(range.start)?;
        let end = at(range.end)?;
        if end < start {
            return Err(ChangeError::InvertedRange {
                index: index + 1,
                count,
            });
        }
        rope.remove(start..end);
        rope.insert(start, &change.text);
    }
    Ok(resynced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::position::Position;

    fn change(l1: u32, c1: u32, l2: u32, c2: u32, text: &str) -> TextChange {
        TextChange {
            range: Some(Range::new(Position::new(l1, c1), Position::new(l2, c2))),
            text: text.to_string(),
        }
    }

    #[test]
    fn changes_apply_in_order_against_the_running_text() {
        let mut b = Buffer::new("hello\nworld\n", 1);
        b.apply_changes(
            &[
                change(0, 0, 0, 5, "bye"),
                change(0, 3, 0, 3, "!"),
                change(1, 0, 1, 5, "ünï"),
            ],
            2,
            Encoding::Utf16,
        )
        .unwrap();
        assert_eq!(b.text(), "bye!\nünï\n");
        assert_eq!(b.version(), 2);
    }

    #[test]
    fn a_bad_change_applies_nothing_and_marks_resync() {
        let mut b = Buffer::new("a😀b", 1);
        let err = b
            .apply_changes(
                &[change(0, 0, 0, 1, "x"), change(0, 2, 0, 2, "y")],
                2,
                Encoding::Utf16,
            )
            .unwrap_err();
        assert!(
            matches!(err, ChangeError::Position { index: 2, .. }),
            "{err}"
        );
        assert_eq!(b.text(), "a😀b");
        assert_eq!(b.version(), 1);
        assert!(b.needs_resync());
        // Range changes stay refused until a full-text change arrives.
        assert_eq!(
            b.apply_changes(&[change(0, 0, 0, 0, "z")], 3, Encoding::Utf16),
            Err(ChangeError::NeedsResync)
        );
        b.apply_changes(
            &[TextChange {
                range: None,
                text: "fresh".into(),
            }],
            4,
            Encoding::Utf16,
        )
        .unwrap();
        assert!(!b.needs_resync());
        assert_eq!(b.text(), "fresh");
    }
}
