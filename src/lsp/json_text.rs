//! A document's text taken out of its JSON string in one exact allocation.
//!
//! serde_json unescapes a string with escapes into a scratch buffer that grows by doubling and
//! then copies it into the `String`: for a 100 MB `didOpen` that is the body, the scratch and
//! the copy alive at once, three times the text. Borrowing the raw string from the body and
//! unescaping it here into a `String` sized once keeps the peak at the body plus the text.

use serde::de::{Deserialize, Deserializer, Error as _};
use serde_json::value::RawValue;

/// Deserializes a JSON string field without serde_json's scratch copy. Needs a borrowing
/// deserializer (`from_str`, `from_slice`), which is what the transport uses.
pub fn exact_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let raw: &'de RawValue = Deserialize::deserialize(d)?;
    unescape(raw.get()).map_err(D::Error::custom)
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Unescape {
    #[error("expected a JSON string")]
    NotAString,
    #[error("a bad escape at byte {0} of the string")]
    BadEscape(usize),
    #[error("a lone surrogate \\u{0:04x} in the string")]
    LoneSurrogate(u32),
}

/// The text of one JSON string literal, quotes included, as `raw` comes from a `RawValue`
/// (already checked by serde_json to be a well-formed literal; errors here are kept anyway,
/// since nothing on the wire is trusted).
pub fn unescape(raw: &str) -> Result<String, Unescape> {
    let inner = raw
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .ok_or(Unescape::NotAString)?;
    let bytes = inner.as_bytes();
    // Unescaped text is never longer than its literal.
    let mut out = String::with_capacity(inner.len());
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'\\', &bytes[at..]) {
        let slash = at + found;
        out.push_str(&inner[at..slash]);
        let escape = *bytes.get(slash + 1).ok_or(Unescape::BadEscape(slash))?;
        at = slash + 2;
        match escape {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let (c, next) = code_point(inner, slash)?;
                out.push(c);
                at = next;
            }
            _ => return Err(Unescape::BadEscape(slash)),
        }
    }
    out.push_str(&inner[at..]);
    Ok(out)
}

/// The character of the `\u` escape at `slash` (a surrogate pair takes two escapes), and where
/// the text after it starts.
fn code_point(inner: &str, slash: usize) -> Result<(char, usize), Unescape> {
    let hex = |at: usize| {
        inner
            .get(at..at + 4)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or(Unescape::BadEscape(slash))
    };
    let first = hex(slash + 2)?;
    let (unit, next) = match first {
        0xD800..=0xDBFF => {
            if inner.get(slash + 6..slash + 8) != Some("\\u") {
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
    char::from_u32(unit)
        .map(|c| (c, next))
        .ok_or(Unescape::BadEscape(slash))
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
