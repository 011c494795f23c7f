//! Turns a model's answer into an `EditPlan`: JSON (`{"edits": [...]}`, one edit, a list, or
//! `{"diff": "..."}`), SEARCH/REPLACE text blocks, or unified diffs, alone or mixed in prose.

use serde_json::Value;
use thiserror::Error;

use super::plan::{Edit, EditKind, EditPlan};

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    #[error(
        "the answer holds no edits: expected JSON {{\"edits\": [...]}}, SEARCH/REPLACE blocks or a unified diff"
    )]
    NoEdits,
    #[error("edit {index}: {message}")]
    BadEdit { index: usize, message: String },
    #[error("invalid JSON: {0}")]
    Json(String),
    #[error("SEARCH/REPLACE block at line {line}: {message}")]
    BadBlock { line: usize, message: String },
    #[error("unified diff at line {line}: {message}")]
    BadDiff { line: usize, message: String },
    /// A tool call whose arguments are not JSON: cut off by the output limit, or broken.
    #[error("your {tool} call {how}; send a smaller edit")]
    Truncated { tool: String, how: String },
}

impl ParseError {
    /// The repair class of the error (docs/repairs.md).
    pub fn class(&self) -> &'static str {
        match self {
            ParseError::Truncated { .. } => "truncated",
            _ => "unreadable",
        }
    }
}

/// What went wrong with a tool call's raw `arguments` text that did not parse.
fn unparsed(tool: &str, raw: &str) -> ParseError {
    let how = match serde_json::from_str::<Value>(raw) {
        Err(e) if e.is_eof() => format!("was cut off after {} bytes", raw.len()),
        Err(e) => format!("has arguments that are not valid JSON ({e})"),
        Ok(_) => "has arguments that are not an object".into(),
    };
    ParseError::Truncated {
        tool: tool.to_string(),
        how,
    }
}

/// Parses any supported format. JSON is tried first (the whole answer, then a fenced ```json
/// block), then SEARCH/REPLACE blocks, then unified diffs.
pub fn parse_plan(answer: &str) -> Result<EditPlan, ParseError> {
    let trimmed = answer.trim();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let value: Value =
            serde_json::from_str(trimmed).map_err(|e| ParseError::Json(e.to_string()))?;
        return plan_from_json(&value);
    }
    if let Some(json) = fenced_json(answer) {
        let value: Value =
            serde_json::from_str(json).map_err(|e| ParseError::Json(e.to_string()))?;
        return plan_from_json(&value);
    }
    if answer.lines().any(|l| l.trim_end() == SEARCH_MARK) {
        return parse_blocks(answer);
    }
    if answer
        .lines()
        .any(|l| l.starts_with("@@ ") || l.starts_with("--- "))
    {
        return parse_unified_diff(answer);
    }
    prose_json(answer).ok_or(ParseError::NoEdits)?
}

/// JSON edits with prose around them ("Here is the fix. {...} Done."), tolerated as fenced
/// JSON is: the text from the first `{` to the last `}`, when it parses and names edits.
fn prose_json(answer: &str) -> Option<Result<EditPlan, ParseError>> {
    let (start, end) = (answer.find('{')?, answer.rfind('}')?);
    let value: Value = serde_json::from_str(answer.get(start..=end)?).ok()?;
    let names_edits = ["edits", "path"].iter().any(|k| value.get(k).is_some());
    names_edits.then(|| plan_from_json(&value))
}

/// The change the editing tools' calls propose: `edit_file` (`path`, `search`, `replace`),
/// `write_file` (`path`, `content`) and `apply_patch` (`patch`, a unified diff), in call order.
pub fn plan_from_tool_calls(calls: &[(&str, &Value)]) -> Result<EditPlan, ParseError> {
    let mut plan = EditPlan::default();
    for (i, (name, args)) in calls.iter().enumerate() {
        let index = i + 1;
        if let Value::String(raw) = args {
            return Err(unparsed(name, raw));
        }
        let text = |key: &str| -> Result<String, ParseError> {
            args.get(key)
                .and_then(Value::as_str)
                .map(String::from)
                .ok_or_else(|| ParseError::BadEdit {
                    index,
                    message: format!("{name} needs the string `{key}`"),
                })
        };
        match *name {
            "edit_file" => plan.edits.push(Edit {
                path: text("path")?,
                kind: EditKind::SearchReplace {
                    search: text("search")?,
                    replace: text("replace")?,
                },
            }),
            "write_file" => plan.edits.push(Edit {
                path: text("path")?,
                kind: EditKind::WholeFile {
                    content: text("content")?,
                },
            }),
            "apply_patch" => plan
                .edits
                .extend(parse_unified_diff(&text("patch")?)?.edits),
            other => {
                return Err(ParseError::BadEdit {
                    index,
                    message: format!("`{other}` is not an editing tool"),
                });
            }
        }
    }
    if plan.edits.is_empty() {
        return Err(ParseError::NoEdits);
    }
    Ok(plan)
}

/// The body of the first ```json fence.
fn fenced_json(answer: &str) -> Option<&str> {
    let start = answer.find("```json")?;
    let body_start = start + answer[start..].find('\n')? + 1;
    let body_len = answer[body_start..].find("```")?;
    Some(&answer[body_start..body_start + body_len])
}

/// The coder's JSON answer, a single edit, a list of edits, or `{"diff": "..."}`.
pub fn plan_from_json(value: &Value) -> Result<EditPlan, ParseError> {
    let items: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        Value::Object(map) => match map.get("edits") {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(_) => {
                return Err(ParseError::BadEdit {
                    index: 0,
                    message: "\"edits\" must be a list".into(),
                });
            }
            None => vec![value],
        },
        _ => return Err(ParseError::NoEdits),
    };
    let mut plan = EditPlan::default();
    for (i, item) in items.iter().enumerate() {
        plan.edits.extend(edit_from_json(i + 1, item)?);
    }
    if plan.edits.is_empty() {
        return Err(ParseError::NoEdits);
    }
    Ok(plan)
}

fn edit_from_json(index: usize, item: &Value) -> Result<Vec<Edit>, ParseError> {
    let bad = |message: String| ParseError::BadEdit { index, message };
    let Some(obj) = item.as_object() else {
        return Err(bad("an edit must be an object".into()));
    };
    let text = |key: &str| -> Result<String, ParseError> {
        match obj.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(bad(format!("\"{key}\" must be a string, not {other}"))),
            None => Err(bad(format!("missing \"{key}\""))),
        }
    };
    if obj.contains_key("diff") {
        return parse_unified_diff(&text("diff")?)
            .map(|p| p.edits)
            .map_err(|e| bad(e.to_string()));
    }
    let path = text("path")?;
    if path.trim().is_empty() {
        return Err(bad("\"path\" is empty".into()));
    }
    let kind = if obj.contains_key("content") {
        EditKind::WholeFile {
            content: text("content")?,
        }
    } else if obj.contains_key("search") {
        EditKind::SearchReplace {
            search: text("search")?,
            replace: text("replace")?,
        }
    } else if obj.contains_key("line") {
        let line = obj
            .get("line")
            .and_then(Value::as_u64)
            .filter(|&l| l >= 1)
            .ok_or_else(|| bad("\"line\" must be a 1-based line number".into()))?;
        EditKind::Line {
            line: line as usize,
            old: text("old")?,
            new: text("new")?,
        }
    } else {
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        return Err(bad(format!(
            "cannot tell what kind of edit this is (keys: {}); use path with content, search/replace, line/old/new, or diff",
            keys.join(", ")
        )));
    };
    Ok(vec![Edit { path, kind }])
}

const SEARCH_MARK: &str = "<<<<<<< SEARCH";
const DIVIDER: &str = "=======";
const REPLACE_MARK: &str = ">>>>>>> REPLACE";

/// SEARCH/REPLACE blocks: the path on its own line before each block (optionally with a code
/// fence between); a block without a path line reuses the previous block's path.
fn parse_blocks(answer: &str) -> Result<EditPlan, ParseError> {
    let lines: Vec<&str> = answer.lines().collect();
    let mut plan = EditPlan::default();
    let mut last_path: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() != SEARCH_MARK {
            i += 1;
            continue;
        }
        let bad = |message: String| ParseError::BadBlock {
            line: i + 1,
            message,
        };
        let path = path_before(&lines, i)
            .or_else(|| last_path.clone())
            .ok_or_else(|| {
                bad("no file path before the block; put the path on its own line above it".into())
            })?;
        let divider = (i + 1..lines.len())
            .find(|&j| lines[j].trim_end() == DIVIDER)
            .ok_or_else(|| bad(format!("no {DIVIDER} line")))?;
        let end = (divider + 1..lines.len())
            .find(|&j| lines[j].trim_end() == REPLACE_MARK)
            .ok_or_else(|| bad(format!("no {REPLACE_MARK} line")))?;
        let search = join_lines(&lines[i + 1..divider]);
        let replace = join_lines(&lines[divider + 1..end]);
        plan.edits.push(Edit {
            path: path.clone(),
            kind: EditKind::SearchReplace { search, replace },
        });
        last_path = Some(path);
        i = end + 1;
    }
    if plan.edits.is_empty() {
        return Err(ParseError::NoEdits);
    }
    Ok(plan)
}

/// The path line above a block: the nearest non-empty line that is not a code fence, with
/// decoration (backticks, asterisks, a trailing colon) removed. A line that looks like prose
/// or a previous block's marker is not a path.
fn path_before(lines: &[&str], block: usize) -> Option<String> {
    for line in lines[..block].iter().rev() {
        let t = line.trim();
        if t.is_empty() || t.starts_with("```") {
            continue;
        }
        if t == REPLACE_MARK {
            return None;
        }
        let cleaned = t.trim_matches(|c| c == '`' || c == '*' || c == ':').trim();
        let looks_like_path = !cleaned.is_empty()
            && !cleaned.contains(char::is_whitespace)
            && (cleaned.contains('.') || cleaned.contains('/'));
        return looks_like_path.then(|| cleaned.to_string());
    }
    None
}

fn join_lines(lines: &[&str]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Unified diffs: `--- a/x`, `+++ b/x`, then `@@ -l,n +l,n @@` hunks. A diff from /dev/null
/// creates a file. Blank lines inside a hunk are read as blank context, since models often
/// drop the leading space.
pub fn parse_unified_diff(text: &str) -> Result<EditPlan, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut plan = EditPlan::default();
    let mut i = 0;
    let mut path: Option<String> = None;
    let mut creating = false;
    while i < lines.len() {
        let line = lines[i];
        if let Some(old) = line.strip_prefix("--- ") {
            let (new_path, created) = file_header(&lines, i, old)?;
            path = Some(new_path);
            creating = created;
            i += 2;
            continue;
        }
        if line.starts_with("@@") {
            let Some(file) = path.clone() else {
                return Err(ParseError::BadDiff {
                    line: i + 1,
                    message: "a hunk before any ---/+++ file header".into(),
                });
            };
            let start = hunk_old_start(line);
            let (search, replace, next) = hunk_body(&lines, i + 1);
            i = next;
            let kind = if creating {
                EditKind::WholeFile { content: replace }
            } else {
                EditKind::Hunk {
                    line: start,
                    search,
                    replace,
                }
            };
            plan.edits.push(Edit { path: file, kind });
            continue;
        }
        i += 1;
    }
    if plan.edits.is_empty() {
        return Err(ParseError::NoEdits);
    }
    Ok(plan)
}

/// The `--- old` line at `i` and the `+++ new` line after it: the file the hunks change, and
/// whether the diff creates it (from /dev/null).
fn file_header(lines: &[&str], i: usize, old: &str) -> Result<(String, bool), ParseError> {
    let new = lines
        .get(i + 1)
        .and_then(|l| l.strip_prefix("+++ "))
        .ok_or_else(|| ParseError::BadDiff {
            line: i + 1,
            message: "a --- line must be followed by a +++ line".into(),
        })?;
    let new_path = diff_path(new);
    if new_path == "/dev/null" {
        return Err(ParseError::BadDiff {
            line: i + 2,
            message: "deleting files is not supported".into(),
        });
    }
    Ok((new_path, diff_path(old) == "/dev/null"))
}

/// A hunk's lines from `i` up to the next hunk or file header: its old text (context and
/// removed lines), its new text (context and added lines), and where it ended.
fn hunk_body(lines: &[&str], mut i: usize) -> (String, String, usize) {
    let (mut search, mut replace) = (String::new(), String::new());
    while i < lines.len() && !lines[i].starts_with("@@") && !is_file_header(lines, i) {
        let l = lines[i];
        match l.chars().next() {
            Some('+') => replace.push_str(&format!("{}\n", &l[1..])),
            Some('-') => search.push_str(&format!("{}\n", &l[1..])),
            Some(' ') => {
                search.push_str(&format!("{}\n", &l[1..]));
                replace.push_str(&format!("{}\n", &l[1..]));
            }
            None => {
                search.push('\n');
                replace.push('\n');
            }
            Some('\\') => {} // "\ No newline at end of file"
            Some(_) => break,
        }
        i += 1;
    }
    (search, replace, i)
}

fn is_file_header(lines: &[&str], i: usize) -> bool {
    lines[i].starts_with("--- ") && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ "))
}

/// `a/src/x.rs` → `src/x.rs`; a tab-separated timestamp is dropped.
fn diff_path(raw: &str) -> String {
    let p = raw.split('\t').next().unwrap_or(raw).trim();
    p.strip_prefix("a/")
        .or_else(|| p.strip_prefix("b/"))
        .unwrap_or(p)
        .to_string()
}

/// The old start line of `@@ -12,5 +12,6 @@`, when the header has one.
fn hunk_old_start(header: &str) -> Option<usize> {
    let old = header.split_whitespace().nth(1)?.strip_prefix('-')?;
    old.split(',')
        .next()?
        .parse()
        .ok()
        .filter(|&l: &usize| l >= 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_json_kinds_parse_in_order() {
        let plan = parse_plan(
            r#"{"edits": [
                {"path": "a.py", "line": 3, "old": "x = 1", "new": "x = 2"},
                {"path": "b.py", "search": "foo", "replace": "bar"},
                {"path": "c.py", "content": "new file\n"},
                {"diff": "--- a/d.py\n+++ b/d.py\n@@ -1,2 +1,2 @@\n keep\n-old\n+new\n"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(plan.paths(), ["a.py", "b.py", "c.py", "d.py"]);
        assert!(
            matches!(&plan.edits[3].kind, EditKind::Hunk { line: Some(1), search, replace }
            if search == "keep\nold\n" && replace == "keep\nnew\n")
        );
    }

    #[test]
    fn search_replace_blocks_with_fences_and_reused_paths() {
        let answer = "Here is the fix.\n\nsrc/lib.rs\n```rust\n<<<<<<< SEARCH\nfn a() {}\n=======\nfn a() { 1 }\n>>>>>>> REPLACE\n```\n\n```rust\n<<<<<<< SEARCH\nfn b() {}\n=======\n>>>>>>> REPLACE\n```\n";
        let plan = parse_plan(answer).unwrap();
        assert_eq!(plan.edits.len(), 2);
        assert_eq!(plan.edits[1].path, "src/lib.rs");
        assert_eq!(
            plan.edits[1].kind,
            EditKind::SearchReplace {
                search: "fn b() {}\n".into(),
                replace: String::new()
            }
        );
    }

    #[test]
    fn a_diff_from_dev_null_creates_a_file() {
        let plan =
            parse_plan("--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n").unwrap();
        assert_eq!(
            plan.edits[0].kind,
            EditKind::WholeFile {
                content: "one\ntwo\n".into()
            }
        );
    }

    #[test]
    fn prose_around_json_edits_is_tolerated() {
        let answer = "Here is the fix.\n{\"path\": \"a.py\", \"search\": \"a - b\", \"replace\": \"a + b\"}\nThat should do it.";
        let plan = parse_plan(answer).unwrap();
        assert_eq!(plan.paths(), ["a.py"]);
        assert_eq!(
            parse_plan("I think {this} is wrong."),
            Err(ParseError::NoEdits)
        );
    }

    #[test]
    fn a_cut_off_tool_call_says_how_many_bytes_came() {
        let raw = serde_json::Value::String("{\"path\": \"a.py\", \"search\": \"de".into());
        let err = plan_from_tool_calls(&[("edit_file", &raw)]).unwrap_err();
        assert_eq!(err.class(), "truncated");
        assert_eq!(
            err.to_string(),
            "your edit_file call was cut off after 30 bytes; send a smaller edit"
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(parse_plan("no edits here"), Err(ParseError::NoEdits));
        let err = parse_plan(r#"{"edits": [{"path": "a", "line": 0, "old": "", "new": ""}]}"#)
            .unwrap_err();
        assert!(err.to_string().contains("1-based"), "{err}");
        let err = parse_plan(r#"{"edits": [{"path": "a", "frobnicate": 1}]}"#).unwrap_err();
        assert!(err.to_string().contains("frobnicate"), "{err}");
        let err = parse_plan("<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n").unwrap_err();
        assert!(err.to_string().contains("no file path"), "{err}");
        let err = parse_plan("a.rs\n<<<<<<< SEARCH\nx\n").unwrap_err();
        assert!(err.to_string().contains("======="), "{err}");
        assert!(matches!(
            parse_plan("{\"edits\": [}"),
            Err(ParseError::Json(_))
        ));
    }
}
