//! The ACP `Shell`: how the runtime's run reaches an ACP client. The questions the approval
//! policy puts (a change, a protected file by name, a held tool call) by
//! `session/request_permission`, files read and written through
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
use agent_ls_runtime::drive::policy::Asked;
use agent_ls_runtime::drive::{ApplyError, ChangeQuestion, Shell};
use agent_ls_runtime::tests_run::{RunError, RunResult};
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
    /// again in every phase (the writes of the turn keep it current); forgotten before a
    /// write, whose stale-text check needs the text now.
    read: Mutex<HashMap<String, String>>,
    /// The run's configuration (its tests and sandbox).
    pub config: config::Config,
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
            config: config::Config::default(),
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

    /// Shows `q` as the pending tool call `id`, then asks the client's permission for it with
    /// the labels of its two options (`permitted`).
    async fn ask_pending(
        &self,
        id: &str,
        q: Pending,
        options: (&str, &str),
    ) -> Result<bool, agent_client_protocol::Error> {
        let mut call = ToolCall::new(id.to_string(), q.title.clone())
            .kind(q.kind)
            .status(ToolCallStatus::Pending)
            .locations(q.locations.clone())
            .content(q.content.clone());
        if let Some(input) = q.raw_input {
            call = call.raw_input(input);
        }
        notify(&self.conn, &self.session, SessionUpdate::ToolCall(call));
        let fields = ToolCallUpdateFields::new()
            .title(q.title)
            .kind(q.kind)
            .locations(q.locations)
            .content(q.content);
        self.permitted(id, fields, options).await
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

/// A pending tool call the client is asked permission for.
struct Pending {
    title: String,
    kind: ToolKind,
    locations: Vec<ToolCallLocation>,
    content: Vec<ToolCallContent>,
    raw_input: Option<serde_json::Value>,
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

    /// Someone answers `session/request_permission`.
    fn present(&self) -> bool {
        true
    }

    /// Read afresh, not from this turn's reads: the point is what changed since.
    fn fresh(&self, relative: &str) -> FileText {
        let text = read_through(&self.conn, &self.session, &self.root, self.fs, relative);
        if let (FileText::Text(t), Ok(mut m)) = (&text, self.read.lock()) {
            m.insert(relative.to_string(), t.clone());
        }
        text
    }

    /// A change not asked about: its edit tool call, in progress until written, or failed
    /// when it is not written (the run says why).
    fn show_change(&mut self, q: &ChangeQuestion<'_>, written: bool) {
        let id = self.next_id("edit");
        let Proposed {
            title,
            locations,
            diffs,
        } = self.proposed(q.changes);
        notify(
            &self.conn,
            &self.session,
            SessionUpdate::ToolCall(
                ToolCall::new(id.clone(), title)
                    .kind(ToolKind::Edit)
                    .status(if written {
                        ToolCallStatus::InProgress
                    } else {
                        ToolCallStatus::Failed
                    })
                    .locations(locations)
                    .content(diffs),
            ),
        );
        if written {
            self.approved = Some(id);
        }
    }

    async fn ask_change(&mut self, q: &ChangeQuestion<'_>) -> bool {
        let id = self.next_id("edit");
        let Proposed {
            title,
            locations,
            mut diffs,
        } = self.proposed(q.changes);
        if q.why == Asked::Flagged || !q.review.fixes.is_empty() {
            diffs.push(ToolCallContent::Content(schema::Content::new(
                q.review.describe(),
            )));
        }
        let q = Pending {
            title,
            kind: ToolKind::Edit,
            locations,
            content: diffs,
            raw_input: None,
        };
        match self.ask_pending(&id, q, ("Apply", "Reject")).await {
            Ok(true) => {
                self.update(&id, ToolCallStatus::InProgress, None);
                self.approved = Some(id);
                true
            }
            Ok(false) => {
                self.update(&id, ToolCallStatus::Failed, Some("rejected".into()));
                false
            }
            Err(e) => {
                self.update(&id, ToolCallStatus::Failed, Some(format!("no answer: {e}")));
                false
            }
        }
    }

    /// A protected file, confirmed by an option that names it.
    async fn confirm_protected(&mut self, path: &str, why: &str) -> bool {
        let id = self.next_id("protected");
        let title = format!("Write the protected file {path}");
        let reason = vec![ToolCallContent::Content(schema::Content::new(format!(
            "{path} is protected: {why}"
        )))];
        let q = Pending {
            title,
            kind: ToolKind::Edit,
            locations: vec![ToolCallLocation::new(self.root.join(path))],
            content: reason,
            raw_input: None,
        };
        let allow = format!("Allow {path}");
        let allowed = self
            .ask_pending(&id, q, (&allow, "Refuse"))
            .await
            .unwrap_or(false);
        let (status, said) = if allowed {
            (ToolCallStatus::Completed, "allowed")
        } else {
            (ToolCallStatus::Failed, "refused")
        };
        self.update(&id, status, Some(said.into()));
        allowed
    }

    /// An `ask` rule's question, as a pending tool call the client asks permission for.
    async fn ask_call(&mut self, name: &str, arguments: &serde_json::Value, why: &str) -> bool {
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
        let q = Pending {
            title,
            kind,
            locations: Vec::new(),
            content: reason,
            raw_input: Some(arguments.clone()),
        };
        let allowed = self
            .ask_pending(&id, q, ("Allow this call", "Refuse"))
            .await
            .unwrap_or(false);
        // The call itself runs in the driver: this tool call is the question, answered.
        if allowed {
            self.update(&id, ToolCallStatus::Completed, Some("allowed".into()));
        } else {
            self.update(&id, ToolCallStatus::Failed, Some("refused".into()));
        }
        allowed
    }

    /// The change is on the text read just now (the driver re-read it after `refresh`).
    async fn write(&mut self, placed: &[FileChange]) -> Result<(), ApplyError> {
        if self.fs.write {
            for c in placed {
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
            agent_ls_runtime::files::write_changes(&self.root, placed)
                .map_err(|e| ApplyError::Failed(e.to_string()))?;
        }
        if let Ok(mut read) = self.read.lock() {
            for c in placed {
                read.insert(c.path.clone(), c.new_text.clone());
            }
        }
        let step =
            agent_ls_runtime::steps::record(&self.root, placed.to_vec(), &self.run_id, &self.goal)
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
        let cfg = self.config.clone();
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
