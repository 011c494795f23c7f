//! A recorded run read back from its journal as the events a live view had of it (those the
//! journal keeps: the goal, the plan, the tools called and their results, the changes and
//! their verdicts, the test runs, the review, warnings and the end), in order, so a front end
//! can show a run again as it showed it live (ACP's session/load). A line this reader does not
//! know, or cannot read, is left out: showing less of an old run never fails the load.

use std::path::Path;

use serde_json::Value;

use agent_ls_core::agent::RunStatus;
use agent_ls_core::conversation::ToolCall;
use agent_ls_core::events::RunEvent;

use crate::journal;

/// How a recorded run ended, as a user would say it now: a finished run whose files a
/// rollback put back (recorded in the store's `rollbacks`, from any surface) is rolled back,
/// not done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    As(RunStatus),
    RolledBack,
}

impl Ended {
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::As(s) => s.as_str(),
            Ended::RolledBack => "rolled back",
        }
    }
}

/// How run `run_id` (recorded under `root`, whose journal says `status`) ended.
pub fn ended(root: &Path, run_id: &str, status: RunStatus) -> Ended {
    if status != RunStatus::Interrupted && super::rollback::was_rolled_back(root, run_id) {
        Ended::RolledBack
    } else {
        Ended::As(status)
    }
}

/// The events of run `run_id` under `root`, as its journal recorded them; none when it has no
/// journal.
pub fn recorded_events(root: &Path, run_id: &str) -> Vec<RunEvent> {
    journal::lines_of(root, run_id)
        .iter()
        .filter_map(|line| event(line["type"].as_str()?, &line["data"]))
        .collect()
}

/// One journal line's event, when it is one a live view shows.
fn event(kind: &str, data: &Value) -> Option<RunEvent> {
    let text = |key: &str| data[key].as_str().unwrap_or_default().to_string();
    let strings = |key: &str| -> Vec<String> {
        serde_json::from_value(data[key].clone()).unwrap_or_default()
    };
    Some(match kind {
        "intent" | "resumed" => RunEvent::Started {
            goal: text("goal"),
            intent: None,
            iterations: data["iterations"].as_u64().unwrap_or(0) as u32,
            resumed: kind == "resumed",
        },
        "plan" => RunEvent::Plan {
            tasks: serde_json::from_value(data["tasks"].clone()).ok()?,
        },
        "tool_call" => RunEvent::ToolCall(serde_json::from_value::<ToolCall>(data.clone()).ok()?),
        "tool_result" => RunEvent::ToolResult {
            id: text("id"),
            name: text("name"),
            is_error: data["is_error"].as_bool().unwrap_or(false),
            bytes: data["bytes"].as_u64().unwrap_or(0) as usize,
            duration_ms: data["duration_ms"].as_u64().unwrap_or(0),
            text: text("text"),
        },
        "patch" => RunEvent::Patch {
            files: strings("files"),
            diff: text("diff"),
            review: data["review"].clone(),
        },
        "approval" => RunEvent::Approval {
            accepted: data["accepted"].as_bool()?,
        },
        "test_result" => RunEvent::TestResult {
            state: serde_json::from_value(data["state"].clone()).ok()?,
            passed: data["passed"].as_u64().map(|n| n as u32),
            failed: data["failed"].as_u64().map(|n| n as u32),
            failures: data["failures"].as_u64().unwrap_or(0) as usize,
            duration_ms: data["duration_ms"].as_u64().unwrap_or(0),
            command: text("command"),
            environment: data["environment"].as_str().map(String::from),
        },
        "review" => RunEvent::Review(serde_json::from_value(data.clone()).ok()?),
        "warning" => RunEvent::Warning {
            message: text("message"),
        },
        "finished" => RunEvent::Finished {
            status: data["status"].as_str().and_then(RunStatus::parse)?,
            answer: text("answer"),
            iterations: data["iterations"].as_u64().unwrap_or(0) as u32,
            files_changed: strings("files_changed"),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_ls_core::events::{Audience, Wire};

    /// Each event a replay shows comes back from its journal line as it was recorded.
    #[test]
    fn the_events_a_replay_shows_come_back_from_their_lines() {
        let events = [
            RunEvent::Started {
                goal: "fix it".into(),
                intent: None,
                iterations: 3,
                resumed: false,
            },
            RunEvent::ToolCall(ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: serde_json::json!({"path": "calc.py"}),
            }),
            RunEvent::ToolResult {
                id: "c1".into(),
                name: "read_file".into(),
                is_error: false,
                bytes: 4,
                duration_ms: 1,
                text: "text".into(),
            },
            RunEvent::Approval { accepted: true },
            RunEvent::Warning {
                message: "careful".into(),
            },
            RunEvent::Finished {
                status: RunStatus::Done,
                answer: "done".into(),
                iterations: 1,
                files_changed: vec!["calc.py".into()],
            },
        ];
        for e in events {
            let Wire { kind, data, .. } = e.wire(Audience::Journal);
            assert_eq!(event(kind, &data).as_ref(), Some(&e), "{kind}");
        }
        assert_eq!(event("token", &serde_json::json!({"text": "x"})), None);
    }
}
