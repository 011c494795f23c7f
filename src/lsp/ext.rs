//! Our own LSP methods: names and payloads, documented in docs/lsp-extensions.md.

use serde::{Deserialize, Serialize};
use tower_lsp_server::ls_types::{TextDocumentIdentifier, Uri};

/// Request `agent-ls/documentState`: the server's copy of an open document, so a client (or a
/// test) can check that both sides agree.
pub const DOCUMENT_STATE: &str = "agent-ls/documentState";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentStateParams {
    pub text_document: TextDocumentIdentifier,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentState {
    pub uri: Uri,
    pub version: i32,
    pub text: String,
    pub needs_resync: bool,
    pub position_encoding: String,
}

/// Test hook, answered only when the server runs with `AGENT_LS_TEST_HOOKS=1`: panics inside
/// a request handler so tests can check the server survives it.
pub const DEBUG_PANIC_COMMAND: &str = "agent-ls.debug.panic";

/// The environment variable that enables test hooks.
pub const TEST_HOOKS_ENV: &str = "AGENT_LS_TEST_HOOKS";

/// Test hook, honoured only with `AGENT_LS_TEST_HOOKS=1`: the kinds of job (`agent_run`,
/// `undo`, `test_run`, `config_reload`, `rollback`, comma-separated) whose first job panics,
/// so tests can check the session reports its end and serves the next request.
pub const TEST_PANIC_ENV: &str = "AGENT_LS_TEST_PANIC";

/// Request `agent-ls/configuration`: the effective configuration, one entry per key with the
/// layer it came from (secrets redacted), and the errors that kept layers out.
pub const CONFIGURATION: &str = "agent-ls/configuration";

#[derive(Debug, Serialize)]
pub struct ConfigurationEntry {
    pub key: String,
    pub value: serde_json::Value,
    pub source: String,
}

#[derive(Debug, Serialize)]
pub struct Configuration {
    pub entries: Vec<ConfigurationEntry>,
    pub errors: Vec<String>,
}

/// Notification `agent-ls/testStatus` from the server: a test run started ("running") or ended
/// ("passed", "failed", "timed_out", "cancelled", "error"), with counts and duration.
pub const TEST_STATUS: &str = "agent-ls/testStatus";

/// Command `agent-ls.rerunTests`: runs the workspace's tests now, cancelling a run in progress.
pub const RERUN_TESTS_COMMAND: &str = "agent-ls.rerunTests";

/// Command `agent-ls.cancel`: stops the test run in progress.
pub const CANCEL_COMMAND: &str = "agent-ls.cancel";

/// Sent back by the client when the user accepts an inline completion item (its `command`,
/// `{"id": N}`): the accepted count of `agent-ls stats` (docs/completion.md).
pub const COMPLETION_ACCEPTED_COMMAND: &str = "agent-ls.completionAccepted";

/// Notification `agent-ls/runFinished`: an agent run ended, with its outcome.
pub const RUN_FINISHED: &str = "agent-ls/runFinished";

/// Notification `agent-ls/runCommitted`: a run's files were committed after its end (the
/// user answered "Commit"): `{run_id, commit, branch, subject, files}`.
pub const RUN_COMMITTED: &str = "agent-ls/runCommitted";

/// Command `agent-ls.commit` `[{"run": id}?]`: commits the run's own files (default: the
/// latest run's) as the user, with a Co-authored-by trailer. Returns
/// `{run_id, commit, branch, subject, files}` once committed.
pub const COMMIT_COMMAND: &str = "agent-ls.commit";

/// Command `agent-ls.pr` `[{"run": id}?]`: pushes the branch holding the run's commit to
/// `git.remote` and opens its pull request with gh or glab. Returns
/// `{branch, base, push_command, opened_with, url, compare_url}`.
pub const PR_COMMAND: &str = "agent-ls.pr";

/// Command `agent-ls.run` `{goal, uri?, range?}`: starts an agent run; returns `{run_id}` at once.
/// A goal that names a command ("undo", "status", "run `make lint`") is done instead and
/// answered with `{routed, ...}`.
pub const RUN_COMMAND: &str = "agent-ls.run";

/// Command `agent-ls.skills`: the skills, `[{name, description, paths, folder}]` (the
/// palette's "Agent: Run Skill…" lists them; docs/skills.md).
pub const SKILLS_COMMAND: &str = "agent-ls.skills";

/// Command `agent-ls.runSkill` `{name, request?, uri?}`: starts a run of the skill, as
/// `agent-ls.run` does; returns `{run_id}` at once.
pub const RUN_SKILL_COMMAND: &str = "agent-ls.runSkill";

/// Command `agent-ls.fixTests`: starts a run with the goal "fix the failing tests".
pub const FIX_TESTS_COMMAND: &str = "agent-ls.fixTests";

/// Command `agent-ls.review` `[{"staged": true} | {"base": REV} | {"run": RUN_ID}]?`: the
/// reviewer on the uncommitted work (default), the staged work, a branch against its base, or
/// a run's change; its findings become diagnostics (source `agent-ls review`) and its review
/// is `runFinished`'s `review`. Returns `{run_id}` at once.
pub const REVIEW_COMMAND: &str = "agent-ls.review";

/// Command `agent-ls.accept`: accepts the proposal waiting for approval.
pub const ACCEPT_COMMAND: &str = "agent-ls.accept";

/// Command `agent-ls.reject`: rejects the proposal waiting for approval.
pub const REJECT_COMMAND: &str = "agent-ls.reject";

/// Command `agent-ls.status`: the run in progress and the last outcome.
pub const STATUS_COMMAND: &str = "agent-ls.status";

/// Command `agent-ls.undo` `[{"step": id}?]`: reverts the latest agent step (or the named one)
/// through workspace/applyEdit, unless the user changed the lines it touched. Returns
/// `{"step": id}` at once.
pub const UNDO_COMMAND: &str = "agent-ls.undo";

/// Command `agent-ls.rollback` `[{"run"?: id, "force"?: bool}]`: restores every file a run
/// changed from its git checkpoint (default: the latest run with one) through
/// workspace/applyEdit. Answers `{run_id, rolled_back}` once done, or `{run_id, refused,
/// changed}` when files changed since the run and `force` is not set.
pub const ROLLBACK_COMMAND: &str = "agent-ls.rollback";

/// Command `agent-ls.rewind` `{step, goal}`: takes the step's run back to that step, code and
/// conversation together (its later steps undone through workspace/applyEdit, refused when a
/// file changed since at their lines), then starts `goal` as a new run that follows the
/// run's conversation up to there. Answers `{run_id, rewound: {run_id, step, undone, files}}`
/// once the new run has started.
pub const REWIND_COMMAND: &str = "agent-ls.rewind";

/// Command `agent-ls.redo`: applies the latest undone step again.
pub const REDO_COMMAND: &str = "agent-ls.redo";

/// Command `agent-ls.resume` `{run_id}`: goes on with a run a crash or restart interrupted,
/// from its last checkpoint. Returns `{"run_id"}` at once.
pub const RESUME_COMMAND: &str = "agent-ls.resume";

/// Request `agent-ls/saveFiles` from the server: save these documents, which hold an agent
/// edit the user accepted, so the disk the tests run on matches the buffers and the editor
/// raises no "changed on disk" conflict. Sent only to clients that announce
/// `experimental.agentLs.saveFiles`; for others the server writes the agent's change to disk
/// itself.
pub const SAVE_FILES: &str = "agent-ls/saveFiles";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SaveFilesParams {
    pub files: Vec<FileToSave>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileToSave {
    pub uri: Uri,
    /// Save only while the document is at this version (the user has not typed since); absent
    /// when the server has not seen the document yet (opened by the edit itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<i32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SaveFilesResult {
    /// The documents saved; any other was left as it was (not open, newer, or the save failed).
    #[serde(default)]
    pub saved: Vec<Uri>,
}

pub enum SaveFiles {}

impl tower_lsp_server::ls_types::request::Request for SaveFiles {
    type Params = SaveFilesParams;
    type Result = SaveFilesResult;
    const METHOD: &'static str = SAVE_FILES;
}

/// Notification `agent-ls/editorDiagnostics` from the client: the editor's own diagnostics
/// of one file (its other language servers'), forwarded by the agent-ls add-on, so that a
/// run checks its edits with them and starts no language server of its own
/// (docs/project-lsp.md). A client that sends it says so in its capabilities:
/// `experimental.agentLs.forwardsDiagnostics = true`.
pub const EDITOR_DIAGNOSTICS: &str = "agent-ls/editorDiagnostics";

#[derive(Debug, Clone, Deserialize)]
pub struct EditorDiagnosticsParams {
    pub uri: Uri,
    #[serde(default)]
    pub diagnostics: Vec<tower_lsp_server::ls_types::Diagnostic>,
    /// The document's version (as in didOpen/didChange) when the editor had these
    /// diagnostics; absent for a file it does not have open.
    #[serde(default)]
    pub version: Option<i32>,
}

/// Whether the client declared that it forwards its diagnostics (`agent-ls/editorDiagnostics`).
pub fn forwards_diagnostics(capabilities: &tower_lsp_server::ls_types::ClientCapabilities) -> bool {
    capabilities
        .experimental
        .as_ref()
        .and_then(|e| e.pointer("/agentLs/forwardsDiagnostics"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// Notification `agent-ls/runEvent` from the server: one thing that happened in an agent run
/// (the journal's line with its iteration, a streamed token, or the step an applied change
/// became), for the editors' run views. Ordered with every other message.
pub const RUN_EVENT: &str = "agent-ls/runEvent";

pub enum RunEventNotification {}

impl tower_lsp_server::ls_types::notification::Notification for RunEventNotification {
    type Params = agent_ls_core::events::WireEvent;
    const METHOD: &'static str = RUN_EVENT;
}

/// A notification clients ignore (`$/` methods may be), sent after `workspace/applyEdit` so
/// that a client reading late wakes: Emacs 28's jsonrpc leaves a request that came in the
/// same read as the answer it was waiting for unhandled until more output arrives (eglot
/// without agent-ls.el would sit on an undo's edit until it shut down).
pub enum WakeNotification {}

impl tower_lsp_server::ls_types::notification::Notification for WakeNotification {
    type Params = serde_json::Value;
    const METHOD: &'static str = "$/agent-ls/wake";
}
