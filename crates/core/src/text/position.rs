//! Position math between LSP-style (line, character) pairs and rope char indices, for every
//! negotiated encoding. This is the one place where encodings are converted; it knows no LSP types.

use ropey::Rope;
use thiserror::Error;

/// How the `character` of a position counts: LSP 3.17 `PositionEncodingKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// UTF-8 code units (bytes).
    Utf8,
    /// UTF-16 code units; the protocol's mandatory default.
    #[default]
    Utf16,
    /// Unicode scalar values, which is what ropey counts as chars.
    Utf32,
}

impl Encoding {
    /// The protocol's name for this encoding.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf-8",
            Encoding::Utf16 => "utf-16",
            Encoding::Utf32 => "utf-32",
        }
    }

    /// Picks the encoding from what a client offers. UTF-8 is preferred because it is the
    /// cheapest and least error-prone for Rust strings, then UTF-32, and UTF-16 otherwise,
    /// which LSP makes mandatory for every client.
    pub fn negotiate<'a>(offered: impl IntoIterator<Item = &'a str>) -> Encoding {
        let offered: Vec<&str> = offered.into_iter().collect();
        if offered.contains(&"utf-8") {
            Encoding::Utf8
        } else if offered.contains(&"utf-32") {
            Encoding::Utf32
        } else {
            Encoding::Utf16
        }
    }

    fn width(self, c: char) -> u32 {
        match self {
            Encoding::Utf8 => c.len_utf8() as u32,
            Encoding::Utf16 => c.len_utf16() as u32,
            Encoding::Utf32 => 1,
        }
    }
}

/// A zero-based line and a column counted in the units of an [`Encoding`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    pub line: u32,
    pub character: u32,
}

impl Position {
    pub fn new(line: u32, character: u32) -> Self {
        Position { line, character }
    }
}

/// A half-open range of positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Range {
    pub start: Position,
    pub end: Position,
}

impl Range {
    pub fn new(start: Position, end: Position) -> Self {
        Range { start, end }
    }
}

/// Why a position cannot be mapped onto the text without corrupting it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PositionError {
    #[error(
        "line {line}, character {character} ({encoding}) falls inside a character (a surrogate pair or a multi-byte sequence)"
    )]
    InsideCharacter {
        line: u32,
        character: u32,
        encoding: &'static str,
    },
    #[error(
        "line {line}, character {character} falls between the \\r and \\n of a CRLF line ending"
    )]
    SplitsCrlf { line: u32, character: u32 },
}

/// Maps a position to a char index in `rope`.
///
/// Out-of-range input follows the LSP specification: a line past the last one means the end of
/// the document, and a character past the end of its line means the end of that line (before the
/// line terminator). A position that would cut a character or a CRLF in two is an error, since
/// applying an edit there would corrupt the text.
pub fn to_char_index(
    rope: &Rope,
    pos: Position,
    encoding: Encoding,
) -> Result<usize, PositionError> {
    let line_idx = pos.line as usize;
    if line_idx >= rope.len_lines() {
        return Ok(rope.len_chars());
    }
    // One walk down the tree to the line's start, then the line's chars in order: this runs
    // for every keystroke, so it reads no more of the line than the position needs.
    let line_start = rope.line_to_char(line_idx);
    let mut units: u32 = 0;
    let mut chars = rope.chars_at(line_start).enumerate().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\n' || c == '\r' {
            // The end of the line's content. One unit past a CR that a LF follows falls
            // between the two; anything else past the end means the end of the line.
            let crlf = c == '\r' && chars.peek().is_some_and(|(_, n)| *n == '\n');
            if crlf && pos.character == units + 1 {
                return Err(PositionError::SplitsCrlf {
                    line: pos.line,
                    character: pos.character,
                });
            }
            return Ok(line_start + i);
        }
        if units == pos.character {
            return Ok(line_start + i);
        }
        units += encoding.width(c);
        if units > pos.character {
            return Err(PositionError::InsideCharacter {
                line: pos.line,
                character: pos.character,
                encoding: encoding.as_str(),
            });
        }
    }
    // The last line, which has no terminator.
    Ok(rope.len_chars())
}

/// Maps a char index (clamped to the document) back to a position in `encoding`.
pub fn to_position(rope: &Rope, char_idx: usize, encoding: Encoding) -> Position {
    let char_idx = char_idx.min(rope.len_chars());
    let line = rope.char_to_line(char_idx);
    let line_start = rope.line_to_char(line);
    let character = match encoding {
        Encoding::Utf8 => rope.char_to_byte(char_idx) - rope.char_to_byte(line_start),
        Encoding::Utf16 => rope.char_to_utf16_cu(char_idx) - rope.char_to_utf16_cu(line_start),
        Encoding::Utf32 => char_idx - line_start,
    };
    Position::new(line as u32, character as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(text: &str, line: u32, character: u32, enc: Encoding) -> Result<usize, PositionError> {
        to_char_index(&Rope::from_str(text), Position::new(line, character), enc)
    }

    #[test]
    fn ascii_is_the_same_in_every_encoding() {
        for enc in [Encoding::Utf8, Encoding::Utf16, Encoding::Utf32] {
            assert_eq!(idx("abc\ndef", 1, 2, enc), Ok(6));
            assert_eq!(
                to_position(&Rope::from_str("abc\ndef"), 6, enc),
                Position::new(1, 2)
            );
        }
    }

    #[test]
    fn emoji_counts_differently_per_encoding() {
        // "a😀b": the emoji is 4 UTF-8 bytes, 2 UTF-16 units and 1 char.
        let text = "a😀b";
        assert_eq!(idx(text, 0, 5, Encoding::Utf8), Ok(2));
        assert_eq!(idx(text, 0, 3, Encoding::Utf16), Ok(2));
        assert_eq!(idx(text, 0, 2, Encoding::Utf32), Ok(2));
        let rope = Rope::from_str(text);
        assert_eq!(to_position(&rope, 2, Encoding::Utf8), Position::new(0, 5));
        assert_eq!(to_position(&rope, 2, Encoding::Utf16), Position::new(0, 3));
        assert_eq!(to_position(&rope, 2, Encoding::Utf32), Position::new(0, 2));
    }

    #[test]
    fn splitting_a_surrogate_pair_or_a_utf8_sequence_is_refused() {
        assert!(matches!(
            idx("a😀b", 0, 2, Encoding::Utf16),
            Err(PositionError::InsideCharacter { .. })
        ));
        assert!(matches!(
            idx("é", 0, 1, Encoding::Utf8),
            Err(PositionError::InsideCharacter { .. })
        ));
    }

    #[test]
    fn cjk_in_utf16_and_utf8() {
        let text = "漢字x";
        assert_eq!(idx(text, 0, 2, Encoding::Utf16), Ok(2));
        assert_eq!(idx(text, 0, 6, Encoding::Utf8), Ok(2));
    }

    #[test]
    fn out_of_range_positions_clamp_per_the_spec() {
        assert_eq!(idx("ab\ncd", 0, 99, Encoding::Utf16), Ok(2));
        assert_eq!(idx("ab\ncd", 7, 0, Encoding::Utf16), Ok(5));
        assert_eq!(idx("ab\r\ncd", 0, 99, Encoding::Utf16), Ok(2));
        assert_eq!(idx("ab\n", 1, 0, Encoding::Utf16), Ok(3));
    }

    #[test]
    fn a_position_between_cr_and_lf_is_refused() {
        assert_eq!(idx("ab\r\ncd", 0, 2, Encoding::Utf16), Ok(2));
        assert!(matches!(
            idx("ab\r\ncd", 0, 3, Encoding::Utf16),
            Err(PositionError::SplitsCrlf { .. })
        ));
        // A lone CR is a whole line ending: one past it is simply past the line end.
        assert_eq!(idx("ab\rcd", 0, 3, Encoding::Utf16), Ok(2));
        assert_eq!(idx("ab\rcd", 1, 1, Encoding::Utf16), Ok(4));
    }

    #[test]
    fn negotiation_prefers_utf8_then_utf32() {
        assert_eq!(Encoding::negotiate(["utf-16"]), Encoding::Utf16);
        assert_eq!(Encoding::negotiate(["utf-16", "utf-8"]), Encoding::Utf8);
        assert_eq!(Encoding::negotiate(["utf-32", "utf-16"]), Encoding::Utf32);
        assert_eq!(Encoding::negotiate([]), Encoding::Utf16);
    }
}
