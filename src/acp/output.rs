//! What an ACP client shows of a run, in words it can show as they are: thoughts in prose
//! (not the model's JSON nor its edit blocks), tool call titles that name what they act on,
//! and the places a tool call reads or changes; the reviewer's findings as a tool call whose
//! locations are the lines they name.

use std::path::Path;

use agent_client_protocol::v1::schema::{
    Content, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolKind,
};
use agent_ls_core::agent::Intent;
use agent_ls_core::agent::review::{Finding, ReviewResult, Verdict};
use agent_ls_core::conversation::Role;
use agent_ls_core::events::{Reflection, RunEvent};
use serde_json::Value;

/// The model's streamed answers as thoughts, a line at a time. The roles that answer in JSON
/// (planner, reflector, evaluator, intent) are not streamed: their events are told in a
/// sentence instead (`sentence`). The coder's SEARCH/REPLACE blocks, with the path line and
/// the code fence around them, are left out too: the edit tool call shows the change.
#[derive(Default)]
pub struct Thoughts {
    /// The line being streamed, not yet ended.
    partial: String,
    /// Lines that may open an edit block (a fence, a path), held until the next line says.
    held: Vec<String>,
    in_block: bool,
    /// Just after a block: a fence line closes it.
    after_block: bool,
}

impl Thoughts {
    /// A piece of `role`'s answer; the prose lines it completes.
    pub fn token(&mut self, role: Role, text: &str) -> Vec<String> {
        if !matches!(role, Role::Coder | Role::Summarizer) {
            return Vec::new();
        }
        self.partial.push_str(text);
        let mut out = Vec::new();
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            self.line(line.trim_end_matches(['\n', '\r']), &mut out);
        }
        out
    }

    /// The answer ended: the lines still held, when they were prose after all.
    pub fn flush(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.partial.is_empty() {
            let rest = std::mem::take(&mut self.partial);
            self.line(&rest, &mut out);
        }
        if !self.in_block {
            out.append(&mut self.held);
        }
        self.held.clear();
        self.in_block = false;
        self.after_block = false;
        out
    }

    fn line(&mut self, line: &str, out: &mut Vec<String>) {
        let trimmed = line.trim();
        if self.in_block {
            if trimmed.starts_with(">>>>>>>") {
                self.in_block = false;
                self.after_block = true;
            }
            return;
        }
        if self.after_block && trimmed.starts_with("```") {
            self.after_block = false;
            return;
        }
        self.after_block = false;
        if trimmed.starts_with("<<<<<<<") {
            self.held.clear();
            self.in_block = true;
            return;
        }
        let may_open = trimmed.starts_with("```")
            || (!trimmed.is_empty() && !trimmed.contains(' ') && trimmed.contains(['.', '/']));
        if may_open {
            self.held.push(line.to_string());
            if self.held.len() > 2 {
                out.push(self.held.remove(0));
            }
            return;
        }
        out.append(&mut self.held);
        if !trimmed.is_empty() {
            out.push(line.to_string());
        }
    }
}

/// A JSON role's finished answer in a sentence, for the thoughts.
pub fn sentence(e: &RunEvent) -> Option<String> {
    match e {
        RunEvent::Started {
            intent: Some(intent),
            resumed: false,
            ..
        } => Some(format!(
            "I take the goal as {}.",
            match intent {
                Intent::Fix => "a fix: the failing tests should pass",
                Intent::Edit => "a change to the code",
                Intent::Explain => "a question, so nothing will be edited",
                Intent::Test => "a test run",
            }
        )),
        RunEvent::Plan { tasks } if !tasks.is_empty() => Some(format!(
            "The plan: {}.",
            tasks
                .iter()
                .map(|t| t.title.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        )),
        RunEvent::Reflection(Reflection::Parsed {
            passed,
            report,
            next_step,
            ..
        }) => {
            let verdict = if *passed { "passed" } else { "not done yet" };
            let mut s = format!("Looking back: {verdict}. {}", report.trim());
            if !next_step.trim().is_empty() {
                s.push_str(&format!(" Next: {}", next_step.trim()));
            }
            Some(s)
        }
        // A reflection the model did not answer in JSON is prose already.
        RunEvent::Reflection(Reflection::Unparsed { text }) => Some(text.trim().to_string()),
        RunEvent::Evaluation {
            score,
            reason,
            complete,
        } => Some(format!(
            "The result scores {score}{}: {}",
            if *complete {
                ", complete"
            } else {
                ", not complete"
            },
            reason.trim()
        )),
        // The instruction files in the prompt, with their bytes (docs/instructions.md).
        RunEvent::Context { instructions, .. } if !instructions.is_empty() => Some(format!(
            "Instructions: {}.",
            instruction_files(instructions)
        )),
        RunEvent::Instructions { files, cut } => Some(format!(
            "Instructions now: {}.{}",
            instruction_files(files),
            cut.as_ref()
                .map(|c| format!(" Cut: {c}."))
                .unwrap_or_default()
        )),
        // The review is a tool call of its own (`review_call`), with its findings' places.
        _ => None,
    }
}

/// Instruction files as `AGENTS.md (2563 bytes), ...`.
fn instruction_files(files: &[agent_ls_core::instructions::Used]) -> String {
    files
        .iter()
        .map(|f| format!("{} ({} bytes)", f.path, f.bytes))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A review as a `think` tool call titled with its verdict ("Review: patch is incorrect (2
/// findings)"): the summary and explanation, then one content block per finding, and the
/// findings' files and first lines as its locations, so a client can jump to each. A review
/// that could not be had is `failed`, never shown as a pass.
pub fn review_call(root: &Path, id: String, result: &ReviewResult) -> ToolCall {
    let text = |t: String| ToolCallContent::Content(Content::new(t));
    let call = ToolCall::new(id, review_title(result)).kind(ToolKind::Think);
    let review = match result {
        ReviewResult::Unavailable { reason } => {
            return call
                .status(ToolCallStatus::Failed)
                .content(vec![text(format!("review unavailable: {reason}"))]);
        }
        ReviewResult::Reviewed { review, .. } => review,
    };
    let mut head = result.summary();
    if !review.explanation.trim().is_empty() {
        head.push_str(&format!("\n{}", review.explanation.trim()));
    }
    let mut content = vec![text(head)];
    content.extend(review.findings.iter().map(|f| text(finding_text(f))));
    let locations = review
        .findings
        .iter()
        .map(|f| ToolCallLocation::new(root.join(&f.path)).line(f.start_line))
        .collect();
    call.status(ToolCallStatus::Completed)
        .content(content)
        .locations(locations)
        .raw_output(serde_json::to_value(result).ok())
}

fn review_title(result: &ReviewResult) -> String {
    let ReviewResult::Reviewed { review, .. } = result else {
        return "Review unavailable".into();
    };
    let verdict = match review.verdict {
        Verdict::Correct => "correct",
        Verdict::Incorrect => "incorrect",
    };
    let findings = match review.findings.len() {
        0 => "no findings".to_string(),
        1 => "1 finding".to_string(),
        n => format!("{n} findings"),
    };
    format!("Review: patch is {verdict} ({findings})")
}

/// "[P1] add subtracts: calc.py:5-5 (confidence 0.90)", then the body.
fn finding_text(f: &Finding) -> String {
    let tag = format!("[P{}]", f.priority);
    let title = f.title.trim();
    let title = title.strip_prefix(&tag).unwrap_or(title).trim();
    let mut out = format!(
        "{tag} {title}: {}:{}-{} (confidence {:.2}{})",
        f.path,
        f.start_line,
        f.end_line,
        f.confidence,
        if f.outside_change {
            "; outside the change"
        } else {
            ""
        }
    );
    if !f.body.trim().is_empty() {
        out.push_str(&format!("\n{}", f.body.trim()));
    }
    out
}

/// The arguments that say what a tool acts on, in the order they are worth naming.
const TELLING: &[&str] = &["path", "command", "pattern", "query", "glob", "test_id"];

/// A model tool call's title: the tool and what it acts on ("read_file calc.py",
/// "grep: def add"), or its arguments cut short.
pub fn tool_title(name: &str, args: &Value) -> String {
    let telling = TELLING.iter().find_map(|k| match args.get(*k)? {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => Some(
            items
                .iter()
                .map(|i| i.as_str().map_or_else(|| i.to_string(), String::from))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    });
    match telling {
        Some(t) => format!("{name} {}", cut(&t, 100)),
        None if args.as_object().is_some_and(|o| o.is_empty()) || args.is_null() => {
            name.to_string()
        }
        None => format!("{name} {}", cut(&args.to_string(), 100)),
    }
}

/// The file a tool call reads or changes, and its line when the arguments name one.
pub fn tool_locations(root: &Path, args: &Value) -> Vec<ToolCallLocation> {
    let Some(path) = args.get("path").and_then(Value::as_str) else {
        return Vec::new();
    };
    let line = ["start_line", "line"]
        .iter()
        .find_map(|k| args.get(*k).and_then(Value::as_u64))
        .and_then(|l| u32::try_from(l).ok());
    vec![ToolCallLocation::new(root.join(path)).line(line)]
}

/// Where a change to a file begins: the 1-based line of its first difference.
pub fn first_changed_line(old: Option<&str>, new: &str) -> u32 {
    let Some(old) = old else { return 1 };
    let same = old
        .lines()
        .zip(new.lines())
        .take_while(|(a, b)| a == b)
        .count();
    u32::try_from(same + 1).unwrap_or(u32::MAX)
}

fn cut(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() <= max && line.len() == text.len() {
        return line.to_string();
    }
    let head: String = line.chars().take(max).collect();
    format!("{head}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(pieces: &[&str]) -> Vec<String> {
        let mut t = Thoughts::default();
        let mut out = Vec::new();
        for p in pieces {
            out.extend(t.token(Role::Coder, p));
        }
        out.extend(t.flush());
        out
    }

    #[test]
    fn the_coders_prose_streams_and_its_edit_blocks_do_not() {
        let out = streamed(&[
            "The sum was a diff",
            "erence.\n```python\ncalc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n",
            "    return a + b\n>>>>>>> REPLACE\n```\nThat fixes test_add.\n",
        ]);
        assert_eq!(out, ["The sum was a difference.", "That fixes test_add."]);
    }

    #[test]
    fn a_held_line_that_opens_no_block_is_prose_after_all() {
        let out = streamed(&["See calc.py\ncalc.py\nIt is short.\nnotes.md"]);
        assert_eq!(out, ["See calc.py", "calc.py", "It is short.", "notes.md"]);
    }

    #[test]
    fn the_json_roles_are_not_streamed() {
        let mut t = Thoughts::default();
        assert!(t.token(Role::Planner, "{\"tasks\": []}\n").is_empty());
        assert!(t.token(Role::Evaluator, "{\"score\": 9}\n").is_empty());
        assert!(t.flush().is_empty());
    }

    #[test]
    fn the_json_roles_answers_are_told_in_sentences() {
        let started = RunEvent::Started {
            goal: "fix".into(),
            intent: Some(Intent::Fix),
            iterations: 15,
            resumed: false,
        };
        assert_eq!(
            sentence(&started).unwrap(),
            "I take the goal as a fix: the failing tests should pass."
        );
        let evaluated = RunEvent::Evaluation {
            score: 9,
            reason: "the sum is right".into(),
            complete: true,
        };
        assert_eq!(
            sentence(&evaluated).unwrap(),
            "The result scores 9, complete: the sum is right"
        );
        let unavailable = ReviewResult::Unavailable {
            reason: "the reviewer model failed: timeout".into(),
        };
        // The review is a tool call, not a thought.
        assert_eq!(sentence(&RunEvent::Review(unavailable.clone())), None);
        let call = review_call(Path::new("/ws"), "review_1".into(), &unavailable);
        assert_eq!(call.title, "Review unavailable");
        assert_eq!(call.status, ToolCallStatus::Failed);
    }

    #[test]
    fn a_review_is_a_tool_call_at_its_findings_lines() {
        let finding = |priority: u8, line: u32| Finding {
            title: format!("[P{priority}] odd"),
            body: "why".into(),
            priority,
            confidence: 0.9,
            path: "calc.py".into(),
            start_line: line,
            end_line: line + 1,
            outside_change: line > 8,
        };
        let result = ReviewResult::Reviewed {
            review: agent_ls_core::agent::review::Review {
                findings: vec![finding(1, 5), finding(3, 9)],
                verdict: Verdict::Incorrect,
                explanation: "add is wrong".into(),
                confidence: 0.8,
            },
            blocking: false,
        };
        let call = review_call(Path::new("/ws"), "review_1".into(), &result);
        assert_eq!(call.title, "Review: patch is incorrect (2 findings)");
        assert_eq!(call.kind, ToolKind::Think);
        assert_eq!(call.status, ToolCallStatus::Completed);
        let lines: Vec<_> = call
            .locations
            .iter()
            .map(|l| (l.path.display().to_string(), l.line))
            .collect();
        assert_eq!(
            lines,
            [
                ("/ws/calc.py".into(), Some(5)),
                ("/ws/calc.py".into(), Some(9))
            ]
        );
        let texts: Vec<String> = call
            .content
            .iter()
            .map(|c| match c {
                ToolCallContent::Content(c) => serde_json::to_value(&c.content).unwrap()["text"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                _ => String::new(),
            })
            .collect();
        assert!(texts[0].ends_with("\nadd is wrong"), "{texts:?}");
        assert_eq!(texts[1], "[P1] odd: calc.py:5-6 (confidence 0.90)\nwhy");
        assert_eq!(
            texts[2],
            "[P3] odd: calc.py:9-10 (confidence 0.90; outside the change)\nwhy"
        );
    }

    #[test]
    fn titles_name_what_the_tool_acts_on() {
        let args = serde_json::json!({"path": "calc.py", "start_line": 3});
        assert_eq!(tool_title("read_file", &args), "read_file calc.py");
        let locations = tool_locations(Path::new("/ws"), &args);
        assert_eq!(locations[0].path, Path::new("/ws/calc.py"));
        assert_eq!(locations[0].line, Some(3));
        let run = serde_json::json!({"command": ["pytest", "-q"]});
        assert_eq!(tool_title("run_tests", &run), "run_tests pytest -q");
        assert_eq!(
            tool_title("list_files", &serde_json::json!({})),
            "list_files"
        );
    }

    #[test]
    fn a_change_begins_at_its_first_different_line() {
        assert_eq!(first_changed_line(Some("a\nb\nc\n"), "a\nB\nc\n"), 2);
        assert_eq!(first_changed_line(None, "new\n"), 1);
    }
}
