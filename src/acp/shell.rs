//! The ACP `Shell`: how the shared driver (`agent_ls_runtime::drive`) reaches an ACP client
//! during a run. Approval by `session/request_permission`, files read and written through
//! `fs/*` when the client offers them, progress as thoughts, each proposed change as an edit
//! tool call with its diffs, each test run as an execute tool call, the review as a tool call
//! at its findings' lines.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    self, Diff, PermissionOption, PermissionOptionKind, RequestPermissionOutcome,
    RequestPermissionRequest, SessionUpdate, ToolCall, ToolCallContent, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, WriteTextFileRequest,
};
use tokio_util::sync::CancellationToken;

use agent_ls_core::edit::{FileChange, FileText};
use agent_ls_runtime::config;
use agent_ls_runtime::drive::{ApplyError, Shell, Verdict};
use agent_ls_runtime::tests_run::{RunError, RunResult};
use agent_ls_runtime::trust::Review;
use agent_ls_runtime::trust::sandbox::Sandbox;

use super::client::{ClientFs, notify, read_through, text_chunk};
use super::output;

/// How the loop reaches an ACP client: approval by `session/request_permission`, files by
/// `fs/*` when offered, progress as thoughts, changes and test runs as tool calls.
pub(super) struct AcpShell {
    root: PathBuf,
    session: String,
    conn: ConnectionTo<Client>,
    fs: ClientFs,
    goal: String,
    /// The run's id, which its steps carry (a rollback of an interrupted run finds them by it).
    run_id: String,
    /// Tool calls made so far, for their ids.
    calls: u32,
    /// The approved change's tool call, completed once it is applied.
    approved: Option<String>,
    /// The files read through the client in this prompt turn: each is asked for once, not
    /// again in every phase (the writes of the turn keep it current).
    read: Mutex<HashMap<String, String>>,
}

impl AcpShell {
    /// The shell of one run of `goal` in `root`, for the session at the client.
    pub fn new(
        (conn, session, fs): (ConnectionTo<Client>, String, ClientFs),
        root: PathBuf,
        goal: String,
        run_id: String,
    ) -> Self {
        AcpShell {
            root,
            session,
            conn,
            fs,
            goal,
            run_id,
            calls: 0,
            approved: None,
            read: Mutex::new(HashMap::new()),
        }
    }

    fn next_id(&mut self, what: &str) -> String {
        self.calls += 1;
        format!("{what}_{}", self.calls)
    }

    /// A proposed change as its edit tool call shows it.
    fn proposed(&self, changes: &[FileChange]) -> Proposed {
        let diffs = changes
            .iter()
            .map(|c| {
                ToolCallContent::Diff(
                    Diff::new(self.root.join(&c.path), c.new_text.clone())
                        .old_text(c.original.clone()),
                )
            })
            .collect();
        let title = format!(
            "Edit {}",
            changes
                .iter()
                .map(|c| c.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let locations = changes
            .iter()
            .map(|c| {
                ToolCallLocation::new(self.root.join(&c.path)).line(output::first_changed_line(
                    c.original.as_deref(),
                    &c.new_text,
                ))
            })
            .collect();
        Proposed {
            title,
            locations,
            diffs,
        }
    }

    /// Asks the client's permission for the pending tool call `id`, shown with `fields`, with
    /// the labels of its two options: whether the user chose the first, or why no answer came.
    async fn permitted(
        &self,
        id: &str,
        fields: ToolCallUpdateFields,
        (allow, reject): (&str, &str),
    ) -> Result<bool, agent_client_protocol::Error> {
        let request = RequestPermissionRequest::new(
            self.session.clone(),
            ToolCallUpdate::new(id.to_string(), fields.status(ToolCallStatus::Pending)),
            vec![
                PermissionOption::new("allow", allow.to_string(), PermissionOptionKind::AllowOnce),
                PermissionOption::new(
                    "reject",
                    reject.to_string(),
                    PermissionOptionKind::RejectOnce,
                ),
            ],
        );
        match self.conn.send_request(request).block_task().await {
            Ok(r) => Ok(matches!(r.outcome,
                RequestPermissionOutcome::Selected(s) if &*s.option_id.0 == "allow")),
            Err(e) => {
                tracing::warn!("session/request_permission failed: {e}");
                Err(e)
            }
        }
    }

    fn update(&self, id: &str, status: ToolCallStatus, content: Option<String>) {
        let mut fields = ToolCallUpdateFields::new().status(status);
        if let Some(text) = content {
            fields = fields.content(vec![ToolCallContent::Content(schema::Content::new(text))]);
        }
        notify(
            &self.conn,
            &self.session,
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id.to_string(), fields)),
        );
    }
}

/// What an edit tool call shows: its title, the first changed line of each file, the diffs.
struct Proposed {
    title: String,
    locations: Vec<ToolCallLocation>,
    diffs: Vec<ToolCallContent>,
}

impl Shell for AcpShell {
    fn read(&self, relative: &str) -> FileText {
        if !self.fs.read {
            return agent_ls_runtime::files::read_for_plan(&self.root, relative);
        }
        if let Some(text) = self.read.lock().ok().and_then(|m| m.get(relative).cloned()) {
            return FileText::Text(text);
        }
        let text = read_through(&self.conn, &self.session, &self.root, self.fs, relative);
        if let (FileText::Text(t), Ok(mut m)) = (&text, self.read.lock()) {
            m.insert(relative.to_string(), t.clone());
        }
        text
    }

    async fn approve(&mut self, changes: &[FileChange], diff: &str, review: &Review) -> Verdict {
        if let Some((path, why)) = review.protected.first() {
            return Verdict::Refused(format!(
                "{path} is protected ({why}); an ACP client cannot allow it by name, so leave it alone"
            ));
        }
        let id = self.next_id("edit");
        let Proposed {
            title,
            locations,
            diffs,
        } = self.proposed(changes);
        notify(
            &self.conn,
            &self.session,
            SessionUpdate::ToolCall(
                ToolCall::new(id.clone(), title.clone())
                    .kind(ToolKind::Edit)
                    .status(ToolCallStatus::Pending)
                    .locations(locations.clone())
                    .content(diffs.clone()),
            ),
        );
        let _ = diff;
        let fields = ToolCallUpdateFields::new()
            .title(title)
            .kind(ToolKind::Edit)
            .locations(locations)
            .content(diffs);
        match self.permitted(&id, fields, ("Apply", "Reject")).await {
            Ok(true) => {
                self.update(&id, ToolCallStatus::InProgress, None);
                self.approved = Some(id);
                Verdict::Approved
            }
            Ok(false) => {
                self.update(&id, ToolCallStatus::Failed, Some("rejected".into()));
                Verdict::Rejected
            }
            Err(e) => {
                self.update(&id, ToolCallStatus::Failed, Some(format!("no answer: {e}")));
                Verdict::Rejected
            }
        }
    }

    /// An `ask` rule's question, as a pending tool call the client asks permission for.
    async fn approve_call(
        &mut self,
        name: &str,
        arguments: &serde_json::Value,
        why: &str,
    ) -> Verdict {
        let id = self.next_id("call");
        let title = format!(
            "Call {name}: {}",
            agent_ls_runtime::permissions::call_summary(name, arguments)
        );
        let kind = match name {
            "run_command" | "run_tests" => ToolKind::Execute,
            n if agent_ls_core::agent::agents::READ_TOOLS.contains(&n) => ToolKind::Read,
            _ => ToolKind::Other,
        };
        let reason = vec![ToolCallContent::Content(schema::Content::new(
            why.to_string(),
        ))];
        notify(
            &self.conn,
            &self.session,
            SessionUpdate::ToolCall(
                ToolCall::new(id.clone(), title.clone())
                    .kind(kind)
                    .status(ToolCallStatus::Pending)
                    .content(reason.clone())
                    .raw_input(arguments.clone()),
            ),
        );
        let fields = ToolCallUpdateFields::new()
            .title(title)
            .kind(kind)
            .content(reason);
        let allowed = self
            .permitted(&id, fields, ("Allow this call", "Refuse"))
            .await
            .unwrap_or(false);
        // The call itself runs in the driver: this tool call is the question, answered.
        if allowed {
            self.update(&id, ToolCallStatus::Completed, Some("allowed".into()));
            Verdict::Approved
        } else {
            self.update(&id, ToolCallStatus::Failed, Some("refused".into()));
            Verdict::Rejected
        }
    }

    async fn apply(&mut self, changes: &[FileChange]) -> Result<(), ApplyError> {
        // The text may have changed in the editor since the change was computed.
        let mut placed = Vec::with_capacity(changes.len());
        for c in changes {
            // Read afresh, not from this turn's reads: the point is what changed since.
            let now = read_through(&self.conn, &self.session, &self.root, self.fs, &c.path);
            match (now, &c.original) {
                (FileText::Text(now), Some(orig)) if &now != orig => {
                    match agent_ls_core::edit::relocate(
                        c,
                        &now,
                        &agent_ls_core::edit::Limits::default(),
                    ) {
                        Some(moved) => placed.push(moved),
                        None => {
                            return Err(ApplyError::Stale(format!(
                                "{} changed while the change was prepared",
                                c.path
                            )));
                        }
                    }
                }
                _ => placed.push(c.clone()),
            }
        }
        if self.fs.write {
            for c in &placed {
                let path = agent_ls_runtime::files::resolve(&self.root, &c.path)
                    .map_err(|e| ApplyError::Failed(e.to_string()))?;
                let request =
                    WriteTextFileRequest::new(self.session.clone(), path, c.new_text.clone());
                self.conn
                    .send_request(request)
                    .block_task()
                    .await
                    .map_err(|e| {
                        ApplyError::Failed(format!("the client did not write {}: {e}", c.path))
                    })?;
            }
        } else {
            agent_ls_runtime::files::write_changes(&self.root, &placed)
                .map_err(|e| ApplyError::Failed(e.to_string()))?;
        }
        if let Ok(mut read) = self.read.lock() {
            for c in &placed {
                read.insert(c.path.clone(), c.new_text.clone());
            }
        }
        let step = agent_ls_runtime::steps::record(&self.root, placed, &self.run_id, &self.goal)
            .map_err(|e| ApplyError::Failed(e.to_string()))?;
        if let Some(id) = self.approved.take() {
            self.update(
                &id,
                ToolCallStatus::Completed,
                Some(format!("applied as step {step} (/undo {step} reverts it)")),
            );
        }
        Ok(())
    }

    async fn run_tests(
        &mut self,
        cancel: &CancellationToken,
        command: Option<Vec<String>>,
    ) -> Result<RunResult, RunError> {
        let loaded = config::load(&config::Inputs::from_process(Some(self.root.clone())));
        let cfg = loaded.config;
        let test = match command {
            Some(argv) => agent_ls_runtime::tests_run::with_command(&cfg.test, argv),
            None => cfg.test.clone(),
        };
        let id = self.next_id("tests");
        // The command the run will be, as the user would type it.
        let title = match agent_ls_runtime::tests_run::prepare(&self.root, &test) {
            Ok(c) => format!("Run the tests: {}", c.argv.join(" ")),
            Err(_) => "Run the tests".to_string(),
        };
        notify(
            &self.conn,
            &self.session,
            SessionUpdate::ToolCall(
                ToolCall::new(id.clone(), title)
                    .kind(ToolKind::Execute)
                    .status(ToolCallStatus::InProgress),
            ),
        );
        let sandbox = Sandbox::from_config(&cfg.sandbox);
        let result = agent_ls_runtime::tests_run::run(&self.root, &test, &sandbox, cancel).await;
        match &result {
            Ok(r) => self.update(
                &id,
                if r.passed_all() {
                    ToolCallStatus::Completed
                } else {
                    ToolCallStatus::Failed
                },
                Some(r.summary()),
            ),
            Err(e) => self.update(&id, ToolCallStatus::Failed, Some(e.to_string())),
        }
        result
    }

    fn buffers(&self) -> Vec<(String, FileText)> {
        Vec::new()
    }

    fn progress(&mut self, message: &str) {
        notify(
            &self.conn,
            &self.session,
            SessionUpdate::AgentThoughtChunk(text_chunk(format!("{message}\n"))),
        );
    }

    fn warn(&mut self, message: &str) {
        notify(
            &self.conn,
            &self.session,
            SessionUpdate::AgentMessageChunk(text_chunk(format!("warning: {message}\n"))),
        );
    }

    /// The review as a tool call at its findings' lines rather than a thought; one that
    /// must not be missed is a warning too.
    fn reviewed(
        &mut self,
        result: &agent_ls_core::agent::review::ReviewResult,
        _report: &str,
        loud: bool,
    ) {
        let id = self.next_id("review");
        let call = output::review_call(&self.root, id, result);
        notify(&self.conn, &self.session, SessionUpdate::ToolCall(call));
        if loud {
            self.warn(&result.summary());
        }
    }
}
