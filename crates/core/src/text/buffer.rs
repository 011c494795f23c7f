//! An open document: a rope, the version the client gave it, and whether it must be resynced.
//! Changes apply all-or-nothing so a bad change never leaves half-applied text behind.

use std::borrow::Cow;
use std::sync::Arc;

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
    content: Content,
    version: i32,
    needs_resync: bool,
}

/// A document is held as the exact text it was opened with until its first edit, and as a
/// rope from then on. Most open documents are never edited (an editor opens files to show
/// them), and their text costs no rope overhead, no time to build one on open, and nothing to
/// clone (`Arc`); the rope is built once, on the first change.
#[derive(Debug, Clone)]
enum Content {
    Text(Arc<String>),
    Rope(Rope),
}

impl Buffer {
    pub fn new(text: &str, version: i32) -> Self {
        Buffer::from_text(text.to_string(), version)
    }

    /// A buffer over text read elsewhere (the transport reads `didOpen` text itself).
    pub fn from_text(text: String, version: i32) -> Self {
        Buffer {
            content: Content::Text(Arc::new(text)),
            version,
            needs_resync: false,
        }
    }

    /// The text as a rope: the buffer's own once it was edited, else one built now.
    pub fn rope(&self) -> Cow<'_, Rope> {
        match &self.content {
            Content::Rope(r) => Cow::Borrowed(r),
            Content::Text(t) => Cow::Owned(Rope::from_str(t)),
        }
    }

    pub fn text(&self) -> String {
        match &self.content {
            Content::Rope(r) => r.to_string(),
            Content::Text(t) => t.as_ref().clone(),
        }
    }

    /// Whether the buffer holds exactly `text`, without copying it.
    pub fn holds(&self, text: &str) -> bool {
        match &self.content {
            Content::Rope(r) => r.len_bytes() == text.len() && *r == text,
            Content::Text(t) => t.as_str() == text,
        }
    }

    pub fn len_bytes(&self) -> usize {
        match &self.content {
            Content::Rope(r) => r.len_bytes(),
            Content::Text(t) => t.len(),
        }
    }

    pub fn version(&self) -> i32 {
        self.version
    }

    /// True after a change was refused: the server's text can no longer be trusted to match the
    /// client's, so nothing may be computed from it until a full-text change arrives.
    pub fn needs_resync(&self) -> bool {
        self.needs_resync
    }

    /// The rope to edit, built from the opened text on the first edit.
    fn rope_mut(&mut self) -> &mut Rope {
        if let Content::Text(t) = &self.content {
            self.content = Content::Rope(Rope::from_str(t));
        }
        match &mut self.content {
            Content::Rope(r) => r,
            Content::Text(_) => unreachable!("the text was just made a rope"),
        }
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
        let needs_resync = self.needs_resync;
        let rope = self.rope_mut();
        let result = if changes.len() == 1 {
            apply_all(rope, changes, needs_resync, encoding)
        } else {
            let mut copy = rope.clone();
            apply_all(&mut copy, changes, needs_resync, encoding).inspect(|_| *rope = copy)
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
        // Typing inserts at a point: one position to map, not two.
        let end = if range.end == range.start {
            start
        } else {
            at(range.end)?
        };
        if end < start {
            return Err(ChangeError::InvertedRange {
                index: index + 1,
                count,
            });
        }
        if end > start {
            rope.remove(start..end);
        }
        if !change.text.is_empty() {
            rope.insert(start, &change.text);
        }
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
