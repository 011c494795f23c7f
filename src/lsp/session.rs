//! The one owner of the server's mutable state. Everything that changes it arrives as an
//! `Event` on one channel: document notifications straight from the transport in wire
//! order, commands from the request handlers, and the reports of the subsystems (test runs,
//! agent runs, the store), each in a message type of their own.
//!
//! It does no IO of its own but one small read: no process or database is touched on its
//! task, and no file but the prompt file of a custom agent that a command names, which
//! `choose_agent` reads as the run starts (a file the user wrote for this, read once, so that
//! a missing one is the command's refusal rather than a failed run). What needs IO is
//! started here as a job (a test run, an agent run, an undo, a configuration load, a store
//! call) whose result comes back as an event, and everything for the client leaves through
//! the outbox.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_ls_core::completion::next_edit::{self, RecentEdit};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tower_lsp_server::ls_types::{
    ClientCapabilities, DiagnosticSeverity, DidChangeTextDocumentParams, InitializeParams,
    MessageType, NumberOrString, Uri,
};
use tracing::{debug, error, info, warn};

use super::agent_runs::{self, RunArgs, RunFinished};
use super::connection::{
    AgentMessage, AppliedStep, Connection, Rewound, Snapshot, UndoFailed, WrittenUnder,
};
use super::convert;
use super::ext;
use super::git_commands;
use super::jobs::{self, Panicked, Report};
use super::outbox::Outbox;
use super::refused::Refused;
use super::review_diagnostics::ReviewDiagnostics;
use super::rewind::{self, RewindArgs};
use super::rollback::{self, RollbackArgs};
use super::test_runs::{self, TestMessage, TestRuns, Trigger};
use super::transport::Notice;
use super::undo;
use super::workspace_edit::{self, EditSupport};
use agent_ls_core::agent::{Run, RunStatus};
use agent_ls_core::edit::history::{History, Step};
use agent_ls_core::events::{LiveEvent, RunEvent};
use agent_ls_core::text::{Buffer, Encoding};
use agent_ls_runtime::config::{self, Loaded};
use agent_ls_runtime::drive::Outcome;
use agent_ls_runtime::lock::RunLock;
use agent_ls_runtime::logging::LogHandle;
use agent_ls_runtime::runs::{self, Begin, RunRequest};
use agent_ls_runtime::store::{StoreError, StoreThread};

/// What status says of the store's part when the store did not answer in time.
pub const STORE_BUSY: &str = "unknown (store busy)";

/// A closed document past this size has its memory handed back to the system at once.
const LARGE_DOCUMENT_BYTES: usize = 8 * 1024 * 1024;

/// Asks glibc's allocator to return freed heap pages to the system. Without it a closed
/// 100 MB document that was edited stays in the process's resident memory.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of the allocator's own heap; it takes no
    // pointers and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The answers of the trust question.
const TRUST_FOLDER: &str = "Trust Folder";
const NOT_NOW: &str = "Not Now";
const NEVER: &str = "Never for This Folder";

/// A closure run on the owner task against the current state.
type Query = Box<dyn FnOnce(&Session) + Send>;

pub enum Event {
    Initialize {
        params: Box<InitializeParams>,
        /// The configuration, loaded off this task by the handler.
        inputs: Box<config::Inputs>,
        loaded: Box<Loaded>,
        reply: oneshot::Sender<Encoding>,
    },
    /// A document or workspace notification, in wire order.
    Notice(Notice),
    /// Several, in wire order (a burst of typing read at once).
    Notices(Vec<Notice>),
    Query(Query),
    /// A query that needs the undo history, answered once it is read from the store.
    QueryReady(Query),
    /// A configuration reload finished (started by a save of `.agent-ls.toml` or by
    /// `didChangeConfiguration`); only the latest one applies.
    ConfigLoaded {
        generation: u64,
        loaded: Box<Loaded>,
    },
    /// A configuration reload panicked (caught by its job's guard); the configuration in
    /// force stays.
    ConfigFailed {
        generation: u64,
        why: Panicked,
    },
    Tests(TestMessage),
    Agent(AgentMessage),
    /// The store opened (with what it had to move aside), or could not be.
    StoreOpened(Result<Option<String>, StoreError>),
    /// The stored undo history, read once the store opened.
    HistoryLoaded(Vec<(Step, bool)>),
    /// Run the workspace's tests now (the rerun command), or `command` in their place (a
    /// routed "run `make lint`").
    RunTests {
        reason: String,
        command: Option<Vec<String>>,
    },
    /// The client's `initialized`: questions may be asked now.
    Initialized,
    /// The editor's own diagnostics of a file (`agent-ls/editorDiagnostics`).
    EditorDiagnostics(ext::EditorDiagnosticsParams),
    /// The user answered the trust question, and the answer is recorded.
    TrustDecided(agent_ls_runtime::trust::Decision),
    /// agent-ls.cancel: the test run and the agent run in progress.
    CancelAll,
    /// Start an agent run; the reply is its id, or why not.
    StartRun {
        args: RunArgs,
        lock: RunLock,
        reply: oneshot::Sender<Result<serde_json::Value, Refused>>,
    },
    /// agent-ls.accept (true) or agent-ls.reject (false) for the proposal waiting.
    Decision(bool),
    /// A command that needs the workspace: the review question waiting, if any, is
    /// answered, and the reply tells when its run has ended (`end_pending_question`).
    EndPendingQuestion(oneshot::Sender<Option<oneshot::Receiver<()>>>),
    /// agent-ls.undo (or redo): the reply says which step, or why not.
    Undo {
        redo: bool,
        /// Undo this step rather than the latest.
        step: Option<u64>,
        lock: RunLock,
        reply: oneshot::Sender<Result<u64, Refused>>,
    },
    /// agent-ls.rollback: restore a run's files from its git checkpoint.
    Rollback {
        args: RollbackArgs,
        lock: RunLock,
        reply: oneshot::Sender<Result<serde_json::Value, Refused>>,
    },
    /// agent-ls.rewind: take a run back to a step, then run the instruction from there.
    Rewind {
        args: RewindArgs,
        lock: RunLock,
        reply: oneshot::Sender<Result<serde_json::Value, Refused>>,
    },
    /// agent-ls.resume: go on with an interrupted run from its checkpoint, which the handler
    /// read from the store.
    Resume {
        run_id: String,
        goal: String,
        checkpoint: Option<Box<Run>>,
        lock: RunLock,
        reply: oneshot::Sender<Result<String, Refused>>,
    },
}

/// The sending side, cloned into every handler. Sending never blocks or awaits, so a handler
/// can hand over its event before its first `.await` and keep the arrival order.
#[derive(Clone)]
pub struct SessionHandle {
    tx: mpsc::UnboundedSender<Event>,
}

#[derive(Debug, thiserror::Error)]
#[error("the session has stopped")]
pub struct SessionGone;

impl SessionHandle {
    pub fn send(&self, event: Event) {
        if self.tx.send(event).is_err() {
            warn!("event dropped: the session has stopped");
        }
    }

    /// Runs `f` on the owner task after every event sent before it, and returns its answer.
    pub async fn query<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Session) -> R + Send + 'static,
    ) -> Result<R, SessionGone> {
        self.ask(Event::Query, f).await
    }

    /// Like `query`, once the undo history has been read from the store.
    pub async fn query_ready<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Session) -> R + Send + 'static,
    ) -> Result<R, SessionGone> {
        self.ask(Event::QueryReady, f).await
    }

    /// Sends `f` as the event `wrap` makes of it, and awaits its answer.
    async fn ask<R: Send + 'static>(
        &self,
        wrap: fn(Query) -> Event,
        f: impl FnOnce(&Session) -> R + Send + 'static,
    ) -> Result<R, SessionGone> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(wrap(Box::new(move |s| {
                let _ = reply.send(f(s));
            })))
            .map_err(|_| SessionGone)?;
        answer.await.map_err(|_| SessionGone)
    }

    /// A report function for a subsystem: its messages arrive here wrapped in `wrap`.
    fn report<T: 'static>(&self, wrap: fn(T) -> Event) -> Report<T> {
        let me = self.clone();
        Arc::new(move |m| me.send(wrap(m)))
    }
}

/// The job in progress: one at a time per workspace.
enum Active {
    Run {
        id: String,
        goal: String,
        cancel: CancellationToken,
        decisions: mpsc::UnboundedSender<bool>,
        /// The run has ended but for the review question, which is waiting.
        deciding: bool,
    },
    Undo {
        step: u64,
    },
    Rollback,
}

/// A run waiting for documents to hold given texts.
struct TextWaiter {
    want: Vec<(Uri, String)>,
    reply: oneshot::Sender<()>,
}

pub struct Session {
    outbox: Outbox,
    me: SessionHandle,
    log: LogHandle,
    initialized: bool,
    encoding: Encoding,
    workspace_root: Option<PathBuf>,
    inputs: config::Inputs,
    config: Loaded,
    /// Problems found by the latest attempt to load the configuration, even a refused one.
    config_errors: Vec<config::ConfigError>,
    config_generation: u64,
    /// A configuration reload is under way (reading files off this task).
    reloading: bool,
    documents: HashMap<Uri, Buffer>,
    /// Each document's latest edits (a few, their text cut) and how many it has had: the
    /// next-edit suggestion's material (docs/completion.md).
    edits: HashMap<Uri, RecentEdits>,
    capabilities: ClientCapabilities,
    /// The editor's forwarded diagnostics (`agent-ls/editorDiagnostics`), which its runs check
    /// their edits with when the client declared it forwards them.
    forwarded: std::sync::Arc<agent_ls_runtime::lsp_client::Forwarded>,
    tests: TestRuns,
    /// The latest review's findings, as diagnostics.
    review: ReviewDiagnostics,
    test_report: Report<TestMessage>,
    agent_report: Report<AgentMessage>,
    active: Option<Active>,
    last_outcome: Option<Outcome>,
    /// `None` until the store's history is read; runs and undos asked for before then wait.
    history: Option<History>,
    deferred: Vec<Event>,
    store: Option<StoreThread>,
    waiters: Vec<TextWaiter>,
    /// Told when the active run ends: the commands that answered its review question.
    run_end: Vec<oneshot::Sender<()>>,
    /// A document was opened in this session (`first_open`).
    opened: bool,
    /// The client confirms each server edit itself (eglot alone; `client_confirms_edits`).
    client_confirms_edits: bool,
    /// The trust question was asked in this session (it is asked at most once).
    trust_asked: bool,
    /// The workspace hooks asked about in this session (`hook_trust`), by hash.
    hook_questions: super::hook_trust::Asked,
    /// Open documents whose file the server wrote under the editor (a client without
    /// `agent-ls/saveFiles`), until the editor reads or saves the file again.
    written_under: WrittenUnder,
}

impl Session {
    /// Starts the owner task and returns the handle every handler sends through.
    pub fn spawn(outbox: Outbox, log: LogHandle) -> SessionHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let me = SessionHandle { tx };
        let session = Session {
            outbox,
            test_report: me.report(Event::Tests),
            agent_report: me.report(Event::Agent),
            me: me.clone(),
            log,
            initialized: false,
            encoding: Encoding::Utf16,
            workspace_root: None,
            inputs: config::Inputs::default(),
            config: Loaded::default(),
            config_errors: Vec::new(),
            config_generation: 0,
            reloading: false,
            documents: HashMap::new(),
            edits: HashMap::new(),
            capabilities: ClientCapabilities::default(),
            forwarded: Default::default(),
            tests: TestRuns::default(),
            review: Default::default(),
            active: None,
            last_outcome: None,
            history: None,
            deferred: Vec::new(),
            store: None,
            waiters: Vec::new(),
            run_end: Vec::new(),
            client_confirms_edits: false,
            opened: false,
            trust_asked: false,
            hook_questions: Default::default(),
            written_under: WrittenUnder::default(),
        };
        tokio::spawn(session.run(rx));
        me
    }

    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// `uri`'s latest edits, the oldest first, and how many edits it has had in all.
    pub fn recent_edits(&self, uri: &Uri) -> (u64, Vec<RecentEdit>) {
        self.edits
            .get(uri)
            .map(|e| (e.count, e.latest.iter().cloned().collect()))
            .unwrap_or_default()
    }

    /// The open documents.
    pub fn documents(&self) -> impl Iterator<Item = (&Uri, &Buffer)> {
        self.documents.iter()
    }

    pub fn document(&self, uri: &Uri) -> Option<&Buffer> {
        self.documents.get(uri)
    }

    pub fn config(&self) -> &Loaded {
        &self.config
    }

    pub fn config_errors(&self) -> &[config::ConfigError] {
        &self.config_errors
    }

    pub fn workspace_root(&self) -> Option<&PathBuf> {
        self.workspace_root.as_ref()
    }

    pub fn store(&self) -> Option<StoreThread> {
        self.store.clone()
    }

    /// The run in progress, the last outcome and the recent steps, for agent-ls.status (the
    /// handler adds the interrupted runs, which it asks the store for).
    pub fn agent_status(&self) -> serde_json::Value {
        let active = match &self.active {
            Some(Active::Run { id, goal, .. }) => {
                Some(serde_json::json!({"run_id": id, "goal": goal}))
            }
            Some(Active::Undo { step }) => Some(serde_json::json!({"undo": step})),
            Some(Active::Rollback) => Some(serde_json::json!({"rollback": true})),
            None => None,
        };
        let mut status = serde_json::json!({
            "active": active,
            "last": self.last_outcome,
            "steps": self.history.as_ref().map(|h| h.summaries(10)).unwrap_or_default(),
        });
        if self.history.is_none() {
            // The store has not given the history yet: no steps is not "no steps".
            status["steps_unknown"] = STORE_BUSY.into();
        }
        status
    }

    /// What a run's commit or pull request needs (none without a folder or a store).
    pub fn git_context(&self) -> Option<git_commands::GitContext> {
        Some(git_commands::GitContext {
            root: self.workspace_root.clone()?,
            config: self.config.config.clone(),
            trusted: self.config.trusted,
            store: self.store.clone()?,
        })
    }

    /// Whether to offer "Agent: Undo" and "Agent: Commit" as code actions: to a client with no
    /// agent-ls add-on (none announced in `experimental.agentLs`; eglot alone), which has no
    /// other way to run a command, while a step can be undone and while the last run's files
    /// wait for a commit.
    pub fn history_actions(&self) -> (bool, bool) {
        let add_on = self
            .capabilities
            .experimental
            .as_ref()
            .is_some_and(|e| e.get("agentLs").is_some());
        if add_on || self.active.is_some() {
            return (false, false);
        }
        let undo = self
            .history
            .as_ref()
            .is_some_and(|h| h.last_done().is_some());
        let commit = self.last_outcome.as_ref().is_some_and(|o| {
            o.status == agent_ls_core::agent::RunStatus::Done
                && o.checkpoint.is_some()
                && o.commit.is_none()
                && !o.files_changed.is_empty()
        });
        (undo, commit)
    }

    /// The id of the run in progress, which is not interrupted though the store says running.
    pub fn active_run(&self) -> Option<String> {
        match &self.active {
            Some(Active::Run { id, .. }) => Some(id.clone()),
            _ => None,
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Event>) {
        while let Some(event) = rx.recv().await {
            // A bug in one event must not take every open document down with it.
            if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| self.handle(event))) {
                error!(
                    "session event handler panicked: {}",
                    jobs::panic_message(&panic)
                );
            }
        }
        debug!("session owner stopped");
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Initialize {
                params,
                inputs,
                loaded,
                reply,
            } => self.initialize(*params, *inputs, *loaded, reply),
            Event::Query(f) => f(self),
            _ if !self.initialized => {
                warn!("notification before initialize ignored");
            }
            e @ (Event::StartRun { .. }
            | Event::Undo { .. }
            | Event::Rollback { .. }
            | Event::Rewind { .. }
            | Event::Resume { .. }
            | Event::RunTests { .. }
            | Event::QueryReady(_)
            | Event::Tests(TestMessage::SaveSettled { .. })
            | Event::Notice(Notice::Saved(_) | Notice::Configuration(_)))
                if !self.ready() =>
            {
                // These depend on the undo history or on the configuration: while the store
                // is still being read or a reload is under way, they wait, in order.
                self.deferred.push(e);
            }
            Event::QueryReady(f) => f(self),
            Event::Notice(n) => self.notice(n),
            Event::Notices(batch) => {
                for n in batch {
                    // One that depends on the configuration may have to wait behind a reload.
                    self.handle(Event::Notice(n));
                }
            }
            Event::ConfigLoaded { generation, loaded } => self.config_loaded(generation, *loaded),
            Event::ConfigFailed { generation, why } => self.config_failed(generation, why),
            Event::Initialized => self.client_initialized(),
            Event::EditorDiagnostics(p) => self.editor_diagnostics(p),
            Event::TrustDecided(decision) => self.trust_decided(decision),
            Event::Tests(m) => self.test_message(m),
            Event::Agent(m) => self.agent_message(m),
            Event::StoreOpened(result) => self.store_opened(result),
            Event::HistoryLoaded(steps) => {
                self.history = Some(History::restore(steps));
                self.replay_deferred();
            }
            Event::RunTests { reason, command } => {
                self.start_tests(Trigger::User { reason, command })
            }
            Event::CancelAll => self.cancel_all(),
            Event::StartRun { args, lock, reply } => {
                let _ = reply.send(self.start_run(args, lock));
            }
            Event::Decision(yes) => self.decision(yes),
            Event::EndPendingQuestion(reply) => {
                let _ = reply.send(self.end_pending_question());
            }
            Event::Undo {
                redo,
                step,
                lock,
                reply,
            } => self.undo(redo, step, lock, reply),
            Event::Rollback { args, lock, reply } => self.rollback(args, lock, reply),
            Event::Rewind { args, lock, reply } => self.rewind(args, lock, reply),
            Event::Resume {
                run_id,
                goal,
                checkpoint,
                lock,
                reply,
            } => {
                let _ = reply.send(self.resume(run_id, goal, checkpoint.map(|c| *c), lock));
            }
        }
    }

    /// agent-ls.cancel: the test run and the agent run in progress stop.
    fn cancel_all(&mut self) {
        self.tests.cancel();
        if let Some(Active::Run { cancel, .. }) = &self.active {
            cancel.cancel();
        }
    }

    /// The store opened, perhaps after moving an unreadable one aside, or could not be: the
    /// user hears of either.
    fn store_opened(&mut self, result: Result<Option<String>, StoreError>) {
        match result {
            Ok(Some(notice)) => {
                warn!("{notice}");
                self.outbox
                    .show_message(MessageType::WARNING, format!("agent-ls: {notice}"));
            }
            Ok(None) => {}
            Err(e) => {
                error!("{e}");
                self.outbox.show_message(
                    MessageType::WARNING,
                    format!("agent-ls: {e}; undo history will not survive a restart"),
                );
            }
        }
    }

    /// agent-ls.accept or agent-ls.reject: the answer goes to the run waiting for one.
    fn decision(&mut self, yes: bool) {
        match &self.active {
            Some(Active::Run { decisions, .. }) => {
                let _ = decisions.send(yes);
            }
            _ => self
                .outbox
                .show_message(MessageType::INFO, "agent-ls: no proposal is waiting"),
        }
    }

    /// An undo, a rollback or a run asked for while the active run waits on its review
    /// question: the question is answered "Keep" (the user has moved on; a rollback asked
    /// for then rolls the kept run back), and the answer is told when the run has ended and
    /// the workspace is free. `None` when no question waits.
    fn end_pending_question(&mut self) -> Option<oneshot::Receiver<()>> {
        let Some(Active::Run {
            decisions,
            deciding: true,
            ..
        }) = &self.active
        else {
            return None;
        };
        let _ = decisions.send(true);
        let (told, ended) = oneshot::channel();
        self.run_end.push(told);
        Some(ended)
    }

    /// agent-ls.resume: an interrupted run goes on from its checkpoint (or from its goal, when
    /// it has none), under its own id.
    fn resume(
        &mut self,
        run_id: String,
        goal: String,
        checkpoint: Option<Run>,
        lock: RunLock,
    ) -> Result<String, Refused> {
        if let Some(why) = self.busy() {
            return Err(why);
        }
        let title = goal.clone();
        let request = RunRequest {
            begin: Begin::Resume(checkpoint.map(Box::new)),
            ..RunRequest::new(goal)
        };
        self.launch(run_id, title, request, lock)
    }

    /// The history is read and no configuration reload is under way.
    fn ready(&self) -> bool {
        self.history.is_some() && !self.reloading
    }

    /// Handles the events that waited, in their order; one may start another wait.
    fn replay_deferred(&mut self) {
        for e in std::mem::take(&mut self.deferred) {
            self.handle(e);
        }
    }

    fn notice(&mut self, notice: Notice) {
        match notice {
            Notice::Opened(o) => {
                debug!(uri = o.uri.as_str(), version = o.version, "opened");
                // The editor (re)read the file: its idea of the disk is fresh again.
                self.written_under.forget(&o.uri);
                self.documents
                    .insert(o.uri, Buffer::from_text(o.text, o.version));
                self.check_waiters();
                self.first_open();
            }
            Notice::Changed(p) => {
                self.change(p);
                self.check_waiters();
            }
            Notice::Closed(p) => {
                self.written_under.forget(&p.text_document.uri);
                self.edits.remove(&p.text_document.uri);
                let closed = self.documents.remove(&p.text_document.uri);
                if closed.is_some_and(|b| b.len_bytes() > LARGE_DOCUMENT_BYTES) {
                    // An edited document's rope is many small allocations that the
                    // allocator keeps after they are freed; a large one is handed back.
                    give_back_freed_memory();
                }
            }
            Notice::Saved(p) => self.saved(&p.text_document.uri),
            Notice::Configuration(p) => {
                let mut inputs = self.inputs.clone();
                let mut settings = p.settings;
                // The editor's own workspace trust changes here (VS Code's "Trust" button).
                if let Some(trust) = config::take_workspace_trust(&mut settings) {
                    inputs.workspace_trust = trust;
                }
                inputs.client_settings = (!settings.is_null()).then_some(settings);
                self.reload_config(inputs);
            }
            Notice::ProgressCancel(p) => self.progress_cancelled(p.token),
        }
    }

    /// A document was saved: the configuration file is loaded again; any other file starts a
    /// test run when `test.on_save` asks for one and no job is in progress.
    fn saved(&mut self, uri: &Uri) {
        self.written_under.forget(uri);
        let is_workspace_config = match (&self.workspace_root, convert::path_from_uri(uri)) {
            (Some(root), Some(path)) => path == root.join(config::WORKSPACE_FILE),
            _ => false,
        };
        if is_workspace_config {
            self.reload_config(self.inputs.clone());
        } else if self.active.is_some() {
            // An agent run (or undo) saves the files it wrote and runs the tests
            // itself; a save now starts no run of its own.
            debug!("save during an agent run; no test run of its own");
        } else if self.config.config.test.on_save {
            match self.config.config.test.debounce_ms {
                // No delay asked for: the save's run starts now.
                0 => self.start_tests(Trigger::User {
                    reason: "save".into(),
                    command: None,
                }),
                ms => self
                    .tests
                    .saved(&self.test_report, std::time::Duration::from_millis(ms)),
            }
        }
    }

    /// `test.on_open`: the first document opened in the session starts one test run, so its
    /// failures are on their lines without waiting for a save or a command.
    fn first_open(&mut self) {
        if self.opened || !self.config.config.test.on_open || self.workspace_root.is_none() {
            return;
        }
        self.opened = true;
        if self.active.is_none() {
            self.start_tests(Trigger::User {
                reason: "open".into(),
                command: None,
            });
        }
    }

    /// The client's cancel button on a progress: an agent run's (which also cancels the tests
    /// it is waiting on), or a test run's.
    fn progress_cancelled(&mut self, token: NumberOrString) {
        let token = match token {
            NumberOrString::String(s) => s,
            NumberOrString::Number(n) => n.to_string(),
        };
        if let Some(id) = token.strip_prefix("agent-ls/run/") {
            match &self.active {
                Some(Active::Run {
                    id: active, cancel, ..
                }) if active == id => {
                    cancel.cancel();
                    self.tests.cancel_agent();
                }
                _ => debug!("a cancel for run {id}, which is not running"),
            }
        } else if let Some(generation) = token
            .strip_prefix("agent-ls/tests/")
            .and_then(|g| g.parse().ok())
        {
            self.tests.cancel_generation(generation);
        }
    }

    fn test_message(&mut self, m: TestMessage) {
        match m {
            TestMessage::Finished {
                generation,
                result,
                disk,
            } => {
                let root = self.workspace_root.clone().unwrap_or_default();
                self.with_tests(&root, |tests, cx| {
                    tests.finished(cx, generation, *result, &disk)
                });
            }
            TestMessage::Shared { result, disk } => {
                let root = self.workspace_root.clone().unwrap_or_default();
                self.with_tests(&root, |tests, cx| tests.shared(cx, *result, &disk));
            }
            TestMessage::SaveSettled { generation } => {
                if self.tests.is_latest_save(generation) {
                    self.start_tests(Trigger::User {
                        reason: "save".into(),
                        command: None,
                    });
                }
            }
        }
    }

    fn agent_message(&mut self, m: AgentMessage) {
        match m {
            AgentMessage::Snapshot { reply } => {
                let _ = reply.send(self.snapshot());
            }
            AgentMessage::AwaitTexts { want, reply } => {
                self.waiters.push(TextWaiter { want, reply });
                self.check_waiters();
            }
            AgentMessage::RunTests { reply, command } => {
                self.start_tests(Trigger::Agent { reply, command })
            }
            AgentMessage::StepApplied(step) => self.step_applied(step),
            AgentMessage::Finished { id, outcome } => self.run_finished(&id, *outcome),
            AgentMessage::Reviewed { review, reply } => {
                // The review question follows: the run's work is done.
                if let Some(Active::Run { deciding, .. }) = &mut self.active {
                    *deciding = true;
                }
                if let Some(root) = &self.workspace_root {
                    let uris = self.review.set(root, Some(&review));
                    self.republish(uris);
                }
                let _ = reply.send(());
            }
            AgentMessage::RollbackFinished {
                run_id,
                rolled_back,
                changed,
            } => self.rollback_finished(run_id, rolled_back, changed),
            AgentMessage::RewindFinished(r) => self.rewind_finished(*r),
            AgentMessage::UndoFinished {
                step,
                redo,
                goal,
                result,
            } => self.undo_finished(step, redo, &goal, result),
        }
    }

    /// A run ended. The session knows it before the client does, so a client that reacts to
    /// runFinished (an undo, a new run) never finds it still in progress.
    fn run_finished(&mut self, id: &str, outcome: Outcome) {
        if matches!(&self.active, Some(Active::Run { id: a, .. }) if a == id) {
            self.active = None;
            for told in self.run_end.drain(..) {
                let _ = told.send(());
            }
        }
        let kind = if outcome.status == RunStatus::Done {
            MessageType::INFO
        } else {
            MessageType::WARNING
        };
        self.outbox
            .show_message(kind, format!("agent-ls: {}", outcome.answer));
        self.outbox.notify::<RunFinished>(outcome.clone());
        self.reviewed(&outcome);
        self.last_outcome = Some(outcome);
    }

    /// An undo or redo ended: the workspace is free, and a step that moved is marked so in
    /// the history, the run view and the store.
    fn undo_finished(&mut self, step: u64, redo: bool, goal: &str, result: Result<(), UndoFailed>) {
        if matches!(self.active, Some(Active::Undo { step: s }) if s == step) {
            self.active = None;
        }
        let what = if redo { "redo" } else { "undo" };
        if let Err(e) = result {
            self.outbox.show_message(
                MessageType::ERROR,
                format!("agent-ls: could not {what} step {step}: {e}"),
            );
            return;
        }
        if let Some(history) = &mut self.history {
            if redo {
                history.mark_redone(step);
            } else {
                history.mark_undone(step);
            }
            // The run view marks the step undone (or done again).
            let run_id = history
                .find_done(step)
                .or(history.last_undone().filter(|s| s.id == step))
                .map(|s| s.run_id.clone());
            if let Some(run_id) = run_id {
                self.outbox.notify::<ext::RunEventNotification>(
                    LiveEvent {
                        run_id,
                        iteration: 0,
                        event: RunEvent::Undone { step, redo },
                    }
                    .to_wire(),
                );
            }
        }
        if let Some(store) = &self.store {
            store.send("an undo", move |s| {
                agent_ls_runtime::steps::mark(s, step, !redo)
            });
        }
        if !redo {
            self.review_undone();
        }
        let did = if redo { "redid" } else { "undid" };
        self.outbox.show_message(
            MessageType::INFO,
            format!(
                "agent-ls: {did} step {step} ({})",
                agent_ls_core::agent::one_line(goal)
            ),
        );
    }

    /// The open documents of the workspace by relative path (rope clones are O(1)).
    fn snapshot(&self) -> Snapshot {
        let Some(root) = &self.workspace_root else {
            return Snapshot::new();
        };
        self.documents
            .iter()
            .filter_map(|(uri, buffer)| {
                let path = convert::path_from_uri(uri)?;
                let rel = path.strip_prefix(root).ok()?.to_string_lossy().into_owned();
                Some((rel, (uri.clone(), buffer.clone())))
            })
            .collect()
    }

    /// Answers the runs waiting for documents to hold their texts, and forgets those that
    /// stopped waiting.
    fn check_waiters(&mut self) {
        if self.waiters.is_empty() {
            return;
        }
        let documents = &self.documents;
        let done = |w: &TextWaiter| {
            w.want
                .iter()
                .all(|(uri, text)| documents.get(uri).is_some_and(|b| b.holds(text)))
        };
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .filter(|w| !w.reply.is_closed())
            .partition(done);
        self.waiters = waiting;
        for w in ready {
            let _ = w.reply.send(());
        }
    }

    /// Why no job can start now, if one is in progress.
    fn busy(&self) -> Option<Refused> {
        match &self.active {
            Some(Active::Run { id, goal, .. }) => Some(Refused::RunInProgress {
                id: id.clone(),
                goal: goal.clone(),
            }),
            Some(Active::Undo { step }) => Some(Refused::UndoInProgress(*step)),
            Some(Active::Rollback) => Some(Refused::RollbackInProgress),
            None => None,
        }
    }

    fn connection(&self) -> Option<Connection> {
        Some(Connection {
            outbox: self.outbox.clone(),
            report: self.agent_report.clone(),
            root: self.workspace_root.clone()?,
            encoding: self.encoding,
            support: EditSupport {
                // agent-ls.el asks its own question and saves the files: not eglot alone.
                confirms_edits: self.client_confirms_edits,
                ..EditSupport::from_capabilities(&self.capabilities)
            },
            progress: progress_supported(&self.capabilities),
            written_under: self.written_under.clone(),
            forwarded: ext::forwards_diagnostics(&self.capabilities)
                .then(|| self.forwarded.clone()),
        })
    }

    /// Keeps the editor's errors of a workspace file for the runs' checks.
    fn editor_diagnostics(&mut self, params: ext::EditorDiagnosticsParams) {
        let Some(root) = &self.workspace_root else {
            return;
        };
        let Some(path) = convert::path_from_uri(&params.uri)
            .and_then(|p| Some(p.strip_prefix(root).ok()?.to_string_lossy().into_owned()))
        else {
            return;
        };
        let errors = params
            .diagnostics
            .into_iter()
            .filter(|d| d.severity.is_none_or(|s| s == DiagnosticSeverity::ERROR))
            .map(|d| agent_ls_runtime::lsp_client::FileError {
                path: path.clone(),
                line: d.range.start.line,
                character: d.range.start.character,
                message: d.message,
                code: d.code.map(|c| match c {
                    NumberOrString::Number(n) => n.to_string(),
                    NumberOrString::String(s) => s,
                }),
            })
            .collect();
        self.forwarded.publish(&path, params.version, errors);
    }

    /// Starts undoing (or redoing) a step; refuses while a run goes on or when there is
    /// nothing to undo. Whether the user changed the lines the step touched is settled by the
    /// undo's own task, which reads the files.
    fn undo(
        &mut self,
        redo: bool,
        target: Option<u64>,
        lock: RunLock,
        reply: oneshot::Sender<Result<u64, Refused>>,
    ) {
        let refuse = |reply: oneshot::Sender<Result<u64, Refused>>, why: Refused| {
            let _ = reply.send(Err(why));
        };
        if let Some(why) = self.busy() {
            return refuse(reply, why);
        }
        let Some(connection) = self.connection() else {
            return refuse(reply, Refused::NoWorkspace);
        };
        let Some(history) = &self.history else {
            return refuse(reply, Refused::HistoryNotLoaded);
        };
        let step = match (redo, target) {
            (true, _) => history.last_undone(),
            (false, None) => history.last_done(),
            (false, Some(id)) => match history.find_done(id) {
                Some(s) => Some(s),
                None => return refuse(reply, Refused::NoSuchStep(id)),
            },
        };
        let Some(step) = step.cloned() else {
            return refuse(reply, Refused::NothingTo { redo });
        };
        self.active = Some(Active::Undo { step: step.id });
        undo::spawn_undo(undo::UndoStart {
            step,
            redo,
            snapshot: self.snapshot(),
            connection,
            limits: self.config.config.edit.limits(),
            reply,
            lock,
        });
    }

    /// Takes the session for putting files back from a checkpoint (a rollback, a rewind):
    /// refused while a run, an undo or another rollback goes on, or (`missing`) without a
    /// workspace.
    fn files_back(&mut self, missing: Refused) -> Result<Connection, Refused> {
        if let Some(why) = self.busy() {
            return Err(why);
        }
        let connection = self.connection().ok_or(missing)?;
        self.active = Some(Active::Rollback);
        Ok(connection)
    }

    /// Starts rolling a run back to its checkpoint; refuses while a run or an undo goes on.
    fn rollback(
        &mut self,
        args: RollbackArgs,
        lock: RunLock,
        reply: oneshot::Sender<Result<serde_json::Value, Refused>>,
    ) {
        let connection = match self.files_back(Refused::NoWorkspace) {
            Ok(c) => c,
            Err(why) => {
                let _ = reply.send(Err(why));
                return;
            }
        };
        rollback::spawn_rollback(rollback::RollbackStart {
            args,
            snapshot: self.snapshot(),
            connection,
            limits: self.config.config.edit.limits(),
            memory: self.config.config.memory.clone(),
            reply,
            lock,
        });
    }

    /// A rollback ended: the workspace is free, a rolled-back run's steps are undone, and
    /// when files changed the tests run again, so the diagnostics (the run's last results)
    /// describe the code as it is back to, not as the run left it.
    fn rollback_finished(&mut self, run_id: Option<String>, rolled_back: bool, changed: bool) {
        if matches!(self.active, Some(Active::Rollback)) {
            self.active = None;
        }
        // The rollback recorded itself (`runs::rollback::settle`, memory included); the
        // session's history and run view follow.
        if let (Some(run_id), true) = (run_id, rolled_back) {
            self.mark_run_undone(&run_id);
        }
        if changed {
            self.start_tests(Trigger::User {
                reason: "rollback".into(),
                command: None,
            });
        }
    }

    /// A rolled-back run's steps are no longer applied: each is marked undone (newest
    /// first, so redo goes through them in order), in the history, the store and the run
    /// view, so undo never offers to take them back again.
    fn mark_run_undone(&mut self, run_id: &str) {
        let steps = self
            .history
            .as_ref()
            .map(|h| h.done_of_run(run_id))
            .unwrap_or_default();
        self.mark_undone(run_id, &steps);
    }

    /// Run `run_id`'s `steps` are no longer applied: marked undone in the history, the store
    /// and the run view.
    fn mark_undone(&mut self, run_id: &str, steps: &[u64]) {
        let Some(history) = &mut self.history else {
            return;
        };
        for &step in steps {
            history.mark_undone(step);
            self.outbox.notify::<ext::RunEventNotification>(
                LiveEvent {
                    run_id: run_id.to_string(),
                    iteration: 0,
                    event: RunEvent::Undone { step, redo: false },
                }
                .to_wire(),
            );
            if let Some(store) = &self.store {
                store.send("a rollback", move |s| s.set_undone(step, true));
            }
        }
    }

    /// Starts taking a run back to a step (agent-ls.rewind); refuses while a run, an undo
    /// or a rollback goes on. The new run starts when the files are back
    /// (`rewind_finished`).
    fn rewind(
        &mut self,
        args: RewindArgs,
        lock: RunLock,
        reply: oneshot::Sender<Result<serde_json::Value, Refused>>,
    ) {
        let connection = match self.files_back(Refused::NoWorkspaceForRun) {
            Ok(c) => c,
            Err(why) => {
                let _ = reply.send(Err(why));
                return;
            }
        };
        rewind::spawn_rewind(rewind::RewindStart {
            args,
            snapshot: self.snapshot(),
            connection,
            limits: self.config.config.edit.limits(),
            reply,
            lock,
        });
    }

    /// A rewind's files are back: its steps are undone here too, and the new run starts
    /// under the rewind's lock, following the conversation up to the step.
    fn rewind_finished(&mut self, r: Rewound) {
        if matches!(self.active, Some(Active::Rollback)) {
            self.active = None;
        }
        let Rewound {
            rewind,
            goal,
            lock,
            reply,
        } = r;
        let started = rewind.and_then(|rw| {
            self.mark_undone(&rw.run_id, &rw.undone);
            let id = agent_ls_runtime::drive::new_run_id();
            let launched = self.launch(id, goal.clone(), rw.request(goal), lock);
            launched.map(|id| rewind::answer(&id, &rw))
        });
        let _ = reply.send(started);
    }

    /// Starts an agent run for a goal, answering `{"run_id"}`. (A goal that names one of the
    /// commands was routed by the handler before it came here.)
    fn start_run(&mut self, args: RunArgs, lock: RunLock) -> Result<serde_json::Value, Refused> {
        if let Some(why) = self.busy() {
            return Err(why);
        }
        let Some(root) = self.workspace_root.clone() else {
            return Err(Refused::NoWorkspaceForRun);
        };
        if args.goal.trim().is_empty() {
            return Err(Refused::EmptyGoal);
        }
        let goal = agent_runs::goal_with_selection(&args, &self.documents, &root, self.encoding);
        let request = RunRequest {
            agent: args.agent,
            reproduce: args.reproduce,
            begin: args.review.map_or(Begin::New, Begin::Review),
            ..RunRequest::new(goal)
        };
        let id = agent_ls_runtime::drive::new_run_id();
        self.launch(id, args.goal, request, lock)
            .map(|id| serde_json::json!({"run_id": id}))
    }

    /// Starts the run the request asks for (set up by the runtime: an agent that cannot run is
    /// refused here, before anything starts).
    fn launch(
        &mut self,
        id: String,
        title: String,
        request: RunRequest,
        lock: RunLock,
    ) -> Result<String, Refused> {
        let prepared = runs::prepare(&self.config.config, request)?;
        let Some(connection) = self.connection() else {
            return Err(Refused::NoWorkspaceForRun);
        };
        // A hook changed since the session began asks again (its run does not run it).
        self.offer_hook_trust();
        let cancel = CancellationToken::new();
        let (decisions_tx, decisions) = mpsc::unbounded_channel();
        self.active = Some(Active::Run {
            id: id.clone(),
            goal: title,
            cancel: cancel.clone(),
            decisions: decisions_tx,
            deciding: false,
        });
        let git = self.git_context();
        agent_runs::spawn(agent_runs::StartRun {
            id: id.clone(),
            prepared,
            connection,
            store: self.store.clone(),
            cancel,
            decisions,
            lock,
            git,
        });
        Ok(id)
    }

    fn start_tests(&mut self, trigger: Trigger) {
        let Some(root) = self.workspace_root.clone() else {
            self.outbox.show_message(
                MessageType::WARNING,
                "agent-ls: no workspace folder, so no tests to run",
            );
            if let Trigger::Agent { reply, .. } = trigger {
                let _ = reply.send(Err(agent_ls_runtime::tests_run::RunError::NoCommand));
            }
            return;
        };
        self.written_under.restamp_parked(&root);
        self.with_tests(&root, |tests, cx| tests.start(cx, trigger));
    }

    /// Calls `f` with the test runs and what they need of the session for `root`.
    fn with_tests(&mut self, root: &Path, f: impl FnOnce(&mut TestRuns, &test_runs::Context)) {
        let cx = test_runs::Context {
            outbox: &self.outbox,
            report: &self.test_report,
            root,
            config: &self.config.config.test,
            sandbox: &self.config.config.sandbox,
            progress: progress_supported(&self.capabilities),
            documents: &self.documents,
            encoding: self.encoding,
            review: &self.review,
        };
        f(&mut self.tests, &cx);
    }

    /// A run's change was applied: it goes into the history, and the run view hears its
    /// step's id (for undo from there) and the store keeps it.
    fn step_applied(&mut self, applied: AppliedStep) {
        let Some(history) = &mut self.history else {
            return;
        };
        let AppliedStep {
            run_id,
            goal,
            task,
            iteration,
            changes,
            files,
        } = applied;
        history.record(&run_id, &goal, &task, changes, files);
        if let Some(step) = history.last_done() {
            // The run view offers undo of this step by its id.
            self.outbox.notify::<ext::RunEventNotification>(
                LiveEvent {
                    run_id,
                    iteration,
                    event: RunEvent::Step {
                        step: step.id,
                        files: step.files.iter().map(|f| f.path.clone()).collect(),
                    },
                }
                .to_wire(),
            );
            if let Some(store) = &self.store {
                let step = step.clone();
                store.send("an agent step", move |s| s.record_step(&step));
            }
        }
    }

    /// A run's review: its findings become diagnostics on the lines they name; and where its
    /// failing tests pointed stays in view as hints when the run did not make them pass.
    fn reviewed(&mut self, outcome: &Outcome) {
        use agent_ls_core::agent::review::Decision;
        if let (Some(review), Some(root)) = (&outcome.review, &self.workspace_root) {
            // A run rolled back at its review question left nothing for the findings to be on.
            let rolled_back = outcome.decision == Some(Decision::RolledBack);
            let uris = self.review.set(root, Some(review).filter(|_| !rolled_back));
            self.republish(uris);
        }
        if let Some(root) = &self.workspace_root {
            let unsolved = outcome.status != agent_ls_core::agent::RunStatus::Done;
            // The first few: a tie can keep a dozen for the prompt, too many hints to read.
            let top = outcome.suspects.len().min(agent_ls_runtime::locate::TOP);
            let suspects = if unsolved {
                &outcome.suspects[..top]
            } else {
                &[]
            };
            let uris = self.review.set_suspects(root, suspects);
            self.republish(uris);
        }
    }

    /// A step was undone: the reviewed change is no longer what the files hold.
    fn review_undone(&mut self) {
        let uris = self.review.clear();
        self.republish(uris);
    }

    /// Publishes the diagnostics of `uris` again after the reviewer's findings changed.
    fn republish(&mut self, uris: Vec<Uri>) {
        let Some(root) = self.workspace_root.clone() else {
            return;
        };
        self.with_tests(&root, |tests, cx| {
            for uri in &uris {
                tests.republish(cx, uri);
            }
        });
    }

    fn initialize(
        &mut self,
        params: InitializeParams,
        inputs: config::Inputs,
        loaded: Loaded,
        reply: oneshot::Sender<Encoding>,
    ) {
        self.encoding = convert::negotiate_encoding(&params);
        self.capabilities = params.capabilities.clone();
        self.client_confirms_edits = !EditSupport::from_capabilities(&params.capabilities)
            .save_files
            && workspace_edit::client_confirms_edits(params.process_id);
        self.workspace_root = inputs.workspace_root.clone();
        self.inputs = inputs;
        self.config = loaded;
        self.config_errors = self.config.errors.clone();
        self.report_config_errors(&self.config_errors.clone());
        self.log.set_level(self.config.config.log.level);
        self.open_store();
        if let Some(root) = &self.workspace_root {
            // Built now, at a low priority, and kept: a run from the editor then starts with
            // the whole map (docs/bigrepo.md).
            agent_ls_runtime::repomap::warm::keep(root);
            // Another window's test runs on this folder are shown here too.
            test_runs::watch_shared(
                root.clone(),
                self.tests.writer().to_string(),
                self.test_report.clone(),
            );
        }
        self.initialized = true;
        info!(
            encoding = self.encoding.as_str(),
            root = ?self.workspace_root,
            "initialized"
        );
        let _ = reply.send(self.encoding);
    }

    /// Starts the store's thread, which opens the workspace's store and then reads the undo
    /// history back; both arrive as events.
    fn open_store(&mut self) {
        let Some(root) = self.workspace_root.clone() else {
            self.history = Some(History::default());
            return;
        };
        let me = self.me.clone();
        let store = StoreThread::open(root, move |r| {
            me.send(Event::StoreOpened(r));
        });
        let (reader, me) = (store.clone(), self.me.clone());
        tokio::spawn(async move {
            let steps = match reader.call(|s| s.load_steps()).await {
                Some(Ok(steps)) => steps,
                Some(Err(e)) => {
                    error!("cannot read the undo history: {e}");
                    Vec::new()
                }
                None => Vec::new(),
            };
            me.send(Event::HistoryLoaded(steps));
        });
        self.store = Some(store);
    }

    fn change(&mut self, p: DidChangeTextDocumentParams) {
        let uri = p.text_document.uri;
        let Some(buffer) = self.documents.get_mut(&uri) else {
            warn!(
                uri = uri.as_str(),
                "change for a document that is not open; ignored"
            );
            return;
        };
        if p.text_document.version <= buffer.version() {
            warn!(
                uri = uri.as_str(),
                have = buffer.version(),
                got = p.text_document.version,
                "document version did not increase"
            );
        }
        let changes: Vec<_> = p
            .content_changes
            .into_iter()
            .map(convert::change_from_lsp)
            .collect();
        self.edits
            .entry(uri.clone())
            .or_default()
            .remember(&changes);
        // Edited lines lose their review findings; lines below move with the edit (the
        // changes' lines are the text's before them). Published once the buffer has them.
        let moved = self.review.edited(&uri, &changes);
        let Some(buffer) = self.documents.get_mut(&uri) else {
            return;
        };
        if let Err(err) = buffer.apply_changes(&changes, p.text_document.version, self.encoding) {
            error!(uri = uri.as_str(), "refused a change: {err}");
            self.outbox.show_message(
                MessageType::WARNING,
                format!(
                    "agent-ls refused a change to {} that would corrupt its copy ({err}). \
                     The agent will not edit this file until it is closed and reopened.",
                    uri.as_str()
                ),
            );
        }
        if moved {
            self.republish(vec![uri]);
        }
    }

    /// Loads the configuration again off this task (it reads files); the answer comes back as
    /// `ConfigLoaded`, and only the latest load applies.
    fn reload_config(&mut self, inputs: config::Inputs) {
        // The inputs are the latest facts (the client's settings, the folder's trust) whether
        // or not their load succeeds: a reload that starts before this one ends (the trust
        // question answered meanwhile) builds on them instead of undoing them.
        self.inputs = inputs.clone();
        self.reloading = true;
        self.config_generation += 1;
        let generation = self.config_generation;
        let me = self.me.clone();
        tokio::task::spawn_blocking(move || {
            // Under the panic guard: a reload that panics ends too, or the session would
            // hold every save and command behind "reloading" until a restart.
            let loaded = jobs::caught_blocking(jobs::Kind::ConfigReload, || {
                jobs::injected_panic(jobs::Kind::ConfigReload);
                config::load(&inputs)
            });
            me.send(match loaded {
                Ok(loaded) => Event::ConfigLoaded {
                    generation,
                    loaded: Box::new(loaded),
                },
                Err(why) => Event::ConfigFailed { generation, why },
            });
        });
    }

    /// A reload failed inside agent-ls: the configuration in force stays, and the events
    /// that waited for the reload go on under it.
    fn config_failed(&mut self, generation: u64, why: Panicked) {
        if generation != self.config_generation {
            return;
        }
        self.reloading = false;
        error!("{why}");
        self.outbox.show_message(
            MessageType::ERROR,
            format!("agent-ls: {why}; the previous configuration stays in force"),
        );
        self.replay_deferred();
    }

    /// When any layer is invalid, the previous configuration stays in force and the user is
    /// told what to fix.
    fn config_loaded(&mut self, generation: u64, loaded: Loaded) {
        if generation != self.config_generation {
            debug!(generation, "dropped a superseded configuration load");
            return;
        }
        self.reloading = false;
        self.config_errors = loaded.errors.clone();
        if loaded.errors.is_empty() {
            self.config = loaded;
            self.log.set_level(self.config.config.log.level);
            info!("configuration reloaded");
            self.offer_hook_trust();
        } else {
            self.report_config_errors(&loaded.errors);
            warn!("configuration not changed: the previous valid configuration stays in force");
        }
        self.replay_deferred();
    }

    /// Once per session, when the workspace file sets keys that only trust lets apply and the
    /// user has not decided about this folder: asks whether to trust it. The answer is
    /// awaited and recorded off this task; a recorded "Trust" reloads the configuration.
    fn ask_trust(&mut self) {
        if !self.config.ask_trust || self.trust_asked {
            return;
        }
        let Some(root) = self.workspace_root.clone() else {
            return;
        };
        self.trust_asked = true;
        let keys: Vec<String> = config::gated(&self.config.untrusted)
            .map(|k| format!("`{k}`"))
            .collect();
        let request = self.outbox.ask(
            MessageType::WARNING,
            format!(
                "agent-ls: {}'s {} sets {}, which run programs, name servers, send data or approve. \
                 They are ignored unless you trust this folder. Trust it?",
                root.display(),
                config::WORKSPACE_FILE,
                keys.join(", ")
            ),
            &[TRUST_FOLDER, NOT_NOW, NEVER],
        );
        let (me, outbox, trust_file) = (
            self.me.clone(),
            self.outbox.clone(),
            self.inputs.trust_file.clone(),
        );
        tokio::spawn(async move {
            use agent_ls_runtime::trust::{Decision, TrustStore};
            let decision = match request.await {
                Some(title) if title == TRUST_FOLDER => Decision::Trusted,
                Some(title) if title == NEVER => Decision::Declined,
                _ => return,
            };
            let stored = tokio::task::spawn_blocking(move || {
                let store = match trust_file {
                    Some(f) => TrustStore::at(f),
                    None => TrustStore::for_user()?,
                };
                store.set(&root, decision)
            })
            .await;
            match stored {
                Ok(Ok(_)) => me.send(Event::TrustDecided(decision)),
                Ok(Err(e)) => outbox.show_message(MessageType::ERROR, format!("agent-ls: {e}")),
                Err(e) => error!("recording the trust decision failed: {e}"),
            }
        });
    }

    /// The client's `initialized`: the questions about the folder and its hooks may be asked.
    fn client_initialized(&mut self) {
        self.ask_trust();
        self.offer_hook_trust();
    }

    /// Asks about the workspace's hooks that are not trusted and not asked about yet.
    fn offer_hook_trust(&self) {
        if let Some(root) = self.workspace_root.clone() {
            let config = self.config.config.clone();
            super::hook_trust::offer(&self.outbox, root, config, self.hook_questions.clone());
        }
    }

    fn trust_decided(&mut self, decision: agent_ls_runtime::trust::Decision) {
        if decision == agent_ls_runtime::trust::Decision::Trusted {
            info!("the user trusted the workspace folder");
            self.outbox.show_message(
                MessageType::INFO,
                format!(
                    "agent-ls: this folder is trusted; its {} applies in full (`agent-ls untrust` takes that back).",
                    config::WORKSPACE_FILE
                ),
            );
            self.reload_config(self.inputs.clone());
        } else {
            info!("the user declined to trust the workspace folder; not asked again");
        }
    }

    fn report_config_errors(&self, errors: &[config::ConfigError]) {
        for err in errors {
            error!("{err}");
            self.outbox
                .show_message(MessageType::ERROR, format!("agent-ls: {err}"));
        }
    }
}

fn progress_supported(capabilities: &ClientCapabilities) -> bool {
    capabilities
        .window
        .as_ref()
        .and_then(|w| w.work_done_progress)
        .unwrap_or(false)
}

/// A document's latest edits, kept in O(1) a change: a bounded queue of bounded copies.
#[derive(Default)]
struct RecentEdits {
    count: u64,
    latest: std::collections::VecDeque<RecentEdit>,
}

impl RecentEdits {
    /// Keeps `changes`; typing on the line of the latest edit extends it, so a word typed
    /// is one edit, not one a keystroke.
    fn remember(&mut self, changes: &[agent_ls_core::text::TextChange]) {
        self.count += changes.len() as u64;
        let skip = changes.len().saturating_sub(next_edit::KEPT_EDITS);
        for c in changes.iter().skip(skip) {
            let line = c.range.map_or(0, |r| r.start.line);
            if let Some(last) = self.latest.back_mut()
                && last.line == line
                && last.inserted.len() + c.text.len() <= next_edit::EDIT_TEXT_BYTES
            {
                last.inserted.push_str(&c.text);
                continue;
            }
            if self.latest.len() == next_edit::KEPT_EDITS {
                self.latest.pop_front();
            }
            self.latest.push_back(RecentEdit::new(line, &c.text));
        }
    }
}
