//! `agent-ls acp`: the Agent Client Protocol over stdio (the `agent-client-protocol` crate), so
//! Zed, JetBrains and Neovim plugins (CodeCompanion, avante) drive the same loop as `serve` and
//! `run`, through the same driver: only this shell differs. Like `src/lsp/` for LSP, only
//! this module knows ACP's types.
//!
//! A prompt starts a run in the session's folder. The run streams `session/update`s (the
//! model's text as thoughts, the plan, the tools it calls, each proposed change as an edit
//! tool call with its diffs, each test run as an execute tool call), asks
//! `session/request_permission` before every change, reads and writes through the client's
//! `fs/*` methods when it offers them, and ends with the answer. `session/cancel` stops it;
//! `/undo`, `/redo`, `/rollback`, `/rerun`, `/status`, `/commit` and `/test BUG` (reproduce the
//! bug with a test first, docs/tester.md) are the session's commands; `session/load` shows a
//! recorded run and goes on with it when it was interrupted.

mod output;
mod rollback;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    self, AgentCapabilities, AvailableCommand, AvailableCommandsUpdate, CancelNotification,
    ContentBlock, ContentChunk, Diff, InitializeRequest, InitializeResponse, LoadSessionRequest,
    LoadSessionResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, PromptRequest,
    PromptResponse, ReadTextFileRequest, RequestPermissionOutcome, RequestPermissionRequest,
    SessionNotification, SessionUpdate, StopReason, ToolCall, ToolCallContent, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, WriteTextFileRequest,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Stdio};
use tokio_util::sync::CancellationToken;

use agent_ls_core::agent::RunStatus;
use agent_ls_core::edit::{FileChange, FileText, Limits};
use agent_ls_core::events::{LiveEvent, RunEvent};
use agent_ls_runtime::config::{self, Config, McpServerConfig};
use agent_ls_runtime::drive::{self, ApplyError, Drive, Shell, Verdict};
use agent_ls_runtime::model::Models;
use agent_ls_runtime::store::{Store, StoreThread};
use agent_ls_runtime::tests_run::{RunError, RunResult};
use agent_ls_runtime::trust::Review;
use agent_ls_runtime::trust::sandbox::Sandbox;

/// What the client said it can do.
#[derive(Debug, Clone, Copy, Default)]
struct ClientFs {
    read: bool,
    write: bool,
}

struct Session {
    root: PathBuf,
    /// The session's own MCP servers (`mcpServers` of session/new), beside the configured ones.
    mcp: Vec<(String, McpServerConfig)>,
    cancel: Option<CancellationToken>,
    last_goal: Option<String>,
    /// The untrusted folder's ignored settings were told in a prompt turn.
    told_trust: bool,
}

#[derive(Clone, Default)]
struct State {
    fs: Arc<Mutex<ClientFs>>,
    sessions: Arc<Mutex<HashMap<String, Session>>>,
}

fn commands() -> Vec<AvailableCommand> {
    vec![
        AvailableCommand::new("undo", "Undo the latest agent step (or /undo N)"),
        AvailableCommand::new("redo", "Redo the step undone last"),
        AvailableCommand::new(
            "rollback",
            "Roll the latest run (or /rollback RUN) back whole from its git checkpoint; /rollback force even over later edits",
        ),
        AvailableCommand::new("rerun", "Run the last goal again"),
        AvailableCommand::new(
            "test",
            "/test BUG: write a test that fails for the bug first (kept only if it does), then fix it",
        ),
        AvailableCommand::new("status", "The recent runs of this folder"),
        AvailableCommand::new(
            "commit",
            "Commit the latest run's own files as you (or /commit RUN), with a Co-authored-by: agent-ls trailer",
        ),
    ]
}

fn notify(conn: &ConnectionTo<Client>, session: &str, update: SessionUpdate) {
    if let Err(e) = conn.send_notification(SessionNotification::new(session.to_string(), update)) {
        tracing::debug!("a session update was not sent: {e}");
    }
}

fn text_chunk(text: impl Into<String>) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text.into()))
}

/// The stdio MCP servers a client passed with a session, as our configuration names them.
fn session_mcp(servers: &[schema::McpServer]) -> Vec<(String, McpServerConfig)> {
    servers
        .iter()
        .filter_map(|s| match s {
            schema::McpServer::Stdio(s) => Some((
                s.name.clone(),
                McpServerConfig {
                    command: s.command.display().to_string(),
                    args: s.args.clone(),
                    env: s
                        .env
                        .iter()
                        .map(|e| (e.name.clone(), e.value.clone()))
                        .collect(),
                },
            )),
            _ => None,
        })
        .collect()
}

/// Serves ACP on stdin and stdout until the client goes away.
pub async fn serve() -> anyhow::Result<()> {
    let state = State::default();
    let (s1, s2, s3, s4, s5) = (
        state.clone(),
        state.clone(),
        state.clone(),
        state.clone(),
        state.clone(),
    );
    Agent
        .v1()
        .name("agent-ls")
        .on_receive_request(
            async move |req: InitializeRequest,
                        responder: Responder<InitializeResponse>,
                        _conn: ConnectionTo<Client>| {
                if let Ok(mut fs) = s1.fs.lock() {
                    fs.read = req.client_capabilities.fs.read_text_file;
                    fs.write = req.client_capabilities.fs.write_text_file;
                }
                responder.respond(
                    InitializeResponse::new(req.protocol_version)
                        .agent_capabilities(AgentCapabilities::new().load_session(true))
                        .agent_info(schema::Implementation::new(
                            "agent-ls",
                            env!("CARGO_PKG_VERSION"),
                        )),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest,
                        responder: Responder<NewSessionResponse>,
                        conn: ConnectionTo<Client>| {
                let root = match req.cwd.canonicalize() {
                    Ok(r) if r.is_dir() => r,
                    _ => {
                        return responder.respond_with_error(
                            agent_client_protocol::Error::invalid_params()
                                .data(format!("cwd {} is not a folder", req.cwd.display())),
                        );
                    }
                };
                let id = format!("sess_{:08x}", fastrand::u32(..));
                if let Ok(mut sessions) = s2.sessions.lock() {
                    sessions.insert(
                        id.clone(),
                        Session {
                            root,
                            mcp: session_mcp(&req.mcp_servers),
                            cancel: None,
                            last_goal: None,
                            told_trust: false,
                        },
                    );
                }
                if let Some(root) = s2
                    .sessions
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&id).map(|s| s.root.clone()))
                {
                    save_session(&root, &id, None);
                    responder.respond(NewSessionResponse::new(id.clone()))?;
                    tell_trust(&conn, &id, &root, None);
                } else {
                    responder.respond(NewSessionResponse::new(id.clone()))?;
                }
                notify(
                    &conn,
                    &id,
                    SessionUpdate::AvailableCommandsUpdate(
                        AvailableCommandsUpdate::new(commands()),
                    ),
                );
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest,
                        responder: Responder<LoadSessionResponse>,
                        conn: ConnectionTo<Client>| { load(&s3, req, responder, conn) },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: Responder<PromptResponse>,
                        conn: ConnectionTo<Client>| {
                prompt(&s4, req, responder, conn)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _conn: ConnectionTo<Client>| {
                if let Ok(sessions) = s5.sessions.lock()
                    && let Some(s) = sessions.get(&n.session_id.to_string())
                    && let Some(c) = &s.cancel
                {
                    c.cancel();
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Stdio::new())
        .await
        .map_err(|e| anyhow::anyhow!("the ACP connection failed: {e}"))
}

/// Tells the session when its folder is not trusted, so that `.agent-ls.toml` settings were
/// left out, and how to trust it: otherwise the user sees only what the defaults lead to
/// ("cannot reach ollama"). `loaded` is the folder's configuration when already at hand.
fn tell_trust(
    conn: &ConnectionTo<Client>,
    session: &str,
    root: &Path,
    loaded: Option<&config::Loaded>,
) -> bool {
    let fresh;
    let loaded = match loaded {
        Some(l) => l,
        None => {
            fresh = config::load(&config::Inputs::from_process(Some(root.to_path_buf())));
            &fresh
        }
    };
    if loaded.untrusted.is_empty() {
        return false;
    }
    let message = config::untrusted_message(&loaded.untrusted, loaded.trusted);
    // The command with this folder, where the user runs it: a terminal, not this chat.
    let how = format!(
        "run `agent-ls trust {}` in a terminal to trust it, and the next prompt uses them",
        root.display()
    );
    let generic = "`agent-ls trust` trusts it";
    let text = if message.contains(generic) {
        format!("agent-ls: {}\n", message.replace(generic, &how))
    } else if config::gated(&loaded.untrusted).next().is_some() && !loaded.trusted {
        format!("agent-ls: {message}; {how}\n")
    } else {
        format!("agent-ls: {message}\n")
    };
    notify(
        conn,
        session,
        SessionUpdate::AgentMessageChunk(text_chunk(text)),
    );
    true
}

/// `/undo [N]` or `/redo`: which way, and the step named.
fn step_move(command: &str) -> Option<(bool, Option<u64>)> {
    if command == "/redo" {
        return Some((false, None));
    }
    let rest = command.strip_prefix("/undo")?;
    (rest.is_empty() || rest.starts_with(' ')).then(|| (true, rest.trim().parse().ok()))
}

/// `/undo` or `/redo` through the client that offered `fs/write_text_file`: the files are
/// read and written through it, as the run's changes were, so its buffers and its own undo
/// see the move. Files an undone step created are deleted on disk (ACP has no delete).
async fn move_through_client(
    (conn, session): (ConnectionTo<Client>, String),
    root: PathBuf,
    fs: ClientFs,
    limits: Limits,
    (undo, step): (bool, Option<u64>),
) -> String {
    let done = if undo { "undone" } else { "redone" };
    let read = |rel: &str| match read_through(&conn, &session, &root, fs, rel) {
        FileText::Text(t) => Some(t),
        _ => None,
    };
    let planned = if undo {
        agent_ls_runtime::steps::plan_undo(&root, step, &limits, read)
    } else {
        agent_ls_runtime::steps::plan_redo(&root, &limits, read)
    };
    let m = match planned {
        Ok(m) => m,
        Err(e) => return format!("nothing was {done}: {e}"),
    };
    for c in &m.changes {
        let path = match agent_ls_runtime::files::resolve(&root, &c.path) {
            Ok(p) => p,
            Err(e) => return format!("step {} was not {done}: {e}", m.step),
        };
        let request = WriteTextFileRequest::new(session.clone(), path, c.new_text.clone());
        if let Err(e) = conn.send_request(request).block_task().await {
            return format!(
                "step {} was not {done} whole: the client did not write {}: {e}",
                m.step, c.path
            );
        }
    }
    let settled = agent_ls_runtime::steps::delete_created(&root, &m.deletes)
        .and_then(|()| agent_ls_runtime::steps::settle(&root, &m));
    match settled {
        Ok(()) => format!(
            "{} step {}: {}",
            if undo { "undid" } else { "redid" },
            m.step,
            m.files().join(", ")
        ),
        Err(e) => format!(
            "step {} was written but not recorded as {done}: {e}",
            m.step
        ),
    }
}

/// The text of a prompt's blocks.
fn prompt_text(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The answer to one of the session's commands (`/undo [step]`, `/redo`, `/status`, and
/// `/rerun` when there is no goal to run again); `None` for a goal, which starts a run.
fn command_answer(command: &str, has_last: bool, root: &Path, limits: &Limits) -> Option<String> {
    if let Some(rest) = command.strip_prefix("/undo") {
        return Some(
            match agent_ls_runtime::steps::undo(root, rest.trim().parse().ok(), limits) {
                Ok((id, files)) => format!("undid step {id}: {}", files.join(", ")),
                Err(e) => format!("nothing was undone: {e}"),
            },
        );
    }
    // A word like `/bogus` is a command nobody has: it starts nothing (a typo must not send
    // the model to work). A path such as `/src/app.py ...` is a goal.
    let word = command.split_whitespace().next().unwrap_or("");
    let known = [
        "/undo",
        "/redo",
        "/rollback",
        "/rerun",
        "/status",
        "/commit",
        "/test",
    ];
    if word.len() > 1
        && word.starts_with('/')
        && word[1..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !known.contains(&word)
    {
        return Some(format!(
            "unknown command {word}; nothing was started. The commands are {}",
            known.join(", ")
        ));
    }
    match command {
        "/redo" => Some(match agent_ls_runtime::steps::redo(root, limits) {
            Ok((id, files)) => format!("redid step {id}: {}", files.join(", ")),
            Err(e) => format!("nothing was redone: {e}"),
        }),
        "/status" => {
            let runs: Vec<String> = agent_ls_runtime::journal::list(root)
                .iter()
                .take(10)
                .map(|r| format!("- {} {} {}", r.run_id, r.status.as_str(), r.goal))
                .collect();
            Some(if runs.is_empty() {
                "no runs yet".to_string()
            } else {
                runs.join("\n")
            })
        }
        "/rerun" if !has_last => Some("no goal to run again yet".to_string()),
        "/test" => Some(
            "/test needs the bug: /test parse drops the last field of a line ending with a comma"
                .to_string(),
        ),
        _ => None,
    }
}

/// `/commit [RUN]`: the run's own files committed as the user (docs/git.md); what became of it.
async fn commit(root: &Path, loaded: &config::Loaded, run: Option<String>) -> String {
    let store = agent_ls_runtime::store::StoreThread::open(root.to_path_buf(), |_| {});
    let models = agent_ls_runtime::model::Models::new(&loaded.config, Some(root));
    let setting = (root, &loaded.config, loaded.trusted);
    let made = agent_ls_runtime::git::run::commit_recorded(
        &store,
        setting,
        Some(&models),
        run,
        (None, false),
    )
    .await;
    match made {
        Ok((id, c)) => format!(
            "committed run {id} as {} on {}: {}",
            &c.id[..c.id.len().min(12)],
            c.branch.as_deref().unwrap_or("a detached HEAD"),
            c.subject
        ),
        Err(e) => format!("nothing was committed: {e}"),
    }
}

fn prompt(
    state: &State,
    req: PromptRequest,
    responder: Responder<PromptResponse>,
    conn: ConnectionTo<Client>,
) -> Result<(), agent_client_protocol::Error> {
    let session_id = req.session_id.to_string();
    let text = prompt_text(&req.prompt);
    let fs = state.fs.lock().map(|f| *f).unwrap_or_default();
    let (root, mcp, last, told_trust) = {
        let Ok(sessions) = state.sessions.lock() else {
            return responder.respond_with_error(agent_client_protocol::Error::internal_error());
        };
        let Some(s) = sessions.get(&session_id) else {
            return responder.respond_with_error(
                agent_client_protocol::Error::invalid_params()
                    .data(format!("no session {session_id}")),
            );
        };
        (
            s.root.clone(),
            s.mcp.clone(),
            s.last_goal.clone(),
            s.told_trust,
        )
    };
    let loaded = config::load(&config::Inputs::from_process(Some(root.clone())));
    let limits = loaded.config.edit.limits();
    // The session's commands are answered at once, without a model.
    let command = text.trim();
    if let Some(how) = rollback::parse(command) {
        tokio::spawn(async move {
            let answer = rollback::answer((conn.clone(), session_id.clone()), root, fs, how).await;
            notify(
                &conn,
                &session_id,
                SessionUpdate::AgentMessageChunk(text_chunk(answer)),
            );
            let _ = responder.respond(PromptResponse::new(StopReason::EndTurn));
        });
        return Ok(());
    }
    if fs.write
        && let Some(how) = step_move(command)
    {
        tokio::spawn(async move {
            let answer =
                move_through_client((conn.clone(), session_id.clone()), root, fs, limits, how)
                    .await;
            notify(
                &conn,
                &session_id,
                SessionUpdate::AgentMessageChunk(text_chunk(answer)),
            );
            let _ = responder.respond(PromptResponse::new(StopReason::EndTurn));
        });
        return Ok(());
    }
    if command == "/commit" || command.starts_with("/commit ") {
        let run = command["/commit".len()..].trim();
        let run = (!run.is_empty()).then(|| run.to_string());
        tokio::spawn(async move {
            let answer = commit(&root, &loaded, run).await;
            notify(
                &conn,
                &session_id,
                SessionUpdate::AgentMessageChunk(text_chunk(answer)),
            );
            let _ = responder.respond(PromptResponse::new(StopReason::EndTurn));
        });
        return Ok(());
    }
    if let Some(answer) = command_answer(command, last.is_some(), &root, &limits) {
        notify(
            &conn,
            &session_id,
            SessionUpdate::AgentMessageChunk(text_chunk(answer)),
        );
        return responder.respond(PromptResponse::new(StopReason::EndTurn));
    }
    let goal = match last {
        Some(g) if command == "/rerun" => g,
        _ => text.clone(),
    };
    // Said again in the first turn: a client may show nothing sent outside a turn.
    let told = told_trust || tell_trust(&conn, &session_id, &root, Some(&loaded));
    let cancel = CancellationToken::new();
    if let Ok(mut sessions) = state.sessions.lock()
        && let Some(s) = sessions.get_mut(&session_id)
    {
        s.cancel = Some(cancel.clone());
        s.last_goal = Some(goal.clone());
        s.told_trust = told;
    }
    save_session(&root, &session_id, Some(&goal));
    let mut cfg = loaded.config;
    for (name, server) in mcp {
        cfg.mcp.servers.insert(name, server);
    }
    let Some(root) = isolated_root(&conn, &session_id, root, &cfg, &goal) else {
        return responder.respond(PromptResponse::new(StopReason::EndTurn));
    };
    tokio::spawn(async move {
        let stop = run(cfg, root, goal, None, (session_id, conn, fs), cancel).await;
        let _ = responder.respond(PromptResponse::new(stop));
    });
    Ok(())
}

/// Where the run of `goal` works: the session's folder, or as `git.isolation` says a new
/// branch there or a new worktree (said in the session). `None` when it cannot start so (a
/// dirty tree on `"branch"`), which is said too.
fn isolated_root(
    conn: &ConnectionTo<Client>,
    session: &str,
    root: PathBuf,
    cfg: &Config,
    goal: &str,
) -> Option<PathBuf> {
    let said = match agent_ls_runtime::git::isolate::start(&root, cfg.git.isolation, goal) {
        Ok(None) => return Some(root),
        Ok(Some(i)) => Ok(i),
        Err(e) => Err(format!("agent-ls: cannot isolate the run: {e}\n")),
    };
    let (text, root) = match said {
        Ok(i) => (format!("agent-ls: {}\n", i.describe()), Some(i.root)),
        Err(text) => (text, None),
    };
    notify(
        conn,
        session,
        SessionUpdate::AgentMessageChunk(text_chunk(text)),
    );
    root
}

/// session/load: the recorded run's goal and answer are shown; an interrupted run goes on
/// from its checkpoint, streaming into the session.
fn load(
    state: &State,
    req: LoadSessionRequest,
    responder: Responder<LoadSessionResponse>,
    conn: ConnectionTo<Client>,
) -> Result<(), agent_client_protocol::Error> {
    let id = req.session_id.to_string();
    let Ok(root) = req.cwd.canonicalize() else {
        return responder.respond_with_error(
            agent_client_protocol::Error::invalid_params().data("cwd is not a folder"),
        );
    };
    let Some(recorded) = agent_ls_runtime::journal::list(&root)
        .into_iter()
        .find(|r| r.run_id == id)
    else {
        return match saved_session(&root, &id) {
            Some(last_goal) => load_saved(state, &id, root, last_goal, &req, responder, conn),
            // acpx and other hosts start a new session on exactly this code.
            None => responder.respond_with_error(
                agent_client_protocol::Error::new(
                    agent_client_protocol::ErrorCode::RESOURCE_NOT_FOUND,
                    "Resource not found",
                )
                .data(format!(
                    "no session or recorded run {id} in {}",
                    root.display()
                )),
            ),
        };
    };
    notify(
        &conn,
        &id,
        SessionUpdate::UserMessageChunk(text_chunk(recorded.goal.clone())),
    );
    let cancel = CancellationToken::new();
    if let Ok(mut sessions) = state.sessions.lock() {
        sessions.insert(
            id.clone(),
            Session {
                root: root.clone(),
                mcp: session_mcp(&req.mcp_servers),
                cancel: Some(cancel.clone()),
                last_goal: Some(recorded.goal.clone()),
                told_trust: false,
            },
        );
    }
    let resumable = Store::open(&root)
        .ok()
        .and_then(|(store, _)| drive::resume_point(&store, &id, None).ok());
    responder.respond(LoadSessionResponse::new())?;
    tell_trust(&conn, &id, &root, None);
    notify(
        &conn,
        &id,
        SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands())),
    );
    match resumable {
        Some((goal, checkpoint)) => {
            let fs = state.fs.lock().map(|f| *f).unwrap_or_default();
            let loaded = config::load(&config::Inputs::from_process(Some(root.clone())));
            tokio::spawn(async move {
                run(
                    loaded.config,
                    root,
                    goal,
                    Some(checkpoint),
                    (id, conn, fs),
                    cancel,
                )
                .await;
            });
        }
        None => notify(
            &conn,
            &id,
            SessionUpdate::AgentMessageChunk(text_chunk(format!(
                "run {id} ended: {}",
                recorded.status.as_str()
            ))),
        ),
    }
    Ok(())
}

/// session/load of a session this agent issued earlier, perhaps in another process: it is
/// open again, with its last goal shown and kept for `/rerun`.
fn load_saved(
    state: &State,
    id: &str,
    root: PathBuf,
    last_goal: Option<String>,
    req: &LoadSessionRequest,
    responder: Responder<LoadSessionResponse>,
    conn: ConnectionTo<Client>,
) -> Result<(), agent_client_protocol::Error> {
    let root_for_trust = root.clone();
    if let Ok(mut sessions) = state.sessions.lock() {
        sessions.insert(
            id.to_string(),
            Session {
                root,
                mcp: session_mcp(&req.mcp_servers),
                cancel: None,
                last_goal: last_goal.clone(),
                told_trust: false,
            },
        );
    }
    responder.respond(LoadSessionResponse::new())?;
    tell_trust(&conn, id, &root_for_trust, None);
    if let Some(goal) = last_goal {
        notify(&conn, id, SessionUpdate::UserMessageChunk(text_chunk(goal)));
    }
    notify(
        &conn,
        id,
        SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands())),
    );
    Ok(())
}

/// Where a session is kept so that a new process can load it. Only ids of the form this
/// agent issues (`sess_` and 8 hex digits) name a file: a client's id never makes a path.
fn session_file(root: &Path, id: &str) -> Option<PathBuf> {
    let hex = id.strip_prefix("sess_")?;
    (hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| {
        root.join(".agent-ls")
            .join("acp-sessions")
            .join(format!("{id}.json"))
    })
}

/// Records a session (and the goal its latest prompt ran); a store that cannot be written
/// costs only loading the session later.
fn save_session(root: &Path, id: &str, last_goal: Option<&str>) {
    let Some(path) = session_file(root, id) else {
        return;
    };
    let text = serde_json::json!({"id": id, "last_goal": last_goal}).to_string();
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| std::fs::write(&path, text));
    if let Err(e) = written {
        tracing::warn!("cannot keep session {id} in {}: {e}", path.display());
    }
}

/// A saved session's last goal (`Some(None)` before its first prompt), or `None` when this
/// folder has no such session.
fn saved_session(root: &Path, id: &str) -> Option<Option<String>> {
    let text = std::fs::read_to_string(session_file(root, id)?).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(value["last_goal"].as_str().map(String::from))
}

/// One run of the loop for a session, through the shared driver; the stop reason for the
/// prompt's answer.
async fn run(
    config: Config,
    root: PathBuf,
    goal: String,
    resume: Option<Option<agent_ls_core::agent::Run>>,
    (session, conn, fs): (String, ConnectionTo<Client>, ClientFs),
    cancel: CancellationToken,
) -> StopReason {
    let _lock = match agent_ls_runtime::lock::RunLock::acquire(&root, &goal) {
        Ok(l) => l,
        Err(e) => {
            notify(
                &conn,
                &session,
                SessionUpdate::AgentMessageChunk(text_chunk(format!("agent-ls: {e}"))),
            );
            return StopReason::EndTurn;
        }
    };
    let store = StoreThread::open(root.clone(), |_| {});
    let models = Models::new(&config, Some(&root));
    // A resumed session's run goes on under the session's id.
    let run_id = match resume {
        Some(_) => session.clone(),
        None => drive::new_run_id(),
    };
    let mut shell = AcpShell {
        root: root.clone(),
        session: session.clone(),
        conn: conn.clone(),
        fs,
        goal: goal.clone(),
        run_id: run_id.clone(),
        calls: 0,
        approved: None,
        read: Mutex::new(HashMap::new()),
    };
    let (c2, s2, r2) = (conn.clone(), session.clone(), root.clone());
    let plan = Mutex::new(PlanView::default());
    let thoughts = Mutex::new(output::Thoughts::default());
    let on_event = move |e: LiveEvent| {
        if let Ok(mut plan) = plan.lock()
            && let Some(entries) = plan.follow(&e.event)
        {
            notify(&c2, &s2, SessionUpdate::Plan(Plan::new(entries)));
        }
        // The model's words as prose: its JSON and its edit blocks are not thoughts.
        let lines = match (&e.event, thoughts.lock()) {
            (RunEvent::Token { role, text }, Ok(mut t)) => t.token(*role, text),
            (other, Ok(mut t)) => {
                let mut lines = t.flush();
                lines.extend(output::sentence(other));
                lines
            }
            _ => Vec::new(),
        };
        for line in lines {
            notify(
                &c2,
                &s2,
                SessionUpdate::AgentThoughtChunk(text_chunk(format!("{line}\n"))),
            );
        }
        event(&c2, &s2, &r2, &e.event);
    };
    let driver = Drive {
        models: &models,
        config: &config,
        root: &root,
        cancel: &cancel,
        on_token: None,
        record: Some(&store),
        events: Some(&on_event),
    };
    let outcome = match resume {
        Some(Some(mut checkpoint)) => driver.resume(&mut checkpoint, &mut shell, run_id).await,
        Some(None) | None => {
            // `/test BUG`: the bug is the goal, reproduced with a test first.
            let mut run = match drive::test_command(&goal) {
                Some(bug) => {
                    let mut settings = drive::run_settings(&config, bug);
                    drive::reproduce_first(&mut settings);
                    agent_ls_core::agent::Run::new(bug, settings)
                }
                None => drive::new_run(&config, &goal),
            };
            driver.run(&mut run, &mut shell, run_id).await
        }
    };
    store.flush_blocking();
    notify(
        &conn,
        &session,
        SessionUpdate::AgentMessageChunk(text_chunk(outcome.answer.clone())),
    );
    if outcome.status == agent_ls_core::agent::RunStatus::Cancelled {
        StopReason::Cancelled
    } else {
        StopReason::EndTurn
    }
}

/// The plan as the client sees it: the planner's tasks, each pending, in progress (the task
/// the current iteration works on) or completed (those before it, and all once the run is
/// done). ACP replaces the whole plan with each update.
#[derive(Default)]
struct PlanView {
    tasks: Vec<(String, String)>,
    current: Option<usize>,
    done: bool,
}

impl PlanView {
    /// The plan's entries after `e`, when `e` changed them.
    fn follow(&mut self, e: &RunEvent) -> Option<Vec<PlanEntry>> {
        match e {
            RunEvent::Plan { tasks } => {
                self.tasks = tasks
                    .iter()
                    .map(|t| (t.id.clone(), t.title.clone()))
                    .collect();
                self.current = None;
            }
            RunEvent::Iteration { task, .. } => {
                let task = task.as_deref()?;
                let i = self
                    .tasks
                    .iter()
                    .position(|(id, _)| task.split(' ').next() == Some(id.as_str()))?;
                if self.current == Some(i) {
                    return None;
                }
                self.current = Some(i);
            }
            RunEvent::Finished {
                status: RunStatus::Done,
                ..
            } => self.done = true,
            _ => return None,
        }
        if self.tasks.is_empty() {
            return None;
        }
        Some(
            self.tasks
                .iter()
                .enumerate()
                .map(|(i, (_, title))| {
                    let status = match self.current {
                        _ if self.done => PlanEntryStatus::Completed,
                        Some(c) if i < c => PlanEntryStatus::Completed,
                        Some(c) if i == c => PlanEntryStatus::InProgress,
                        _ => PlanEntryStatus::Pending,
                    };
                    PlanEntry::new(title.clone(), PlanEntryPriority::Medium, status)
                })
                .collect(),
        )
    }
}

/// A run event as the client sees it: the tools the model calls and their results.
fn event(conn: &ConnectionTo<Client>, session: &str, root: &Path, e: &RunEvent) {
    match e {
        RunEvent::ToolCall(call) => {
            let kind = acp_kind(agent_ls_runtime::tools::kind_of(&call.name));
            let id = format!("tool_{}", call.id);
            notify(
                conn,
                session,
                SessionUpdate::ToolCall(
                    ToolCall::new(id, output::tool_title(&call.name, &call.arguments))
                        .kind(kind)
                        .status(ToolCallStatus::InProgress)
                        .locations(output::tool_locations(root, &call.arguments))
                        .raw_input(call.arguments.clone()),
                ),
            );
        }
        RunEvent::ToolResult {
            id, is_error, text, ..
        } => {
            let id = format!("tool_{id}");
            let (failed, text) = (*is_error, text.clone());
            notify(
                conn,
                session,
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    id,
                    ToolCallUpdateFields::new()
                        .status(if failed {
                            ToolCallStatus::Failed
                        } else {
                            ToolCallStatus::Completed
                        })
                        .content(vec![ToolCallContent::Content(schema::Content::new(text))]),
                )),
            );
        }
        _ => {}
    }
}

/// ACP's name for a kind of tool.
fn acp_kind(kind: agent_ls_runtime::tools::ToolKind) -> ToolKind {
    use agent_ls_runtime::tools::ToolKind as Kind;
    match kind {
        Kind::Read => ToolKind::Read,
        Kind::Search => ToolKind::Search,
        Kind::Execute => ToolKind::Execute,
        Kind::Edit => ToolKind::Edit,
        Kind::Other => ToolKind::Other,
    }
}

/// A file's text as the client has it (the editor's buffer, unsaved edits included) when it
/// offers fs/read_text_file, else, or when it cannot say, as the disk has it.
fn read_through(
    conn: &ConnectionTo<Client>,
    session: &str,
    root: &Path,
    fs: ClientFs,
    relative: &str,
) -> FileText {
    if !fs.read {
        return agent_ls_runtime::files::read_for_plan(root, relative);
    }
    let path = match agent_ls_runtime::files::resolve(root, relative) {
        Ok(p) => p,
        Err(e) => return FileText::Refused(e.to_string()),
    };
    if !path.is_file() {
        return agent_ls_runtime::files::read_for_plan(root, relative);
    }
    let request = conn.send_request(ReadTextFileRequest::new(session.to_string(), path));
    // A client that does not answer costs five seconds, then the disk is read.
    let answer = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(tokio::time::timeout(
            std::time::Duration::from_secs(5),
            request.block_task(),
        ))
    });
    match answer {
        Ok(Ok(r)) => FileText::Text(r.content),
        _ => agent_ls_runtime::files::read_for_plan(root, relative),
    }
}

/// How the loop reaches an ACP client: approval by `session/request_permission`, files by
/// `fs/*` when offered, progress as thoughts, changes and test runs as tool calls.
struct AcpShell {
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
    fn next_id(&mut self, what: &str) -> String {
        self.calls += 1;
        format!("{what}_{}", self.calls)
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
        let diffs: Vec<ToolCallContent> = changes
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
        let locations: Vec<ToolCallLocation> = changes
            .iter()
            .map(|c| {
                ToolCallLocation::new(self.root.join(&c.path)).line(output::first_changed_line(
                    c.original.as_deref(),
                    &c.new_text,
                ))
            })
            .collect();
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
        let request = RequestPermissionRequest::new(
            self.session.clone(),
            ToolCallUpdate::new(
                id.clone(),
                ToolCallUpdateFields::new()
                    .title(title)
                    .kind(ToolKind::Edit)
                    .status(ToolCallStatus::Pending)
                    .locations(locations)
                    .content(diffs),
            ),
            vec![
                PermissionOption::new("allow", "Apply", PermissionOptionKind::AllowOnce),
                PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
            ],
        );
        match self.conn.send_request(request).block_task().await {
            Ok(r) => match r.outcome {
                RequestPermissionOutcome::Selected(s) if &*s.option_id.0 == "allow" => {
                    self.update(&id, ToolCallStatus::InProgress, None);
                    self.approved = Some(id);
                    Verdict::Approved
                }
                _ => {
                    self.update(&id, ToolCallStatus::Failed, Some("rejected".into()));
                    Verdict::Rejected
                }
            },
            Err(e) => {
                tracing::warn!("session/request_permission failed: {e}");
                self.update(&id, ToolCallStatus::Failed, Some(format!("no answer: {e}")));
                Verdict::Rejected
            }
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
