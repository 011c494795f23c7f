//! The replay provider: scripted answers from a JSONL file, one object a line,
//! `{"role": "coder", "content": "...", "tool_calls": [{"name": ..., "arguments": {...}}]}`.
//! Each call takes the next unused line for its role. The run journal records answers in the
//! same form, so a recorded run can be replayed exactly.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::Value;

use super::{ModelError, Response, Role, ToolCall, Usage};

#[derive(Debug, Deserialize)]
struct Line {
    role: Role,
    #[serde(default)]
    content: String,
    #[serde(default)]
    tool_calls: Vec<ReplayToolCall>,
}

#[derive(Debug, Deserialize)]
struct ReplayToolCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// A script that cannot be used; reported at the first call, as `NotConfigured`.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read the replay file {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: {source}")]
    Bad { file: String, source: BadLine },
}

/// A line of a script that is not JSON, or not an answer.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {source}")]
pub struct BadLine {
    line: usize,
    source: serde_json::Error,
}

pub struct Replay {
    file: String,
    /// The script, or why it could not be read (reported at the first call).
    lines: Result<Mutex<HashMap<Role, VecDeque<Line>>>, ScriptError>,
}

impl Replay {
    pub fn open(path: &Path) -> Self {
        let file = path.display().to_string();
        let lines = std::fs::read_to_string(path)
            .map_err(|source| ScriptError::Read {
                file: file.clone(),
                source,
            })
            .and_then(|text| {
                parse(&text).map_err(|source| ScriptError::Bad {
                    file: file.clone(),
                    source,
                })
            })
            .map(Mutex::new);
        Replay { file, lines }
    }

    pub fn from_text(name: &str, text: &str) -> Result<Self, BadLine> {
        Ok(Replay {
            file: name.to_string(),
            lines: Ok(Mutex::new(parse(text)?)),
        })
    }

    pub fn next(&self, role: Role) -> Result<Response, ModelError> {
        let lines = self
            .lines
            .as_ref()
            .map_err(|e| ModelError::NotConfigured(e.to_string()))?;
        let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
        let line = lines
            .get_mut(&role)
            .and_then(VecDeque::pop_front)
            .ok_or_else(|| ModelError::ReplayExhausted {
                role: role.as_str().into(),
                file: self.file.clone(),
            })?;
        Ok(Response {
            cached: None,
            cut_off: false,
            bad_bytes: Vec::new(),
            usage: Usage {
                input_tokens: 0,
                output_tokens: (line.content.len() / 4) as u64,
                estimated: true,
                ..Usage::default()
            },
            text: line.content,
            tool_calls: line
                .tool_calls
                .into_iter()
                .enumerate()
                .map(|(i, t)| ToolCall {
                    id: t.id.unwrap_or_else(|| format!("replay_{i}")),
                    name: t.name,
                    arguments: t.arguments,
                })
                .collect(),
            provider: "replay".into(),
            model: "replay".into(),
            duration_ms: 0,
            attempts: 1,
            cost_usd: None,
        })
    }
}

fn parse(text: &str) -> Result<HashMap<Role, VecDeque<Line>>, BadLine> {
    let mut by_role: HashMap<Role, VecDeque<Line>> = HashMap::new();
    let count = text.lines().count();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        // The torn end of a journal whose run was killed mid-write: a last line without its
        // newline that is not whole JSON. Every line before it is whole, so it is left out.
        if i + 1 == count
            && !text.ends_with('\n')
            && serde_json::from_str::<serde_json::Value>(raw).is_err()
        {
            tracing::warn!("line {}: skipped a torn last line", i + 1);
            continue;
        }
        // A run journal replays as is: its lines other than model answers are skipped.
        let bad = |source| BadLine {
            line: i + 1,
            source,
        };
        let value: serde_json::Value = serde_json::from_str(raw).map_err(bad)?;
        if value.get("type").is_some_and(|t| t != "model_call") {
            continue;
        }
        let line: Line = serde_json::from_value(value).map_err(bad)?;
        by_role.entry(line.role).or_default().push_back(line);
    }
    Ok(by_role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_left_out_and_a_bad_line_before_it_is_an_error() {
        let whole = r#"{"role": "coder", "content": "a"}"#;
        let torn = format!("{whole}\n{{\"role\": \"coder\", \"cont");
        let by_role = parse(&torn).expect("the torn end is skipped");
        assert_eq!(by_role[&Role::Coder].len(), 1);
        // The same bytes with a newline after them were written whole: a real error.
        assert!(parse(&format!("{torn}\n")).is_err());
        assert!(parse(&format!("{{\"role\"\n{whole}")).is_err());
    }

    #[test]
    fn answers_come_in_order_per_role_and_run_out_clearly() {
        let r = Replay::from_text(
            "script.jsonl",
            "{\"role\": \"coder\", \"content\": \"one\"}\n{\"role\": \"planner\", \"content\": \"plan\"}\n{\"role\": \"coder\", \"content\": \"two\", \"tool_calls\": [{\"name\": \"edit\", \"arguments\": {\"x\": 1}}]}\n",
        )
        .unwrap();
        assert_eq!(r.next(Role::Coder).unwrap().text, "one");
        let two = r.next(Role::Coder).unwrap();
        assert_eq!(
            (two.text.as_str(), two.tool_calls[0].name.as_str()),
            ("two", "edit")
        );
        assert_eq!(r.next(Role::Planner).unwrap().text, "plan");
        let err = r.next(Role::Coder).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the replay script script.jsonl has no more answers for the coder role"
        );
        assert!(Replay::from_text("x", "{\"role\": \"wizard\"}").is_err());
    }
}
