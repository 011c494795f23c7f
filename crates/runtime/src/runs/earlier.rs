//! A run's conversation as it stood at one of its steps, read back from its journal for a
//! rewind (docs/rewind.md): the goal, the coder's and the planner's answers and tool calls,
//! the tools' results, and what became of each change (proposed, applied or rejected, the
//! tests after it), up to the step. What the journal does not keep whole (a tool result's
//! tail) stays cut; the model hears it as history, not as the files' present text.

use std::path::Path;

use serde_json::Value;

use agent_ls_core::conversation::{Earlier, Message, Speaker, ToolCall};

use crate::journal;

/// A rewound run that was itself a rewind goes back this far, at most, for its history.
const CHAIN: usize = 8;

/// The conversation of run `run_id` (recorded under `root`) up to its step `step`, recorded
/// at `recorded_ms`; a run that was itself a rewind brings the conversation it followed.
pub fn at_step(root: &Path, run_id: &str, step: u64, recorded_ms: i64) -> Earlier {
    let lines = journal::lines_of(root, run_id);
    let upto = cut(&lines, recorded_ms);
    let mut messages = followed(root, &lines[..upto], CHAIN);
    messages.extend(conversation(&lines[..upto]));
    messages.push(Message::user(format!(
        "(The user took run {run_id} back to here, its step {step}: the files are as they were after that step, and what the run did after it was undone. A new instruction follows.)"
    )));
    Earlier {
        run_id: run_id.to_string(),
        step,
        messages: paired(messages),
    }
}

/// The conversation a rewound run followed (its `rewound` line's run at its step), read back
/// the same way, `depth` runs deep at most.
fn followed(root: &Path, lines: &[Value], depth: usize) -> Vec<Message> {
    let Some(line) = lines.iter().find(|l| l["type"] == "rewound") else {
        return Vec::new();
    };
    let (Some(from), Some(step)) = (line["data"]["from"].as_str(), line["data"]["step"].as_u64())
    else {
        return Vec::new();
    };
    if depth == 0 {
        return Vec::new();
    }
    let before = journal::lines_of(root, from);
    // That run's lines up to its step, found by when the store recorded the step (it stays
    // applied: it is the step that run was rewound to); without it, up to this run's start.
    let recorded = crate::drive::recorded_store(root)
        .ok()
        .and_then(|s| s.step_recorded_ms(step).ok().flatten());
    let ts = recorded.or(line["ts"].as_i64()).unwrap_or(i64::MAX);
    let upto = cut(&before, ts);
    let mut messages = followed(root, &before[..upto], depth - 1);
    messages.extend(conversation(&before[..upto]));
    messages.push(Message::user(format!(
        "(The user took run {from} back to its step {step} here.)"
    )));
    messages
}

/// How many of the journal's lines come before the step recorded at `recorded_ms` ends: its
/// change was proposed (its `patch` line) before it was written and recorded, so the last
/// patch by then is the step's own; what followed the write (the approval, the tests'
/// result) goes with it, up to the next model call.
fn cut(lines: &[Value], recorded_ms: i64) -> usize {
    let by_then = |l: &Value| l["ts"].as_i64().is_some_and(|t| t <= recorded_ms);
    let Some(patch) = lines
        .iter()
        .rposition(|l| l["type"] == "patch" && by_then(l))
    else {
        return lines.iter().take_while(|l| by_then(l)).count();
    };
    let after = lines[patch + 1..]
        .iter()
        .take_while(|l| {
            !matches!(
                l["type"].as_str(),
                Some("model_call" | "patch" | "finished" | "resumed")
            )
        })
        .count();
    patch + 1 + after
}

/// The messages the lines say: each model answer of the roles that work on the code as the
/// assistant's, each tool result as the tool's, and the rest (the goal, the changes, the
/// tests) as the user's notes between them.
fn conversation(lines: &[Value]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for line in lines {
        let data = &line["data"];
        let text = |key: &str| data[key].as_str().unwrap_or_default().to_string();
        match line["type"].as_str().unwrap_or_default() {
            "intent" => notes.push(format!("Goal: {}", text("goal"))),
            "model_call" if matches!(line["role"].as_str(), Some("coder" | "planner")) => {
                flush(&mut out, &mut notes);
                let calls: Vec<ToolCall> =
                    serde_json::from_value(line["tool_calls"].clone()).unwrap_or_default();
                let content = line["content"].as_str().unwrap_or_default();
                out.push(Message::calls(content, calls));
            }
            "tool_result" => {
                let call = ToolCall {
                    id: text("id"),
                    name: text("name"),
                    arguments: Value::Null,
                };
                out.push(Message::tool_result(&call, text("text")));
            }
            "patch" => notes.push(format!(
                "A change to {} was proposed.",
                strings(data, "files")
            )),
            "approval" => notes.push(match data["accepted"].as_bool() {
                Some(true) => "The change was applied.".to_string(),
                _ => "The user rejected the change.".to_string(),
            }),
            "test_result" => notes.push(format!(
                "The tests after it: {} ({} passed, {} failed).",
                text("state"),
                data["passed"].as_u64().unwrap_or(0),
                data["failed"].as_u64().unwrap_or(0)
            )),
            _ => {}
        }
    }
    flush(&mut out, &mut notes);
    out
}

/// The notes so far, as one user message.
fn flush(out: &mut Vec<Message>, notes: &mut Vec<String>) {
    if !notes.is_empty() {
        out.push(Message::user(notes.join("\n")));
        notes.clear();
    }
}

/// A list of strings in `data[key]`, joined.
fn strings(data: &Value, key: &str) -> String {
    let files: Vec<String> = serde_json::from_value(data[key].clone()).unwrap_or_default();
    files.join(", ")
}

/// The messages with every tool call answered right after it, as providers require: a call
/// without its result (the journal cut between them) is left out, and so is a result
/// without its call.
fn paired(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if m.speaker != Speaker::Assistant {
            // A tool result here follows no assistant message of its own: it is dropped.
            if m.speaker != Speaker::Tool {
                out.push(m.clone());
            }
            i += 1;
            continue;
        }
        let results: Vec<&Message> = messages[i + 1..]
            .iter()
            .take_while(|r| r.speaker == Speaker::Tool)
            .collect();
        let answered = |id: &str| {
            results
                .iter()
                .any(|r| r.answers.as_ref().is_some_and(|(a, _)| a == id))
        };
        let mut answer = m.clone();
        answer.tool_calls.retain(|c| answered(&c.id));
        let kept: Vec<String> = answer.tool_calls.iter().map(|c| c.id.clone()).collect();
        if !answer.content.is_empty() || !answer.tool_calls.is_empty() {
            out.push(answer);
            out.extend(
                results
                    .iter()
                    .filter(|r| r.answers.as_ref().is_some_and(|(id, _)| kept.contains(id)))
                    .map(|r| (*r).clone()),
            );
        }
        i += 1 + results.len();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(ts: i64, role: &str, kind: &str, data: Value) -> Value {
        json!({"ts": ts, "run_id": "run_a", "role": role, "type": kind, "data": data})
    }

    fn answer(ts: i64, content: &str, calls: Value) -> Value {
        let mut l = line(ts, "coder", "model_call", json!({}));
        l["content"] = json!(content);
        l["tool_calls"] = calls;
        l
    }

    /// A run that read a file, changed calc.py (step at ts 40), ran the tests, then tried a
    /// second change.
    fn journal() -> Vec<Value> {
        let call = json!([{"id": "c1", "name": "read_file", "arguments": {"path": "calc.py"}}]);
        vec![
            line(10, "agent", "intent", json!({"goal": "make add add"})),
            answer(20, "", call),
            line(
                21,
                "coder",
                "tool_call",
                json!({"id": "c1", "name": "read_file", "arguments": {}}),
            ),
            line(
                22,
                "tools",
                "tool_result",
                json!({"id": "c1", "name": "read_file", "text": "1: def add"}),
            ),
            answer(30, "calc.py SEARCH/REPLACE one", json!([])),
            line(
                31,
                "agent",
                "patch",
                json!({"files": ["calc.py"], "diff": "-a\n+b"}),
            ),
            line(32, "user", "approval", json!({"accepted": true})),
            line(
                45,
                "tests",
                "test_result",
                json!({"state": "failed", "passed": 1, "failed": 1}),
            ),
            answer(50, "calc.py SEARCH/REPLACE two", json!([])),
            line(
                51,
                "agent",
                "patch",
                json!({"files": ["calc.py"], "diff": "-b\n+c"}),
            ),
        ]
    }

    #[test]
    fn the_conversation_stops_after_the_steps_change_and_its_tests() {
        let lines = journal();
        let upto = cut(&lines, 40);
        assert_eq!(upto, 8, "the test result after the step belongs to it");
        let messages = paired(conversation(&lines[..upto]));
        let said: Vec<(Speaker, &str)> = messages
            .iter()
            .map(|m| (m.speaker, m.content.as_str()))
            .collect();
        assert_eq!(
            said,
            vec![
                (Speaker::User, "Goal: make add add"),
                (Speaker::Assistant, ""),
                (Speaker::Tool, "1: def add"),
                (Speaker::Assistant, "calc.py SEARCH/REPLACE one"),
                (
                    Speaker::User,
                    "A change to calc.py was proposed.\nThe change was applied.\nThe tests after it: failed (1 passed, 1 failed)."
                ),
            ]
        );
        assert_eq!(messages[1].tool_calls.len(), 1);
        assert!(!said.iter().any(|(_, c)| c.contains("two")));
    }

    #[test]
    fn a_rewound_run_rewound_again_brings_the_conversation_it_followed() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join(journal::DIR);
        std::fs::create_dir_all(&runs).unwrap();
        let write = |name: &str, lines: &[Value]| {
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            std::fs::write(runs.join(name), text).unwrap();
        };
        write("1-run_a.jsonl", &journal());
        // run_b went on from run_a's step at ts 40 (no store here: its start is the cut).
        write(
            "2-run_b.jsonl",
            &[
                line(40, "agent", "intent", json!({"goal": "instead, multiply"})),
                line(
                    40,
                    "agent",
                    "rewound",
                    json!({"from": "run_a", "step": 1, "messages": 5}),
                ),
                answer(60, "calc.py SEARCH/REPLACE three", json!([])),
                line(
                    61,
                    "agent",
                    "patch",
                    json!({"files": ["calc.py"], "diff": "-b\n+d"}),
                ),
            ],
        );
        let earlier = at_step(dir.path(), "run_b", 7, 70);
        let said: Vec<&str> = earlier
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        let at = |needle: &str| said.iter().position(|c| c.contains(needle));
        let found = |needle: &str| at(needle).unwrap_or_else(|| panic!("{needle}: {said:?}"));
        let (one, back, goal, three) = (
            found("SEARCH/REPLACE one"),
            found("took run run_a back to its step 1"),
            found("Goal: instead, multiply"),
            found("SEARCH/REPLACE three"),
        );
        assert!(one < back && back < goal && goal < three, "{said:?}");
        assert!(at("SEARCH/REPLACE two").is_none(), "{said:?}");
        assert!(
            said.last()
                .unwrap()
                .contains("took run run_b back to here, its step 7")
        );
    }

    #[test]
    fn a_call_without_its_result_is_left_out() {
        let lines = journal();
        let messages = paired(conversation(&lines[..3]));
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert_eq!(messages[0].speaker, Speaker::User);
    }
}
