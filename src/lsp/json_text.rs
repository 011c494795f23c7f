//! A document's text taken out of its JSON string where it lies in the message body.
//!
//! serde_json unescapes a string with escapes into a scratch buffer that grows by doubling and
//! then copies it into the `String`: for a 100 MB `didOpen` that is the body, the scratch and
//! the copy alive at once, three times the text. The transport instead notes where the string
//! literal lies in the body; when it holds the body alone (a large body always has its own
//! allocation), the text is unescaped in place and the body's allocation becomes the `String`,
//! so a document costs its text once.

use bytes::{Buf, Bytes, BytesMut};
use std::ops::Range;

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Unescape {
    #[error("expected a JSON string")]
    NotAString,
    #[error("a bad escape at byte {0} of the string")]
    BadEscape(usize),
    #[error("a lone surrogate \\u{0:04x} in the string")]
    LoneSurrogate(u32),
    #[error("the string is not UTF-8")]
    NotUtf8,
}

/// The text of the JSON string literal (quotes included) at `literal` in `body`, unescaped
/// in place when nothing else holds the body, else from a copy of the literal.
pub fn text_of(body: Bytes, literal: Range<usize>) -> Result<String, Unescape> {
    if literal.end > body.len() || literal.start > literal.end {
        return Err(Unescape::NotAString);
    }
    let mut buf = match body.try_into_mut() {
        Ok(mut own) => {
            own.truncate(literal.end);
            own.advance(literal.start);
            own
        }
        Err(shared) => BytesMut::from(&shared[literal]),
    };
    let len = unescape_in_place(&mut buf)?;
    buf.truncate(len);
    // Zero-copy when `buf` owns its allocation: the text moves to its front.
    let mut bytes: Vec<u8> = buf.into();
    if bytes.capacity() > 2 * bytes.len() + 4096 {
        bytes.shrink_to_fit();
    }
    String::from_utf8(bytes).map_err(|_| Unescape::NotUtf8)
}

/// The text of one JSON string literal (as `raw` comes from a `RawValue`), in a new `String`.
#[cfg(test)]
pub fn unescape(raw: &str) -> Result<String, Unescape> {
    text_of(Bytes::copy_from_slice(raw.as_bytes()), 0..raw.len())
}

/// Rewrites the JSON string literal in `buf` (quotes included) as its text from `buf[0]`
/// and returns the text's length. The text is never longer than its literal, so what is
/// written never overtakes what is still to be read.
fn unescape_in_place(buf: &mut [u8]) -> Result<usize, Unescape> {
    let end = buf.len().checked_sub(1).ok_or(Unescape::NotAString)?;
    if end == 0 || buf[0] != b'"' || buf[end] != b'"' {
        return Err(Unescape::NotAString);
    }
    // Positions in errors count from the first byte inside the quotes.
    let (mut read, mut write) = (1, 0);
    while let Some(found) = memchr::memchr(b'\\', &buf[read..end]) {
        let slash = read + found;
        buf.copy_within(read..slash, write);
        write += slash - read;
        let escape = match buf.get(slash + 1) {
            Some(&e) if slash + 1 < end => e,
            _ => return Err(Unescape::BadEscape(slash - 1)),
        };
        read = slash + 2;
        let simple = match escape {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let (c, next) = code_point(&buf[..end], slash)?;
                write += c.encode_utf8(&mut buf[write..]).len();
                read = next;
                continue;
            }
            _ => return Err(Unescape::BadEscape(slash - 1)),
        };
        buf[write] = simple;
        write += 1;
    }
    buf.copy_within(read..end, write);
    Ok(write + end - read)
}

/// The character of the `\u` escape at `slash` (a surrogate pair takes two escapes), and where
/// the text after it starts.
fn code_point(literal: &[u8], slash: usize) -> Result<(char, usize), Unescape> {
    let bad = Unescape::BadEscape(slash - 1);
    let hex = |at: usize| {
        literal
            .get(at..at + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or(bad.clone())
    };
    let first = hex(slash + 2)?;
    let (unit, next) = match first {
        0xD800..=0xDBFF => {
            if literal.get(slash + 6..slash + 8) != Some(b"\\u") {
                return Err(Unescape::LoneSurrogate(first));
            }
            let low = hex(slash + 8)?;
            if !(0xDC00..=0xDFFF).contains(&low) {
                return Err(Unescape::LoneSurrogate(first));
            }
            (
                0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00),
                slash + 12,
            )
        }
        0xDC00..=0xDFFF => return Err(Unescape::LoneSurrogate(first)),
        _ => (first, slash + 6),
    };
    char::from_u32(unit).map(|c| (c, next)).ok_or(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever serde_json writes, this reads back exactly as serde_json would.
    #[test]
    fn agrees_with_serde_json() {
        for text in [
            "",
            "plain",
            "a\nb\r\n\tc",
            "quote \" slash \\ solidus /",
            "\u{8}\u{c}\u{1}\u{1f}",
            "é ü 日本 🦀 \u{10ffff}",
            "ends with a backslash \\",
        ] {
            let literal = serde_json::to_string(text).expect("serialize");
            assert_eq!(unescape(&literal).as_deref(), Ok(text), "{literal}");
        }
        // Escapes a client may write that serde_json does not: \/ and \u for anything.
        let literal = r#""\/\u00e9\ud83e\udd80\u0041""#;
        let expected: String = serde_json::from_str(literal).expect("parse");
        assert_eq!(unescape(literal), Ok(expected));
    }

    #[test]
    fn bad_literals_are_errors_not_panics() {
        assert_eq!(unescape("12"), Err(Unescape::NotAString));
        assert_eq!(unescape(r#""\x""#), Err(Unescape::BadEscape(0)));
        assert_eq!(unescape(r#""ab\""#), Err(Unescape::BadEscape(2)));
        assert_eq!(unescape(r#""\u12""#), Err(Unescape::BadEscape(0)));
        assert_eq!(
            unescape(r#""\ud83e x""#),
            Err(Unescape::LoneSurrogate(0xd83e))
        );
        assert_eq!(
            unescape(r#""\udd80""#),
            Err(Unescape::LoneSurrogate(0xdd80))
        );
        assert_eq!(unescape(r#""é\u00""#), Err(Unescape::BadEscape(2)));
    }
}
