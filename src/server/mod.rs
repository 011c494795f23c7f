//! The language server: the only module that knows LSP types and JSON-RPC. It wires the
//! transport to the session owner and answers requests from snapshots of the session.

pub mod agent_runs;
pub mod convert;
pub mod ext;
mod ordered;
pub mod session;
pub mod test_runs;
pub mod transport;
pub mod workspace_edit;

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tower_lsp_server::jsonrpc::{Error, ErrorCode, Result};
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{Client, LanguageServer, LspService, Server};
use tracing::{error, info};

use crate::config;
use crate::logging::LogHandle;
use session::{Event, Session, SessionHandle};

/// Runs the server on stdin/stdout until `exit`, returning the process exit code the
/// specification asks for: 0 when `shutdown` came first, 1 otherwise.
pub async fn serve_stdio(log: LogHandle) -> i32 {
    let shutdown = Arc::new(AtomicBool::new(false));
    let hooks = std::env::var(ext::TEST_HOOKS_ENV).is_ok_and(|v| v == "1");
    let inputs = config::Inputs::from_process(None);
    let (service, socket) = LspService::build(|client| {
        let session = Session::new(client.clone(), log, inputs).spawn();
        Backend {
            client,
            session,
            shutdown: shutdown.clone(),
            hooks,
        }
    })
    .custom_method(ext::DOCUMENT_STATE, Backend::document_state)
    .custom_method(ext::CONFIGURATION, Backend::configuration)
    .finish();
    let session = service.inner().session.clone();
    let service = ordered::Ordered::new(service, session);
    let (server_in, client_in) = tokio::io::duplex(1 << 20);
    let (server_out, client_out) = tokio::io::duplex(1 << 20);
    let (replies, replies_rx) = mpsc::unbounded_channel();
    tokio::spawn(transport::pump_input(
        tokio::io::stdin(),
        client_in,
        replies,
    ));
    let output = tokio::spawn(transport::pump_output(
        client_out,
        replies_rx,
        tokio::io::stdout(),
    ));
    Server::new(server_in, server_out, socket)
        .serve(service)
        .await;
    let _ = output.await;
    if shutdown.load(Ordering::SeqCst) {
        0
    } else {
        1
    }
}

struct Backend {
    #[allow(dead_code)]
    client: Client,
    session: SessionHandle,
    shutdown: Arc<AtomicBool>,
    hooks: bool,
}

impl Backend {
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

    async fn configuration(&self) -> Result<ext::Configuration> {
        guarded(ext::CONFIGURATION, async {
            self.session
                .query(|s| {
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

    fn commands(&self) -> Vec<String> {
        let mut commands: Vec<String> = [
            ext::RUN_COMMAND,
            ext::FIX_TESTS_COMMAND,
            ext::ACCEPT_COMMAND,
            ext::REJECT_COMMAND,
            ext::STATUS_COMMAND,
            ext::UNDO_COMMAND,
            ext::REDO_COMMAND,
            ext::RESUME_COMMAND,
            ext::RERUN_TESTS_COMMAND,
            ext::CANCEL_COMMAND,
        ]
        .map(String::from)
        .to_vec();
        if self.hooks {
            commands.push(ext::DEBUG_PANIC_COMMAND.to_string());
        }
        commands
    }
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        guarded("initialize", async {
            let (reply, answer) = oneshot::channel();
            self.session.send(Event::Initialize {
                params: Box::new(params),
                reply,
            });
            let encoding = answer.await.map_err(internal)?;
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
    }

    async fn shutdown(&self) -> Result<()> {
        self.shutdown.store(true, Ordering::SeqCst);
        info!("shutdown requested");
        Ok(())
    }

    async fn code_action(&self, params: CodeActionParams) -> Result<Option<CodeActionResponse>> {
        guarded("textDocument/codeAction", async {
            Ok(Some(code_actions(&params)))
        })
        .await
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> Result<Option<LSPAny>> {
        guarded("workspace/executeCommand", async {
            match params.command.as_str() {
                ext::RUN_COMMAND | ext::FIX_TESTS_COMMAND => {
                    let args: agent_runs::RunArgs = if params.command == ext::FIX_TESTS_COMMAND {
                        agent_runs::RunArgs {
                            goal: "fix the failing tests".into(),
                            ..Default::default()
                        }
                    } else {
                        let first = params
                            .arguments
                            .first()
                            .cloned()
                            .unwrap_or(serde_json::Value::Null);
                        serde_json::from_value(first).map_err(|e| {
                            Error::invalid_params(format!(
                                "agent-ls.run takes {{goal, uri?, range?}}: {e}"
                            ))
                        })?
                    };
                    // The run goes on in the background; the command answers at once.
                    let (reply, answer) = oneshot::channel();
                    self.session.send(Event::StartRun { args, reply });
                    match answer.await.map_err(internal)? {
                        Ok(answer) => Ok(Some(answer)),
                        Err(why) => Err(Error::invalid_request().tap_message(why)),
                    }
                }
                ext::ACCEPT_COMMAND | ext::REJECT_COMMAND => {
                    self.session
                        .send(Event::Decision(params.command == ext::ACCEPT_COMMAND));
                    Ok(Some(serde_json::json!({"sent": true})))
                }
                ext::UNDO_COMMAND | ext::REDO_COMMAND => {
                    let step = match params.arguments.first() {
                        None | Some(serde_json::Value::Null) => None,
                        Some(v) => Some(v.get("step").and_then(|s| s.as_u64()).ok_or_else(
                            || {
                                Error::invalid_params(format!(
                                    "{} takes no argument or {{\"step\": id}}",
                                    params.command
                                ))
                            },
                        )?),
                    };
                    if step.is_some() && params.command == ext::REDO_COMMAND {
                        return Err(Error::invalid_params(
                            "agent-ls.redo re-applies the latest undone step; it takes no step",
                        ));
                    }
                    let (reply, answer) = oneshot::channel();
                    self.session.send(Event::Undo {
                        redo: params.command == ext::REDO_COMMAND,
                        step,
                        reply,
                    });
                    match answer.await.map_err(internal)? {
                        Ok(step) => Ok(Some(serde_json::json!({"step": step}))),
                        Err(why) => Err(Error::invalid_request().tap_message(why)),
                    }
                }
                ext::RESUME_COMMAND => {
                    let run_id = params
                        .arguments
                        .first()
                        .and_then(|v| v.get("run_id"))
                        .and_then(|v| v.as_str())
                        .map(String::from)
                        .ok_or_else(|| {
                            Error::invalid_params(
                                "agent-ls.resume takes {\"run_id\": id} (agent-ls.status lists interrupted runs)",
                            )
                        })?;
                    let (reply, answer) = oneshot::channel();
                    self.session.send(Event::Resume { run_id, reply });
                    match answer.await.map_err(internal)? {
                        Ok(run_id) => Ok(Some(serde_json::json!({"run_id": run_id}))),
                        Err(why) => Err(Error::invalid_request().tap_message(why)),
                    }
                }
                ext::STATUS_COMMAND => {
                    let status = self
                        .session
                        .query(|s| s.agent_status())
                        .await
                        .map_err(internal)?;
                    Ok(Some(status))
                }
                ext::RERUN_TESTS_COMMAND => {
                    // The run goes on in the background; its end arrives as agent-ls/testStatus.
                    self.session.send(Event::RunTests {
                        reason: "command".into(),
                    });
                    Ok(Some(serde_json::json!({"started": true})))
                }
                ext::CANCEL_COMMAND => {
                    self.session.send(Event::CancelTests);
                    Ok(Some(serde_json::json!({"cancelled": true})))
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

/// The agent's code actions: fix a diagnostic; implement, refactor or explain a selection;
/// and the source action that fixes the failing tests. Each runs `agent-ls.run`.
fn code_actions(params: &CodeActionParams) -> CodeActionResponse {
    let uri = &params.text_document.uri;
    let action = |title: &str,
                  kind: CodeActionKind,
                  goal: String,
                  range: Option<Range>,
                  diagnostics: Option<Vec<Diagnostic>>| {
        CodeActionOrCommand::CodeAction(CodeAction {
            title: title.into(),
            kind: Some(kind),
            diagnostics,
            command: Some(Command {
                title: title.into(),
                command: ext::RUN_COMMAND.into(),
                arguments: Some(vec![
                    serde_json::json!({"goal": goal, "uri": uri, "range": range}),
                ]),
            }),
            ..CodeAction::default()
        })
    };
    let mut out = Vec::new();
    for d in &params.context.diagnostics {
        if d.severity.is_some_and(|s| s != DiagnosticSeverity::ERROR) {
            continue;
        }
        let what = match d.source.as_deref() {
            Some(test_runs::SOURCE) => "test failure",
            _ => "error",
        };
        out.push(action(
            "Agent: fix this",
            CodeActionKind::QUICKFIX,
            format!(
                "Fix this {what} at line {}: {}",
                d.range.start.line + 1,
                d.message
            ),
            Some(d.range),
            Some(vec![d.clone()]),
        ));
    }
    let r = params.range;
    if r.start != r.end {
        out.push(action(
            "Agent: implement",
            CodeActionKind::REFACTOR_REWRITE,
            "Implement the selected code".into(),
            Some(r),
            None,
        ));
        out.push(action(
            "Agent: refactor",
            CodeActionKind::REFACTOR,
            "Refactor the selected code, keeping its behaviour".into(),
            Some(r),
            None,
        ));
        out.push(action(
            "Agent: explain",
            CodeActionKind::EMPTY,
            "Explain the selected code".into(),
            Some(r),
            None,
        ));
    }
    out.push(action(
        "Agent: fix failing tests",
        CodeActionKind::new("source.agent-ls.fixTests"),
        "fix the failing tests".into(),
        None,
        None,
    ));
    out
}

/// Runs a request handler so that a panic inside it answers that request with an internal
/// error instead of taking the server down.
async fn guarded<T>(method: &str, handler: impl Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic_message(&panic);
            error!("{method} panicked: {message}");
            Err(Error {
                code: ErrorCode::InternalError,
                message: format!("agent-ls failed while handling {method}: {message}").into(),
                data: None,
            })
        }
    }
}

pub(crate) fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

trait WithMessage {
    fn tap_message(self, message: String) -> Error;
}

impl WithMessage for Error {
    fn tap_message(mut self, message: String) -> Error {
        self.message = message.into();
        self
    }
}

fn internal(err: impl std::fmt::Display) -> Error {
    Error {
        code: ErrorCode::InternalError,
        message: err.to_string().into(),
        data: None,
    }
}
