//! The language server: the only module that knows LSP types and JSON-RPC. Data flows one
//! way: stdin → `transport` (frames, parses once) → the `session` (document notifications,
//! in wire order) or tower-lsp (requests, answered from the session's state) → subsystems
//! (`test_runs`, `agent_runs`, `undo`, `rollback`, the store) whose reports come back to the
//! session → the `outbox` → stdout. `agent-ls serve` (`cli::serve::lsp`) starts it with
//! `serve_stdio`; the agent runs themselves are the runtime's `Drive`, which `agent_runs`
//! gives the editor shell of `shell`.
//!
//! No file here imports one that imports it back: the session imports the subsystems, the
//! subsystems share the types below them (`connection`, `refused`, `jobs`), and none imports
//! this file or the session.

pub mod agent_runs;
mod baseline;
pub mod completion;
pub mod connection;
pub mod convert;
pub mod ext;
pub mod git_commands;
mod held;
mod hook_trust;
mod isolation;
pub mod jobs;
mod json_text;
mod lsp318;
mod next_edit;
pub mod outbox;
pub mod refused;
pub mod review_decision;
pub mod review_diagnostics;
pub mod rewind;
pub mod rollback;
mod run_documents;
pub mod session;
mod shell;
mod skills;
pub mod test_runs;
pub mod transport;
pub mod undo;
pub mod workspace_edit;

use std::future::Future;
use std::os::fd::AsFd;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use futures::FutureExt;
use tokio::sync::oneshot;
use tower_lsp_server::jsonrpc::{Error, ErrorCode, Result};
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{LanguageServer, LspService};
use tracing::{error, info};

use agent_ls_core::agent::Route;
use agent_ls_runtime::config;
use agent_ls_runtime::lock::RunLock;
use agent_ls_runtime::logging::LogHandle;
use outbox::Outbox;
use session::{Event, STORE_BUSY, Session, SessionHandle};

/// Straight to fd 1, not through std's line-buffered stdout, which would split every frame
/// into two writes at its header's line break.
fn stdout_writer() -> Box<dyn std::io::Write + Send> {
    match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::io::BufWriter::with_capacity(
            1 << 16,
            std::fs::File::from(fd),
        )),
        Err(_) => Box::new(std::io::stdout()),
    }
}

/// Runs the server on stdin/stdout until `exit`, returning the process exit code the
/// specification asks for: 0 when `shutdown` came first, 1 otherwise.
pub async fn serve_stdio(log: LogHandle) -> i32 {
    let shutdown = Arc::new(AtomicBool::new(false));
    let hooks = std::env::var(ext::TEST_HOOKS_ENV).is_ok_and(|v| v == "1");
    let (outbox, writer) = Outbox::new();
    // stdout is written by one thread, in the outbox's order.
    let stdout = stdout_writer();
    let output = std::thread::Builder::new()
        .name("agent-ls stdout".into())
        .spawn(move || writer.write_blocking(stdout));
    let session = Session::spawn(outbox.clone(), log);
    // tower-lsp is used as a router: its service is called directly, without its own stdio
    // loop, so a request costs no pipe and no second read.
    let extras = Arc::new(OnceLock::new());
    let (service, _client_socket) = LspService::build(|_client| Backend {
        session: session.clone(),
        shutdown: shutdown.clone(),
        hooks,
        completions: Arc::default(),
        extras: extras.clone(),
    })
    .custom_method("textDocument/inlineCompletion", Backend::inline_completion)
    .custom_method(ext::DOCUMENT_STATE, Backend::document_state)
    .custom_method(ext::CONFIGURATION, Backend::configuration)
    .custom_method(ext::EDITOR_DIAGNOSTICS, Backend::editor_diagnostics)
    .custom_method(lsp318::CODE_ACTION_ROUTE, Backend::code_actions)
    .custom_method(run_documents::METHOD, Backend::text_document_content)
    .finish();

    // stdin is read by one thread: each message is parsed once there, document
    // notifications go to the session, and the rest to tower-lsp's router.
    transport::widen_stdin_pipe();
    let (done, ended) = oneshot::channel();
    let input = {
        let (session, outbox) = (session.clone(), outbox.clone());
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("agent-ls stdin".into())
            .spawn(move || {
                let mut router = Router {
                    service,
                    outbox: outbox.clone(),
                    runtime,
                    extras,
                };
                transport::pump_input(
                    std::io::stdin().lock(),
                    |batch| session.send(Event::Notices(batch)),
                    &outbox,
                    |request| router.call(request),
                );
                let _ = done.send(());
            })
    };
    match input {
        Ok(_) => {
            let _ = ended.await;
        }
        Err(e) => error!("cannot start the stdin thread: {e}"),
    }
    if let Ok(Some(store)) = session.query(|s| s.store()).await {
        let _ = tokio::task::spawn_blocking(move || store.flush_blocking()).await;
    }
    // Everything enqueued before `exit` is written, then we stop.
    outbox.close();
    if let Ok(output) = output {
        let _ = tokio::task::spawn_blocking(move || output.join()).await;
    }
    if shutdown.load(Ordering::SeqCst) {
        0
    } else {
        1
    }
}

/// How long agent-ls.status may wait, all waits included: it must answer within 200 ms, and
/// this leaves room for the pipe and a loaded machine.
const STATUS_BUDGET: std::time::Duration = std::time::Duration::from_millis(100);

/// Calls tower-lsp's service for each forwarded message and puts its answer on the outbox.
struct Router {
    service: LspService<Backend>,
    outbox: Outbox,
    runtime: tokio::runtime::Handle,
    /// What `initialize` said of LSP 3.18, for the handlers (`lsp318`).
    extras: Arc<OnceLock<lsp318::ClientExtras>>,
}

impl Router {
    /// Handles one request or notification; `false` after `exit`.
    fn call(&mut self, request: tower_lsp_server::jsonrpc::Request) -> bool {
        use tower_service::Service;
        let method = request.method().to_string();
        let (initialize, exit) = (method == "initialize", method == "exit");
        if initialize {
            let _ = self
                .extras
                .set(lsp318::ClientExtras::from_initialize(request.params()));
        }
        // Served as JSON, which can carry LSP 3.18's fields (`lsp318::CODE_ACTION_ROUTE`).
        let request = if method == "textDocument/codeAction" {
            let (_, id, params) = request.into_parts();
            let mut renamed = tower_lsp_server::jsonrpc::Request::build(lsp318::CODE_ACTION_ROUTE);
            if let Some(id) = id {
                renamed = renamed.id(id);
            }
            if let Some(params) = params {
                renamed = renamed.params(params);
            }
            renamed.finish()
        } else {
            request
        };
        // The service is ready at once, except after `exit`; `initialize` is awaited below
        // before anything else is read, as the protocol asks.
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        if let std::task::Poll::Ready(Err(_)) = self.service.poll_ready(&mut cx) {
            return false;
        }
        let answer = self.service.call(request);
        let outbox = self.outbox.clone();
        let reply = async move {
            match answer.await {
                // The capabilities LSP 3.17's types cannot say (`lsp318`).
                Ok(Some(response)) if initialize => {
                    match serde_json::to_value(&response).map(lsp318::with_server_capabilities) {
                        Ok(body) => outbox.frame(body.to_string().into_bytes()),
                        Err(e) => error!("a response could not be serialised: {e}"),
                    }
                }
                Ok(Some(response)) => match serde_json::to_vec(&response) {
                    Ok(body) => outbox.frame(body),
                    Err(e) => error!("a response could not be serialised: {e}"),
                },
                Ok(None) => {}
                Err(e) => error!("{method}: {e}"),
            }
        };
        if initialize {
            self.runtime.block_on(reply);
        } else {
            self.runtime.spawn(reply);
        }
        !exit
    }
}

struct Backend {
    session: SessionHandle,
    shutdown: Arc<AtomicBool>,
    hooks: bool,
    completions: Arc<completion::Completions>,
    /// What `initialize` said of LSP 3.18 (set by the router before the request is served).
    extras: Arc<OnceLock<lsp318::ClientExtras>>,
}

impl Backend {
    /// `textDocument/inlineCompletion` (docs/completion.md).
    async fn inline_completion(
        &self,
        params: InlineCompletionParams,
    ) -> Result<Option<InlineCompletionResponse>> {
        guarded(
            "textDocument/inlineCompletion",
            self.completions.answer(&self.session, params),
        )
        .await
    }

    async fn document_state(&self, params: ext::DocumentStateParams) -> Result<ext::DocumentState> {
        guarded(ext::DOCUMENT_STATE, async {
            let uri = params.text_document.uri;
            let found = self
                .session
                .query({
                    let uri = uri.clone();
                    move |s| s.document(&uri).map(|b| (b.clone(), s.encoding()))
                })
                .await
                .map_err(internal)?;
            let (buffer, encoding) = found
                .ok_or_else(|| Error::invalid_params(format!("{} is not open", uri.as_str())))?;
            Ok(ext::DocumentState {
                uri,
                version: buffer.version(),
                text: buffer.text(),
                needs_resync: buffer.needs_resync(),
                position_encoding: encoding.as_str().to_string(),
            })
        })
        .await
    }

    /// The editor's forwarded diagnostics of a file, kept by the session for the runs.
    /// `textDocument/codeAction` (routed here by the router: `lsp318::CODE_ACTION_ROUTE`).
    async fn code_actions(&self, params: CodeActionParams) -> Result<LSPAny> {
        guarded("textDocument/codeAction", async {
            // Asked of the session, so the answer follows every change sent before it: a
            // document out of sync with the editor gets no action that would read it.
            let uri = params.text_document.uri.clone();
            let (doc, history) = self
                .session
                .query(move |s| {
                    let doc = s.document(&uri).cloned().map(|b| (b, s.encoding()));
                    (doc, s.history_actions())
                })
                .await
                .map_err(internal)?;
            let out_of_sync = doc.as_ref().is_some_and(|(b, _)| b.needs_resync());
            let mut actions = code_actions(&params, out_of_sync);
            actions.extend(history_actions(history));
            // The predicted next edit, while the file still holds the text it replaces.
            let next = doc.filter(|_| !out_of_sync).and_then(|(b, enc)| {
                self.completions
                    .next
                    .action(&params.text_document.uri, &b, enc)
            });
            actions.extend(next);
            let root = self.root().await?;
            let uri = &params.text_document.uri;
            actions.extend(skills::actions(root.as_deref(), uri));
            let client = self.extras.get().copied().unwrap_or_default();
            Ok(lsp318::wire_actions(actions, client))
        })
        .await
    }

    /// `workspace/textDocumentContent` (LSP 3.18) for `agent-ls:` URIs (`run_documents`).
    async fn text_document_content(
        &self,
        params: lsp318::TextDocumentContentParams,
    ) -> Result<LSPAny> {
        guarded(run_documents::METHOD, async {
            let doc = run_documents::parse(&params.uri)
                .map_err(|e| Error::invalid_params(e.to_string()))?;
            let root = self
                .root()
                .await?
                .ok_or_else(|| refused("agent-ls has no workspace folder"))?;
            let text = tokio::task::spawn_blocking(move || run_documents::read(&root, &doc))
                .await
                .map_err(internal)?
                .map_err(refused)?;
            Ok(serde_json::json!({ "text": text }))
        })
        .await
    }

    async fn editor_diagnostics(&self, params: ext::EditorDiagnosticsParams) {
        self.session.send(Event::EditorDiagnostics(params));
    }

    async fn configuration(&self) -> Result<ext::Configuration> {
        guarded(ext::CONFIGURATION, async {
            // After a reload that is still reading files, the answer is the reloaded state.
            self.session
                .query_ready(|s| {
                    let loaded = s.config();
                    ext::Configuration {
                        entries: loaded
                            .entries()
                            .into_iter()
                            .map(|(key, value, source)| ext::ConfigurationEntry {
                                key,
                                value,
                                source: source.to_string(),
                            })
                            .collect(),
                        errors: s.config_errors().iter().map(|e| e.to_string()).collect(),
                    }
                })
                .await
                .map_err(internal)
        })
        .await
    }

    /// The workspace root, as the session has it.
    async fn root(&self) -> Result<Option<std::path::PathBuf>> {
        let root = self.session.query(|s| s.workspace_root().cloned());
        root.await.map_err(internal)
    }

    fn commands(&self) -> Vec<String> {
        let mut commands: Vec<String> = [
            ext::RUN_COMMAND,
            ext::FIX_TESTS_COMMAND,
            ext::REVIEW_COMMAND,
            ext::ACCEPT_COMMAND,
            ext::REJECT_COMMAND,
            ext::STATUS_COMMAND,
            ext::UNDO_COMMAND,
            ext::REDO_COMMAND,
            ext::RESUME_COMMAND,
            ext::ROLLBACK_COMMAND,
            ext::REWIND_COMMAND,
            ext::COMMIT_COMMAND,
            ext::PR_COMMAND,
            ext::RERUN_TESTS_COMMAND,
            ext::CANCEL_COMMAND,
            ext::COMPLETION_ACCEPTED_COMMAND,
            ext::SKILLS_COMMAND,
            ext::RUN_SKILL_COMMAND,
        ]
        .map(String::from)
        .to_vec();
        if self.hooks {
            commands.push(ext::DEBUG_PANIC_COMMAND.to_string());
        }
        commands
    }

    /// Takes the workspace's run lock off the async threads (it opens a file); refused at
    /// once, naming who holds it, when another run has it.
    async fn lock(&self, goal: &str) -> Result<RunLock> {
        // A review question still waiting does not hold the workspace: it is answered
        // "Keep", and the run it ends frees the lock.
        let (reply, pending) = oneshot::channel();
        self.session.send(Event::EndPendingQuestion(reply));
        if let Ok(Some(ended)) = pending.await {
            let _ = tokio::time::timeout(PENDING_QUESTION_END, ended).await;
        }
        let root = self
            .session
            .query(|s| s.workspace_root().cloned())
            .await
            .map_err(internal)?
            .ok_or_else(|| refused("agent-ls needs a workspace folder"))?;
        let goal = goal.to_string();
        tokio::task::spawn_blocking(move || RunLock::acquire(&root, &goal))
            .await
            .map_err(internal)?
            .map_err(refused)
    }

    /// agent-ls.commit and agent-ls.pr, done on this request's task.
    async fn git_command(&self, pr: bool, run: Option<String>) -> Result<serde_json::Value> {
        let cx = self
            .session
            .query(|s| s.git_context())
            .await
            .map_err(internal)?
            .ok_or_else(|| refused("agent-ls needs a workspace folder and its store for git"))?;
        let done = if pr {
            git_commands::pr(cx, run).await
        } else {
            git_commands::commit(cx, run).await
        };
        done.map_err(refused)
    }

    /// agent-ls.status: the session's view and the interrupted runs, which the store knows.
    /// It answers within `STATUS_BUDGET` whatever the store does: the session's own state
    /// always, and what the store did not give in time marked "unknown (store busy)" (another
    /// process may hold its write lock, and our writes queue behind it).
    async fn status(&self) -> Result<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + STATUS_BUDGET;
        let (store, active) = self
            .session
            .query(|s| (s.store(), s.active_run()))
            .await
            .map_err(internal)?;
        // The steps need the history read from the store, and the interrupted runs need the
        // store: both are asked at once, and neither is waited for past the deadline.
        let state = async {
            let ready = self.session.query_ready(|s| s.agent_status());
            match tokio::time::timeout_at(deadline, ready).await {
                Ok(answer) => answer,
                Err(_) => self.session.query(|s| s.agent_status()).await,
            }
        };
        let interrupted = async {
            let Some(store) = store else {
                return Some(Vec::new());
            };
            let read = store.call(move |s| s.interrupted_runs(active.as_deref()));
            match tokio::time::timeout_at(deadline, read).await {
                Ok(answer) => Some(
                    answer
                        .and_then(|r| r.map_err(|e| error!("{e}")).ok())
                        .unwrap_or_default(),
                ),
                Err(_) => None,
            }
        };
        let (status, interrupted) = tokio::join!(state, interrupted);
        let mut status = status.map_err(internal)?;
        if interrupted.is_none() {
            info!("status: the store did not answer in time");
            status["interrupted_unknown"] = STORE_BUSY.into();
        }
        status["interrupted"] =
            serde_json::to_value(interrupted.unwrap_or_default()).map_err(internal)?;
        Ok(status)
    }

    async fn undo(&self, redo: bool, step: Option<u64>) -> Result<u64> {
        let what = if redo { "redo" } else { "undo" };
        let lock = self.lock(&format!("{what} an agent step")).await?;
        let (reply, answer) = oneshot::channel();
        self.session.send(Event::Undo {
            redo,
            step,
            lock,
            reply,
        });
        answer.await.map_err(internal)?.map_err(refused)
    }

    /// Rolls a run back to its git checkpoint; answers once the files are back, or with the
    /// files that changed since the run (a refusal the client may confirm with `force`).
    async fn rollback(&self, args: rollback::RollbackArgs) -> Result<serde_json::Value> {
        let what = match &args.run {
            Some(run) => format!("roll back run {run}"),
            None => "roll back the latest run".to_string(),
        };
        let lock = self.lock(&what).await?;
        let (reply, answer) = oneshot::channel();
        self.session.send(Event::Rollback { args, lock, reply });
        answer.await.map_err(internal)?.map_err(refused)
    }

    /// Takes a run back to a step and starts the instruction from there; answers once the
    /// new run has started, or with why nothing was rewound.
    async fn rewind(&self, args: rewind::RewindArgs) -> Result<serde_json::Value> {
        let lock = self.lock(&format!("rewind to step {}", args.step)).await?;
        let (reply, answer) = oneshot::channel();
        self.session.send(Event::Rewind { args, lock, reply });
        answer.await.map_err(internal)?.map_err(refused)
    }

    async fn start_run(&self, args: agent_runs::RunArgs) -> Result<serde_json::Value> {
        // A goal that names one of the commands is done without a model. A goal about a
        // selection is always for the agent.
        let route = if args.range.is_some() {
            Route::Agent
        } else {
            agent_ls_core::agent::route(&args.goal)
        };
        match route {
            Route::Undo(step) => {
                let id = self.undo(false, step).await?;
                return Ok(serde_json::json!({"routed": "agent-ls.undo", "step": id}));
            }
            Route::Redo => {
                let id = self.undo(true, None).await?;
                return Ok(serde_json::json!({"routed": "agent-ls.redo", "step": id}));
            }
            Route::Status => {
                return Ok(
                    serde_json::json!({"routed": "agent-ls.status", "status": self.status().await?}),
                );
            }
            Route::Command(argv) => {
                let line = agent_ls_core::agent::command_line(&argv);
                self.session.send(Event::RunTests {
                    reason: "command".into(),
                    command: Some(argv),
                });
                return Ok(serde_json::json!({"routed": "command", "command": line}));
            }
            Route::Agent => {}
        }
        let lock = self.lock(&args.goal).await?;
        // The run goes on in the background; the command answers at once.
        let (reply, answer) = oneshot::channel();
        self.session.send(Event::StartRun { args, lock, reply });
        answer.await.map_err(internal)?.map_err(refused)
    }

    async fn resume(&self, run_id: String) -> Result<serde_json::Value> {
        let (store, active) = self
            .session
            .query(|s| (s.store(), s.active_run()))
            .await
            .map_err(internal)?;
        let store =
            store.ok_or_else(|| refused("no store in this workspace, so no run to resume"))?;
        let (goal, checkpoint) = {
            let run_id = run_id.clone();
            store
                .call(move |s| agent_ls_runtime::drive::resume_point(s, &run_id, active.as_deref()))
                .await
                .ok_or_else(|| refused("the store could not be opened"))?
                .map_err(refused)?
        };
        let lock = self.lock(&goal).await?;
        let (reply, answer) = oneshot::channel();
        self.session.send(Event::Resume {
            run_id,
            goal,
            checkpoint: checkpoint.map(Box::new),
            lock,
            reply,
        });
        let id = answer.await.map_err(internal)?.map_err(refused)?;
        Ok(serde_json::json!({"run_id": id}))
    }
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        guarded("initialize", async {
            // The configuration is read here, off the session's task: it reads files.
            let mut inputs = config::Inputs::from_process(convert::workspace_root(&params));
            let mut options = params.initialization_options.clone();
            if let Some(trust) = options.as_mut().and_then(config::take_workspace_trust) {
                inputs.workspace_trust = trust;
            }
            inputs.initialization_options = options;
            let (inputs, loaded) = tokio::task::spawn_blocking(move || {
                let loaded = config::load(&inputs);
                (inputs, loaded)
            })
            .await
            .map_err(internal)?;
            let completion = loaded.config.completion.is_on();
            let (reply, answer) = oneshot::channel();
            self.session.send(Event::Initialize {
                params: Box::new(params),
                inputs: Box::new(inputs),
                loaded: Box::new(loaded),
                reply,
            });
            let encoding = answer.await.map_err(internal)?;
            // Advertised only when a completion model is configured; a reload that turns it
            // on takes effect at the next start, one that turns it off answers empty lists
            // (docs/completion.md).
            let inline_completion_provider = completion.then_some(OneOf::Left(true));
            Ok(InitializeResult {
                capabilities: ServerCapabilities {
                    position_encoding: Some(convert::encoding_to_lsp(encoding)),
                    text_document_sync: Some(TextDocumentSyncCapability::Options(
                        TextDocumentSyncOptions {
                            open_close: Some(true),
                            change: Some(TextDocumentSyncKind::INCREMENTAL),
                            save: Some(TextDocumentSyncSaveOptions::SaveOptions(SaveOptions {
                                include_text: Some(false),
                            })),
                            ..Default::default()
                        },
                    )),
                    code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
                    inline_completion_provider,
                    execute_command_provider: Some(ExecuteCommandOptions {
                        commands: self.commands(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                server_info: Some(ServerInfo {
                    name: "agent-ls".into(),
                    version: Some(env!("CARGO_PKG_VERSION").into()),
                }),
                offset_encoding: None,
            })
        })
        .await
    }

    async fn initialized(&self, _: InitializedParams) {
        info!("client initialized");
        self.session.send(Event::Initialized);
    }

    async fn shutdown(&self) -> Result<()> {
        guarded("shutdown", async {
            self.shutdown.store(true, Ordering::SeqCst);
            info!("shutdown requested");
            // What the store was sent is written before the client is told it may stop us.
            if let Ok(Some(store)) = self.session.query(|s| s.store()).await {
                let _ = tokio::task::spawn_blocking(move || store.flush_blocking()).await;
            }
            Ok(())
        })
        .await
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> Result<Option<LSPAny>> {
        guarded("workspace/executeCommand", async {
            let (command, first) = (params.command.as_str(), params.arguments.first());
            // One arm a command: each parses its argument and hands the work on, so the match
            // reads as the list of commands.
            match command {
                ext::RUN_COMMAND => self.start_run(run_args(first)?).await.map(Some),
                ext::FIX_TESTS_COMMAND => {
                    let args = agent_runs::RunArgs {
                        goal: "fix the failing tests".into(),
                        ..Default::default()
                    };
                    self.start_run(args).await.map(Some)
                }
                ext::REVIEW_COMMAND => {
                    let args = review_args(first.cloned())?;
                    self.start_run(args).await.map(Some)
                }
                ext::ACCEPT_COMMAND | ext::REJECT_COMMAND => {
                    self.session
                        .send(Event::Decision(command == ext::ACCEPT_COMMAND));
                    Ok(Some(serde_json::json!({"sent": true})))
                }
                ext::UNDO_COMMAND | ext::REDO_COMMAND => {
                    let redo = command == ext::REDO_COMMAND;
                    let id = self.undo(redo, step_arg(command, first)?).await?;
                    Ok(Some(serde_json::json!({"step": id})))
                }
                ext::RESUME_COMMAND => self.resume(resume_arg(first)?).await.map(Some),
                ext::ROLLBACK_COMMAND => self.rollback(rollback_args(first)?).await.map(Some),
                ext::REWIND_COMMAND => self.rewind(rewind::args(first)?).await.map(Some),
                ext::COMMIT_COMMAND | ext::PR_COMMAND => {
                    let pr = command == ext::PR_COMMAND;
                    let run = run_arg(command, first)?;
                    self.git_command(pr, run).await.map(Some)
                }
                ext::STATUS_COMMAND => self.status().await.map(Some),
                ext::RERUN_TESTS_COMMAND => {
                    // The run goes on in the background; its end arrives as agent-ls/testStatus.
                    self.session.send(Event::RunTests {
                        reason: "command".into(),
                        command: None,
                    });
                    Ok(Some(serde_json::json!({"started": true})))
                }
                ext::CANCEL_COMMAND => {
                    self.session.send(Event::CancelAll);
                    Ok(Some(serde_json::json!({"cancelled": true})))
                }
                ext::COMPLETION_ACCEPTED_COMMAND => {
                    let id = first.and_then(|v| v.get("id")).and_then(|v| v.as_u64());
                    let id = id.ok_or_else(|| {
                        Error::invalid_params("agent-ls.completionAccepted takes {\"id\": N}")
                    })?;
                    self.completions.accepted(self.root().await?.as_deref(), id);
                    Ok(Some(serde_json::json!({"recorded": true})))
                }
                ext::SKILLS_COMMAND => Ok(Some(skills::list(self.root().await?.as_deref()))),
                ext::RUN_SKILL_COMMAND => {
                    let args = skills::run_args(self.root().await?.as_deref(), first)?;
                    self.start_run(args).await.map(Some)
                }
                ext::DEBUG_PANIC_COMMAND if self.hooks => {
                    panic!("deliberate panic from {}", ext::DEBUG_PANIC_COMMAND)
                }
                other => Err(Error::invalid_params(format!("unknown command `{other}`"))),
            }
        })
        .await
    }
}

/// `agent-ls.run`'s argument: `{goal, uri?, range?, agent?, reproduce?}`.
fn run_args(first: Option<&serde_json::Value>) -> Result<agent_runs::RunArgs> {
    let first = first.cloned().unwrap_or(serde_json::Value::Null);
    serde_json::from_value(first).map_err(|e| {
        Error::invalid_params(format!("agent-ls.run takes {{goal, uri?, range?}}: {e}"))
    })
}

/// `agent-ls.undo`'s and `agent-ls.redo`'s argument: none, or `{"step": id}` (undo only).
fn step_arg(command: &str, first: Option<&serde_json::Value>) -> Result<Option<u64>> {
    let step = match first {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(v.get("step").and_then(|s| s.as_u64()).ok_or_else(|| {
            Error::invalid_params(format!("{command} takes no argument or {{\"step\": id}}"))
        })?),
    };
    if step.is_some() && command == ext::REDO_COMMAND {
        return Err(Error::invalid_params(
            "agent-ls.redo re-applies the latest undone step; it takes no step",
        ));
    }
    Ok(step)
}

/// `agent-ls.resume`'s argument: `{"run_id": id}`.
fn resume_arg(first: Option<&serde_json::Value>) -> Result<String> {
    first
        .and_then(|v| v.get("run_id"))
        .and_then(|v| v.as_str())
        .map(String::from)
        .ok_or_else(|| {
            Error::invalid_params(
                "agent-ls.resume takes {\"run_id\": id} (agent-ls.status lists interrupted runs)",
            )
        })
}

/// `agent-ls.rollback`'s argument: none, or `{run?, force?}`.
fn rollback_args(first: Option<&serde_json::Value>) -> Result<rollback::RollbackArgs> {
    match first {
        None | Some(serde_json::Value::Null) => Ok(Default::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            Error::invalid_params(format!("agent-ls.rollback takes {{run?, force?}}: {e}"))
        }),
    }
}

/// `agent-ls.commit`'s and `agent-ls.pr`'s argument: none, or `{"run": id}`.
fn run_arg(command: &str, first: Option<&serde_json::Value>) -> Result<Option<String>> {
    match first.map(|v| v.get("run")) {
        None | Some(None | Some(serde_json::Value::Null)) => Ok(None),
        Some(Some(serde_json::Value::String(r))) => Ok(Some(r.clone())),
        Some(Some(_)) => Err(Error::invalid_params(format!(
            "{command} takes no argument or {{\"run\": id}}"
        ))),
    }
}

/// `agent-ls.review`'s argument as a run that reviews that change and does nothing else.
fn review_args(first: Option<serde_json::Value>) -> Result<agent_runs::RunArgs> {
    use agent_ls_runtime::drive::ReviewTarget;
    let target: ReviewTarget = serde_json::from_value(first.unwrap_or_default()).map_err(|e| {
        Error::invalid_params(format!(
            "agent-ls.review takes nothing, {{\"staged\": true}}, {{\"base\": REV}} or {{\"run\": RUN_ID}}: {e}"
        ))
    })?;
    let goal = match &target {
        ReviewTarget::Uncommitted => "review the uncommitted changes".to_string(),
        ReviewTarget::Staged => "review the staged changes".to_string(),
        ReviewTarget::Base(rev) => format!("review the changes since {rev}"),
        ReviewTarget::Run(id) => format!("review the change of {id}"),
    };
    Ok(agent_runs::RunArgs {
        goal,
        review: Some(target),
        ..Default::default()
    })
}

/// The code action that has the tester reproduce a selection's bug with a test first.
const WRITE_FAILING_TEST: &str = "Agent: write a failing test for this";

/// The agent's code actions: fix a diagnostic; explain, review, write a failing test for,
/// implement or refactor a selection; and the source action that fixes the failing tests.
/// Each runs `agent-ls.run`.
fn code_actions(params: &CodeActionParams, out_of_sync: bool) -> CodeActionResponse {
    let uri = &params.text_document.uri;
    let mut out = Vec::new();
    if !out_of_sync {
        out.extend(fix_actions(uri, &params.context.diagnostics));
        let r = params.range;
        if r.start != r.end {
            out.extend(selection_actions(uri, r));
        }
    }
    out.push(agent_action(
        uri,
        "Agent: fix failing tests",
        Some(CodeActionKind::new("source.agent-ls.fixTests")),
        "fix the failing tests".into(),
        (None, None),
    ));
    out
}

/// "Agent: Undo" and "Agent: Commit" (`Session::history_actions`): a client with no
/// add-on has no other way to run these commands (eglot 1.9 has no command to run a server's
/// command).
fn history_actions((undo, commit): (bool, bool)) -> Vec<CodeActionOrCommand> {
    let action = |title: &str, command: &str| {
        CodeActionOrCommand::CodeAction(CodeAction {
            title: title.into(),
            command: Some(Command {
                title: title.into(),
                command: command.into(),
                arguments: None,
            }),
            ..CodeAction::default()
        })
    };
    let mut out = Vec::new();
    if undo {
        out.push(action("Agent: Undo", ext::UNDO_COMMAND));
    }
    if commit {
        out.push(action("Agent: Commit", ext::COMMIT_COMMAND));
    }
    out
}

/// "Agent: fix this" for each error among the diagnostics at the cursor.
fn fix_actions(uri: &Uri, diagnostics: &[Diagnostic]) -> Vec<CodeActionOrCommand> {
    let mut out = Vec::new();
    for d in diagnostics {
        if d.severity.is_some_and(|s| s != DiagnosticSeverity::ERROR) {
            continue;
        }
        let what = match (d.source.as_deref(), &d.code) {
            (Some(test_runs::SOURCE), Some(NumberOrString::String(test))) => {
                format!("test failure of {test}")
            }
            (Some(test_runs::SOURCE), _) => "test failure".to_string(),
            _ => "error".to_string(),
        };
        let mut fix = agent_action(
            uri,
            "Agent: fix this",
            Some(CodeActionKind::QUICKFIX),
            format!(
                "Fix this {what} at line {}: {}",
                d.range.start.line + 1,
                d.message
            ),
            (Some(d.range), Some(vec![d.clone()])),
        );
        // The fix of the failure under the cursor is what a client applies on its own
        // (eglot's and VS Code's "preferred" quick fix).
        if let CodeActionOrCommand::CodeAction(a) = &mut fix {
            a.is_preferred = Some(out.is_empty());
        }
        out.push(fix);
    }
    out
}

/// The actions on a selection. The actions that only read come first: a client that takes
/// the first action on a keypress must not start an edit run on a selection by accident.
fn selection_actions(uri: &Uri, r: Range) -> Vec<CodeActionOrCommand> {
    [
        ("Agent: explain", None, "Explain the selected code"),
        (
            "Agent: review",
            None,
            "Review the selected code: bugs first, then risks, missing tests and unclear names",
        ),
        (
            WRITE_FAILING_TEST,
            None,
            "The selected code has a bug: write a test that fails because of it, then fix it",
        ),
        (
            "Agent: implement",
            Some(CodeActionKind::REFACTOR_REWRITE),
            "Implement the selected code",
        ),
        (
            "Agent: refactor",
            Some(CodeActionKind::REFACTOR),
            "Refactor the selected code, keeping its behaviour",
        ),
    ]
    .into_iter()
    .map(|(title, kind, goal)| agent_action(uri, title, kind, goal.into(), (Some(r), None)))
    .collect()
}

/// A code action that runs `agent-ls.run` for `goal`, on `range` when given, fixing the
/// `diagnostics` given.
fn agent_action(
    uri: &Uri,
    title: &str,
    kind: Option<CodeActionKind>,
    goal: String,
    (range, diagnostics): (Option<Range>, Option<Vec<Diagnostic>>),
) -> CodeActionOrCommand {
    let mut args = serde_json::json!({"goal": goal, "uri": uri, "range": range});
    // The review action names its agent; the others run the default one.
    if title == "Agent: review" {
        args["agent"] = "review".into();
    }
    // The tester shows the bug with a test before the coder fixes it (docs/tester.md).
    if title == WRITE_FAILING_TEST {
        args["reproduce"] = true.into();
    }
    CodeActionOrCommand::CodeAction(CodeAction {
        title: title.into(),
        // Explain, review and write-a-test fit no kind of LSP's: they have none rather than
        // `""`, which no client can filter on.
        kind,
        diagnostics,
        command: Some(Command {
            title: title.into(),
            command: ext::RUN_COMMAND.into(),
            arguments: Some(vec![args]),
        }),
        ..CodeAction::default()
    })
}

/// Runs a request handler so that a panic inside it answers that request with an internal
/// error instead of taking the server down.
async fn guarded<T>(method: &str, handler: impl Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = jobs::panic_message(&panic);
            error!("{method} panicked: {message}");
            Err(Error {
                code: ErrorCode::InternalError,
                message: format!("agent-ls failed while handling {method}: {message}").into(),
                data: None,
            })
        }
    }
}

/// How long a command waits for a run to end once it answered the run's review question
/// (the run records the decision, then ends).
const PENDING_QUESTION_END: std::time::Duration = std::time::Duration::from_secs(10);

/// LSP's RequestFailed: the request was valid but failed. JSON-RPC's -32600 is for messages
/// that are not requests at all, and a client may treat it as its own bug.
const REQUEST_FAILED: i64 = -32803;

/// A request the server will not do, with why (a run in progress, nothing to undo, ...).
fn refused(why: impl std::fmt::Display) -> Error {
    Error {
        code: ErrorCode::ServerError(REQUEST_FAILED),
        message: why.to_string().into(),
        data: None,
    }
}

fn internal(err: impl std::fmt::Display) -> Error {
    Error {
        code: ErrorCode::InternalError,
        message: err.to_string().into(),
        data: None,
    }
}
