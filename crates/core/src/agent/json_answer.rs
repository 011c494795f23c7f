//! Reading a role's JSON answer as models write it: in a fence or bare, in prose, with a
//! trailing comma, a comment or a Python literal. Every role that answers in JSON (the
//! planner, the reflector, the evaluator, the reviewer, the tester, the intent model) reads
//! through this one function, so one role cannot lose an answer another would have read.

use serde_json::Value;

/// Why no JSON object could be read from an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonAnswerError {
    #[error("the answer holds no JSON object")]
    NoJson,
    #[error("the answer's JSON cannot be read: {0}")]
    Json(String),
}

/// The JSON object in `text`: the first fenced block that holds one, else the outermost
/// braces (the whole text when it is bare). Read as written first; only when that fails is
/// it mended (`mended`) and read again, so a valid answer is never changed.
pub fn object(text: &str) -> Result<Value, JsonAnswerError> {
    let json = json_of(text).ok_or(JsonAnswerError::NoJson)?;
    let value = match serde_json::from_str::<Value>(json) {
        Ok(v) => v,
        Err(first) => serde_json::from_str::<Value>(&mended(json))
            .map_err(|_| JsonAnswerError::Json(first.to_string()))?,
    };
    if value.is_object() {
        Ok(value)
    } else {
        Err(JsonAnswerError::NoJson)
    }
}

/// The JSON text of an answer: the body of the first fence (```json or ```) that starts
/// with `{`, else from the first `{` to the last `}`.
fn json_of(text: &str) -> Option<&str> {
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body_start = after.find('\n').map_or(0, |n| n + 1);
        let body = &after[body_start..];
        let Some(end) = body.find("```") else {
            break;
        };
        let inner = body[..end].trim();
        if inner.starts_with('{') {
            return Some(inner);
        }
        rest = &body[end + 3..];
    }
    let (open, close) = (text.find('{')?, text.rfind('}')?);
    (open < close).then(|| &text[open..=close])
}

/// `json` with what models add that JSON does not allow taken out, outside strings only: a
/// comma before `}` or `]`, a `//` comment to the end of its line, and Python's `True`,
/// `False` and `None` as JSON's words.
fn mended(json: &str) -> String {
    let chars: Vec<char> = json.chars().collect();
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            ',' if next_significant(&chars, i + 1).is_some_and(|n| n == '}' || n == ']') => {}
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            _ if c.is_ascii_alphabetic() => {
                let word: String = chars[i..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                    .collect();
                out.push_str(match word.as_str() {
                    "True" => "true",
                    "False" => "false",
                    "None" => "null",
                    w => w,
                });
                i += word.chars().count();
                continue;
            }
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// The next character from `from` that is neither whitespace nor inside a `//` comment.
fn next_significant(chars: &[char], from: usize) -> Option<char> {
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            c if c.is_whitespace() => i += 1,
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            c => return Some(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn valid_answers_are_read_as_written() {
        let v = object(r#"{"score": 4, "reason": "a, b }", "complete": true}"#).unwrap();
        assert_eq!(v, json!({"score": 4, "reason": "a, b }", "complete": true}));
        // A string that holds what the mending would touch is left alone.
        let v = object(r#"{"reason": "True, // not a comment,]"}"#).unwrap();
        assert_eq!(v["reason"], "True, // not a comment,]");
    }

    #[test]
    fn fences_prose_and_the_second_fence_are_found() {
        let fenced = "Here is my evaluation:\n```json\n{\"score\": 5}\n```\nThanks.";
        assert_eq!(object(fenced).unwrap(), json!({"score": 5}));
        let second = "```python\nx = 1\n```\nand\n```\n{\"score\": 2}\n```";
        assert_eq!(object(second).unwrap(), json!({"score": 2}));
        let prose = "I give it {\"score\": 3} overall.";
        assert_eq!(object(prose).unwrap(), json!({"score": 3}));
    }

    #[test]
    fn trailing_commas_comments_and_python_words_are_mended() {
        let text = "```json\n{\n  \"score\": 4, // out of 5\n  \"complete\": True,\n  \"notes\": [1, 2,],\n  \"extra\": None,\n}\n```";
        assert_eq!(
            object(text).unwrap(),
            json!({"score": 4, "complete": true, "notes": [1, 2], "extra": null})
        );
    }

    #[test]
    fn what_cannot_be_read_says_so_with_the_first_error() {
        assert_eq!(object("no json here"), Err(JsonAnswerError::NoJson));
        assert_eq!(object("[1, 2]"), Err(JsonAnswerError::NoJson));
        match object("{\"score\": }") {
            Err(JsonAnswerError::Json(e)) => assert!(e.contains("line 1"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
}
