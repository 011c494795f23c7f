//! The one owner of the server's mutable state. Everything that changes it arrives as an
//! `Event` on one channel, in the order the transport read it; handlers never lock anything.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;

use tokio::sync::{mpsc, oneshot};
use tower_lsp_server::Client;
use tower_lsp_server::ls_types::{
    ClientCapabilities, DidChangeConfigurationParams, DidChangeTextDocumentParams,
    DidCloseTextDocumentParams, DidOpenTextDocumentParams, DidSaveTextDocumentParams,
    InitializeParams, MessageType, Uri,
};
use tracing::{debug, error, info, warn};

use super::agent_runs;
use super::convert;
use super::test_runs::{self, TestRuns};
use crate::config::{self, Loaded};
use crate::logging::LogHandle;
use crate::tests_run::{RunError, RunResult};
use crate::text::{Buffer, Encoding};

/// A closure run on the owner task against the current state.
type Query = Box<dyn FnOnce(&Session) + Send>;

pub enum Event {
    Initialize {
        params: Box<InitializeParams>,
        reply: oneshot::Sender<Encoding>,
    },
    Opened(DidOpenTextDocumentParams),
    Changed(DidChangeTextDocumentParams),
    Closed(DidCloseTextDocumentParams),
    Saved(DidSaveTextDocumentParams),
    ConfigurationChanged(DidChangeConfigurationParams),
    Query(Query),
    /// Run the workspace's tests now (a command, a debounced save, an applied agent edit).
    RunTests {
        reason: String,
    },
    CancelTests,
    /// A test run ended; `generation` tells whether it is still the latest.
    TestsFinished {
        generation: u64,
        result: Box<Result<RunResult, RunError>>,
    },
    /// The debounce delay after a save passed.
    SaveSettled {
        generation: u64,
    },
    /// Start an agent run; the reply is its id, or why it cannot start.
    StartRun {
        args: agent_runs::RunArgs,
        reply: oneshot::Sender<Result<serde_json::Value, String>>,
    },
    /// agent-ls.accept (true) or agent-ls.reject (false) for the proposal waiting.
    Decision(bool),
    RunEnded {
        id: String,
        outcome: Box<crate::drive::Outcome>,
    },
    /// A test run of the agent loop ended: publish it like any other.
    PublishTests(Box<RunResult>),
    /// An agent step was applied and confirmed: record it in the history.
    StepApplied {
        run_id: String,
        goal: String,
        task: String,
        changes: Vec<crate::edit::FileChange>,
        files: Vec<crate::edit::history::StepFile>,
    },
    /// agent-ls.undo (or redo): the reply says which step, or why not.
    Undo {
        redo: bool,
        /// Undo this step rather than the latest.
        step: Option<u64>,
        reply: oneshot::Sender<Result<u64, String>>,
    },
    /// agent-ls.resume: go on with an interrupted run from its last checkpoint.
    Resume {
        run_id: String,
        reply: oneshot::Sender<Result<String, String>>,
    },
    UndoApplied {
        step: u64,
        redo: bool,
    },
    /// window/workDoneProgress/cancel: the cancel button of a run's or a test run's progress.
    ProgressCancelled(tower_lsp_server::ls_types::ProgressToken),
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
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Event::Query(Box::new(move |s| {
                let _ = reply.send(f(s));
            })))
            .map_err(|_| SessionGone)?;
        answer.await.map_err(|_| SessionGone)
    }
}

pub struct Session {
    client: Client,
    log: LogHandle,
    initialized: bool,
    encoding: Encoding,
    workspace_root: Option<PathBuf>,
    inputs: config::Inputs,
    config: Loaded,
    /// Problems found by the latest attempt to load the configuration, even a refused one.
    config_errors: Vec<config::ConfigError>,
    documents: HashMap<Uri, Buffer>,
    capabilities: ClientCapabilities,
    tests: TestRuns,
    /// This session's own sender, for tasks that report back to it.
    me: Option<SessionHandle>,
    agent: Option<agent_runs::Active>,
    last_outcome: Option<crate::drive::Outcome>,
    history: crate::edit::history::History,
    /// Where the history is kept across restarts; `None` when it could not be opened.
    store: Option<crate::store::Store>,
}

impl Session {
    pub fn new(client: Client, log: LogHandle, inputs: config::Inputs) -> Self {
        let config = config::load(&inputs);
        Session {
            client,
            log,
            initialized: false,
            encoding: Encoding::Utf16,
            workspace_root: None,
            inputs,
            config_errors: config.errors.clone(),
            config,
            documents: HashMap::new(),
            capabilities: ClientCapabilities::default(),
            tests: TestRuns::default(),
            me: None,
            agent: None,
            last_outcome: None,
            history: Default::default(),
            store: None,
        }
    }

    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    pub fn document(&self, uri: &Uri) -> Option<&Buffer> {
        self.documents.get(uri)
    }

    pub fn config(&self) -> &Loaded {
        &self.config
    }

    pub fn documents(&self) -> impl Iterator<Item = (&Uri, &Buffer)> {
        self.documents.iter()
    }

    /// The run in progress (id, goal) and the last outcome, for agent-ls.status.
    pub fn agent_status(&self) -> serde_json::Value {
        serde_json::json!({
            "active": self.agent.as_ref().map(|a| serde_json::json!({"run_id": a.id, "goal": a.goal})),
            "last": self.last_outcome,
            "interrupted": self.interrupted(),
            "steps": self.history.summaries(10),
        })
    }

    /// Runs a crash or restart interrupted, for agent-ls.status and agent-ls.resume.
    fn interrupted(&self) -> Vec<crate::store::Interrupted> {
        let active = self.agent.as_ref().map(|a| a.id.as_str());
        match &self.store {
            Some(store) => store.interrupted_runs(active).unwrap_or_else(|e| {
                error!("{e}");
                Vec::new()
            }),
            None => Vec::new(),
        }
    }

    pub fn config_errors(&self) -> &[config::ConfigError] {
        &self.config_errors
    }

    pub fn workspace_root(&self) -> Option<&PathBuf> {
        self.workspace_root.as_ref()
    }

    /// Starts the owner task and returns the handle every handler sends through.
    pub fn spawn(mut self) -> SessionHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = SessionHandle { tx };
        self.me = Some(handle.clone());
        tokio::spawn(self.run(rx));
        handle
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Event>) {
        while let Some(event) = rx.recv().await {
            // A bug in one event must not take every open document down with it.
            if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| self.handle(event))) {
                error!(
                    "session event handler panicked: {}",
                    super::panic_message(&panic)
                );
            }
        }
        debug!("session owner stopped");
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Initialize { params, reply } => self.initialize(*params, reply),
            Event::Query(f) => f(self),
            _ if !self.initialized => {
                warn!("notification before initialize ignored");
            }
            Event::Opened(p) => {
                let doc = p.text_document;
                debug!(uri = doc.uri.as_str(), version = doc.version, "opened");
                self.documents
                    .insert(doc.uri, Buffer::new(&doc.text, doc.version));
            }
            Event::Changed(p) => self.change(p),
            Event::Closed(p) => {
                self.documents.remove(&p.text_document.uri);
            }
            Event::Saved(p) => {
                let is_workspace_config = match (
                    &self.workspace_root,
                    convert::path_from_uri(&p.text_document.uri),
                ) {
                    (Some(root), Some(path)) => path == root.join(config::WORKSPACE_FILE),
                    _ => false,
                };
                if is_workspace_config {
                    self.reload_config(self.inputs.clone());
                } else if self.config.config.test.on_save {
                    self.debounce_save();
                }
            }
            Event::RunTests { reason } => self.run_tests(&reason),
            Event::ProgressCancelled(token) => {
                let token = match token {
                    tower_lsp_server::ls_types::NumberOrString::String(s) => s,
                    tower_lsp_server::ls_types::NumberOrString::Number(n) => n.to_string(),
                };
                if let Some(id) = token.strip_prefix("agent-ls/run/") {
                    match &self.agent {
                        Some(a) if a.id == id => a.cancel.cancel(),
                        _ => debug!("a cancel for run {id}, which is not running"),
                    }
                } else if let Some(generation) = token
                    .strip_prefix("agent-ls/tests/")
                    .and_then(|g| g.parse().ok())
                {
                    self.tests.cancel_generation(generation);
                }
            }
            Event::CancelTests => {
                self.tests.cancel();
                if let Some(a) = &self.agent {
                    a.cancel.cancel();
                }
            }
            Event::StartRun { args, reply } => {
                let _ = reply.send(self.start_run(args));
            }
            Event::Decision(yes) => match &self.agent {
                Some(a) => {
                    let _ = a.decisions.send(yes);
                }
                None => self.notify(MessageType::INFO, "agent-ls: no proposal is waiting".into()),
            },
            Event::RunEnded { id, outcome } => {
                if self.agent.as_ref().is_some_and(|a| a.id == id) {
                    self.agent = None;
                }
                self.last_outcome = Some(*outcome);
            }
            Event::StepApplied {
                run_id,
                goal,
                task,
                changes,
                files,
            } => {
                self.history.record(&run_id, &goal, &task, changes, files);
                if let (Some(store), Some(step)) = (&mut self.store, self.history.last_done())
                    && let Err(e) = store.record_step(step)
                {
                    error!("{e}");
                }
            }
            Event::Undo { redo, step, reply } => {
                let _ = reply.send(self.undo(redo, step));
            }
            Event::Resume { run_id, reply } => {
                let _ = reply.send(self.resume_run(&run_id));
            }
            Event::UndoApplied { step, redo } => {
                if redo {
                    self.history.mark_redone(step);
                } else {
                    self.history.mark_undone(step);
                }
                if let Some(store) = &self.store
                    && let Err(e) = store.set_undone(step, !redo)
                {
                    error!("{e}");
                }
            }
            Event::PublishTests(result) => {
                let root = self.workspace_root.clone().unwrap_or_default();
                self.tests
                    .publish(*result, &self.client, &root, &self.documents, self.encoding);
            }
            Event::SaveSettled { generation } => {
                if self.tests.is_latest_save(generation) {
                    self.run_tests("save");
                }
            }
            Event::TestsFinished { generation, result } => {
                let root = self.workspace_root.clone().unwrap_or_default();
                self.tests.finished(
                    generation,
                    *result,
                    &self.client,
                    &root,
                    &self.documents,
                    self.encoding,
                );
            }
            Event::ConfigurationChanged(p) => {
                let mut inputs = self.inputs.clone();
                inputs.client_settings = (!p.settings.is_null()).then_some(p.settings);
                self.reload_config(inputs);
            }
        }
    }

    /// Starts undoing (or redoing) the latest step; refuses while a run goes on, when there is
    /// nothing to undo, or when the user changed the lines the step touched.
    fn undo(&mut self, redo: bool, target: Option<u64>) -> Result<u64, String> {
        if let Some(a) = &self.agent {
            return Err(format!(
                "a run is in progress ({}); cancel it or let it finish first",
                a.id
            ));
        }
        let (Some(root), Some(me)) = (self.workspace_root.clone(), self.me.clone()) else {
            return Err("no workspace folder".into());
        };
        let step = match (redo, target) {
            (true, _) => self.history.last_undone(),
            (false, None) => self.history.last_done(),
            (false, Some(id)) => Some(self.history.find_done(id).ok_or_else(|| {
                format!("no applied step {id} to undo (agent-ls.status lists the steps)")
            })?),
        };
        let Some(step) = step.cloned() else {
            return Err(format!("nothing to {}", if redo { "redo" } else { "undo" }));
        };
        let current = |rel: &str| {
            let path = root.join(rel);
            let uri = Uri::from_file_path(&path)?;
            match self.documents.get(&uri) {
                Some(b) => Some(b.text()),
                None => std::fs::read_to_string(&path).ok(),
            }
        };
        let limits = self.config.config.edit.limits();
        let reversal = if redo {
            crate::edit::history::Reversal {
                changes: crate::edit::history::reapply(&step, current, &limits)?,
                deletes: Vec::new(),
            }
        } else {
            crate::edit::history::revert(&step, current, &limits)?
        };
        agent_runs::spawn_undo(agent_runs::UndoStart {
            step: step.id,
            redo,
            goal: step.goal.clone(),
            changes: reversal.changes,
            deletes: reversal.deletes,
            client: self.client.clone(),
            session: me,
            root,
            encoding: self.encoding,
            support: super::workspace_edit::EditSupport::from_capabilities(&self.capabilities),
            limits,
        });
        Ok(step.id)
    }

    /// Opens the workspace's store and restores the undo history from it.
    fn open_store(&mut self) {
        let Some(root) = self.workspace_root.clone() else {
            return;
        };
        match crate::store::Store::open(&root) {
            Ok((store, notice)) => {
                if let Some(n) = notice {
                    warn!("{n}");
                    self.notify(MessageType::WARNING, format!("agent-ls: {n}"));
                }
                match store.load_steps() {
                    Ok(steps) => self.history = crate::edit::history::History::restore(steps),
                    Err(e) => error!("{e}"),
                }
                self.store = Some(store);
            }
            Err(e) => {
                error!("{e}");
                self.notify(
                    MessageType::WARNING,
                    format!("agent-ls: {e}; undo history will not survive a restart"),
                );
            }
        }
    }

    fn progress_supported(&self) -> bool {
        self.capabilities
            .window
            .as_ref()
            .and_then(|w| w.work_done_progress)
            .unwrap_or(false)
    }

    /// Starts an agent run for a goal, answering `{"run_id"}`; a goal that names one of the
    /// commands ("undo", "status", "run `make lint`") does that instead, answering
    /// `{"routed": ...}`.
    fn start_run(&mut self, args: agent_runs::RunArgs) -> Result<serde_json::Value, String> {
        use crate::agent::Route;
        // A goal about a selection is always for the agent.
        let route = if args.range.is_some() {
            Route::Agent
        } else {
            crate::agent::route(&args.goal)
        };
        match route {
            Route::Undo(step) => {
                return self
                    .undo(false, step)
                    .map(|id| serde_json::json!({"routed": "agent-ls.undo", "step": id}));
            }
            Route::Redo => {
                return self
                    .undo(true, None)
                    .map(|id| serde_json::json!({"routed": "agent-ls.redo", "step": id}));
            }
            Route::Status => {
                return Ok(
                    serde_json::json!({"routed": "agent-ls.status", "status": self.agent_status()}),
                );
            }
            Route::Command(argv) => {
                let line = argv.join(" ");
                self.run_tests_with("command", Some(argv));
                return Ok(serde_json::json!({"routed": "command", "command": line}));
            }
            Route::Agent => {}
        }
        self.start_agent(args)
            .map(|id| serde_json::json!({"run_id": id}))
    }

    fn start_agent(&mut self, args: agent_runs::RunArgs) -> Result<String, String> {
        if let Some(a) = &self.agent {
            return Err(format!(
                "a run is in progress ({}: {}); cancel it first with agent-ls.cancel",
                a.id, a.goal
            ));
        }
        let Some(root) = self.workspace_root.clone() else {
            return Err("agent-ls needs a workspace folder to run the agent".into());
        };
        if args.goal.trim().is_empty() {
            return Err("the goal is empty".into());
        }
        let goal = agent_runs::goal_with_selection(&args, &self.documents, &root, self.encoding);
        self.launch(agent_runs::new_id(), args.goal, goal, None)
    }

    /// Goes on with an interrupted run: from its last checkpoint (the coder's call of the
    /// iteration it was in), or from the start when it was interrupted before the first.
    fn resume_run(&mut self, run_id: &str) -> Result<String, String> {
        if let Some(a) = &self.agent {
            return Err(format!(
                "a run is in progress ({}: {}); cancel it first with agent-ls.cancel",
                a.id, a.goal
            ));
        }
        let Some(store) = &self.store else {
            return Err("no store in this workspace, so no run to resume".into());
        };
        let (goal, checkpoint, status) = store
            .resume_point(run_id)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no run {run_id} in this workspace"))?;
        if status != "running" {
            return Err(format!("run {run_id} already ended ({status})"));
        }
        if !self.interrupted().iter().any(|r| r.run_id == run_id) {
            return Err(format!(
                "run {run_id} is still going in another agent-ls process"
            ));
        }
        let state = match checkpoint {
            Some(json) => Some(
                serde_json::from_str::<crate::agent::Run>(&json)
                    .map_err(|e| format!("the checkpoint of {run_id} cannot be read: {e}"))?,
            ),
            None => None,
        };
        self.launch(run_id.to_string(), goal.clone(), goal, state)
    }

    fn launch(
        &mut self,
        id: String,
        title: String,
        goal: String,
        resume: Option<crate::agent::Run>,
    ) -> Result<String, String> {
        let (Some(root), Some(me)) = (self.workspace_root.clone(), self.me.clone()) else {
            return Err("agent-ls needs a workspace folder to run the agent".into());
        };
        let args = agent_runs::RunArgs {
            goal: title,
            ..Default::default()
        };
        let cancel = tokio_util::sync::CancellationToken::new();
        let (decisions_tx, decisions) = mpsc::unbounded_channel();
        self.agent = Some(agent_runs::Active {
            id: id.clone(),
            goal: args.goal.clone(),
            cancel: cancel.clone(),
            decisions: decisions_tx,
        });
        let progress = self.progress_supported();
        agent_runs::spawn(agent_runs::StartRun {
            id: id.clone(),
            goal,
            config: self.config.config.clone(),
            root,
            encoding: self.encoding,
            support: super::workspace_edit::EditSupport::from_capabilities(&self.capabilities),
            progress,
            client: self.client.clone(),
            session: me,
            cancel,
            decisions,
            resume,
        });
        Ok(id)
    }

    fn run_tests(&mut self, reason: &str) {
        self.run_tests_with(reason, None);
    }

    /// Runs the tests, or `command` in their place (a routed "run `make lint`"), under the
    /// same allowlist, timeout and output cap, its failures published the same way.
    fn run_tests_with(&mut self, reason: &str, command: Option<Vec<String>>) {
        let (Some(root), Some(me)) = (self.workspace_root.clone(), self.me.clone()) else {
            self.notify(
                MessageType::WARNING,
                "agent-ls: no workspace folder, so no tests to run".into(),
            );
            return;
        };
        let progress = self.progress_supported();
        let mut config = self.config.config.test.clone();
        if let Some(argv) = command {
            config.command = argv;
            // Our own test-runner flags belong to the test command, not to this one.
            config.nextest = false;
        }
        self.tests.start(test_runs::Start {
            client: &self.client,
            session: &me,
            root: &root,
            config: &config,
            progress,
            reason,
        });
    }

    /// Starts the debounce delay for a save; only the last save of a burst runs the tests.
    fn debounce_save(&mut self) {
        let generation = self.tests.saved();
        let delay = std::time::Duration::from_millis(self.config.config.test.debounce_ms);
        if let Some(me) = self.me.clone() {
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                me.send(Event::SaveSettled { generation });
            });
        }
    }

    fn initialize(&mut self, params: InitializeParams, reply: oneshot::Sender<Encoding>) {
        self.encoding = convert::negotiate_encoding(&params);
        self.capabilities = params.capabilities.clone();
        self.workspace_root = convert::workspace_root(&params);
        let mut inputs = self.inputs.clone();
        inputs.workspace_root = self.workspace_root.clone();
        inputs.initialization_options = params.initialization_options;
        self.inputs = inputs;
        self.config = config::load(&self.inputs);
        self.config_errors = self.config.errors.clone();
        self.report_config_errors(&self.config_errors);
        self.log.set_level(self.config.config.log.level);
        self.open_store();
        self.initialized = true;
        info!(
            encoding = self.encoding.as_str(),
            root = ?self.workspace_root,
            "initialized"
        );
        let _ = reply.send(self.encoding);
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
        if let Err(err) = buffer.apply_changes(&changes, p.text_document.version, self.encoding) {
            error!(uri = uri.as_str(), "refused a change: {err}");
            self.notify(
                MessageType::WARNING,
                format!(
                    "agent-ls refused a change to {} that would corrupt its copy ({err}). \
                     The agent will not edit this file until it is closed and reopened.",
                    uri.as_str()
                ),
            );
        }
    }

    /// Recomputes the configuration; when any layer is invalid, the previous configuration
    /// stays in force and the user is told what to fix.
    fn reload_config(&mut self, inputs: config::Inputs) {
        let loaded = config::load(&inputs);
        self.config_errors = loaded.errors.clone();
        if !loaded.errors.is_empty() {
            self.report_config_errors(&loaded.errors);
            warn!("configuration not changed: the previous valid configuration stays in force");
            return;
        }
        self.inputs = inputs;
        self.config = loaded;
        self.log.set_level(self.config.config.log.level);
        info!("configuration reloaded");
    }

    fn report_config_errors(&self, errors: &[config::ConfigError]) {
        for err in errors {
            error!("{err}");
            self.notify(MessageType::ERROR, format!("agent-ls: {err}"));
        }
    }

    /// Sends `window/showMessage` from a task of its own so a slow client never stalls the owner.
    fn notify(&self, typ: MessageType, message: String) {
        let client = self.client.clone();
        tokio::spawn(async move { client.show_message(typ, message).await });
    }
}
