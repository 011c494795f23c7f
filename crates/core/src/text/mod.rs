//! Pure text handling: documents as ropes with versions, and position math across encodings.
//! No IO and no LSP types live here.

pub mod buffer;
pub mod position;

pub use buffer::{Buffer, ChangeError, TextChange};
pub use position::{Encoding, Position, PositionError, Range, to_char_index, to_position};

/// `text` safe to print on a terminal: control characters other than newline and tab, and
/// the bidirectional overrides that make code read differently than it runs, become visible
/// escapes. What the model or a test wrote cannot move the cursor, erase a line of a diff the
/// user is approving, or set the clipboard.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    fn hidden(c: char, next: Option<char>) -> bool {
        // A carriage return ending a line (CRLF output) moves nothing.
        (c.is_control() && c != '\n' && c != '\t' && !(c == '\r' && next == Some('\n')))
            || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
    }
    let mut chars = text.chars().peekable();
    let mut out: Option<String> = None;
    let mut at = 0;
    while let Some(c) = chars.next() {
        if hidden(c, chars.peek().copied()) {
            let out = out.get_or_insert_with(|| text[..at].to_string());
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else if let Some(out) = &mut out {
            out.push(c);
        }
        at += c.len_utf8();
    }
    match out {
        Some(out) => std::borrow::Cow::Owned(out),
        None => std::borrow::Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_and_overrides_become_visible() {
        assert_eq!(super::visible("a\tb\r\nc"), "a\tb\r\nc");
        assert_eq!(
            super::visible("ok\x1b[2K\rhidden\u{202E}x"),
            "ok\\u{1b}[2K\\u{d}hidden\\u{202e}x"
        );
    }
}
