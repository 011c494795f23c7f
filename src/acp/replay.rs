//! `session/load`'s history: a recorded run's conversation streamed again as the session
//! updates its live run sent (the goal as the user's message, the plan and its entries, the
//! tools called with their final status, each change and test run as a tool call, the review,
//! warnings and the answer), from the events the runtime reads back from its journal.

use std::path::Path;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    self, Plan, SessionUpdate, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind,
};
use agent_ls_core::events::RunEvent;
use agent_ls_core::test_output::TestState;

use super::client::{notify, say, text_chunk};
use super::output;
use super::run::{self, PlanView};

/// Streams run `run_id`'s recorded conversation into `session`.
pub(super) fn replay(conn: &ConnectionTo<Client>, session: &str, root: &Path, run_id: &str) {
    let events = agent_ls_runtime::runs::history::recorded_events(root, run_id);
    let mut plan = PlanView::default();
    // The change awaiting its verdict, by its tool call's id.
    let mut pending: Option<String> = None;
    for (n, e) in events.iter().enumerate() {
        if let Some(entries) = plan.follow(e) {
            notify(conn, session, SessionUpdate::Plan(Plan::new(entries)));
        }
        match e {
            RunEvent::Started {
                goal,
                resumed: false,
                ..
            } => notify(
                conn,
                session,
                SessionUpdate::UserMessageChunk(text_chunk(goal.clone())),
            ),
            // A session replays several runs, whose calls' ids may repeat: each is made the
            // run's own.
            RunEvent::ToolCall(call) => {
                let mut call = call.clone();
                call.id = format!("{run_id}_{}", call.id);
                run::event(conn, session, root, &RunEvent::ToolCall(call));
            }
            RunEvent::ToolResult { id, .. } => {
                let mut result = e.clone();
                if let RunEvent::ToolResult { id: own, .. } = &mut result {
                    *own = format!("{run_id}_{id}");
                }
                run::event(conn, session, root, &result);
            }
            RunEvent::Patch { files, diff, .. } => {
                let id = format!("{run_id}_edit_{n}");
                let call = ToolCall::new(id.clone(), format!("Edit {}", files.join(", ")))
                    .kind(ToolKind::Edit)
                    .status(ToolCallStatus::Pending)
                    .content(vec![ToolCallContent::Content(schema::Content::new(
                        diff.clone(),
                    ))]);
                notify(conn, session, SessionUpdate::ToolCall(call));
                pending = Some(id);
            }
            RunEvent::Approval { accepted } => {
                if let Some(id) = pending.take() {
                    let status = if *accepted {
                        ToolCallStatus::Completed
                    } else {
                        ToolCallStatus::Failed
                    };
                    update(conn, session, id, status, None);
                }
            }
            RunEvent::TestResult { .. } => test_run(conn, session, &format!("{run_id}_{n}"), e),
            RunEvent::Review(result) => {
                let call = output::review_call(root, format!("{run_id}_review_{n}"), result);
                notify(conn, session, SessionUpdate::ToolCall(call));
            }
            RunEvent::Warning { message } => say(conn, session, format!("agent-ls: {message}\n")),
            RunEvent::Finished { answer, .. } => say(conn, session, answer.clone()),
            _ => {}
        }
    }
}

/// A recorded test run as the execute tool call it was, with its final status and counts.
fn test_run(conn: &ConnectionTo<Client>, session: &str, id: &str, e: &RunEvent) {
    let RunEvent::TestResult {
        state,
        passed,
        failed,
        command,
        ..
    } = e
    else {
        return;
    };
    let title = if command.is_empty() {
        "Run the tests".to_string()
    } else {
        format!("Run the tests: {command}")
    };
    let id = format!("{id}_tests");
    notify(
        conn,
        session,
        SessionUpdate::ToolCall(
            ToolCall::new(id.clone(), title)
                .kind(ToolKind::Execute)
                .status(ToolCallStatus::InProgress),
        ),
    );
    let status = if *state == TestState::Passed {
        ToolCallStatus::Completed
    } else {
        ToolCallStatus::Failed
    };
    let counts = format!(
        "{}: {} passed, {} failed",
        serde_json::to_value(state)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        passed.unwrap_or(0),
        failed.unwrap_or(0)
    );
    update(conn, session, id, status, Some(counts));
}

/// A tool call's final status, and its text when it has one.
fn update(
    conn: &ConnectionTo<Client>,
    session: &str,
    id: String,
    status: ToolCallStatus,
    text: Option<String>,
) {
    let mut fields = ToolCallUpdateFields::new().status(status);
    if let Some(text) = text {
        fields = fields.content(vec![ToolCallContent::Content(schema::Content::new(text))]);
    }
    notify(
        conn,
        session,
        SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id, fields)),
    );
}
