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
//!
//! This file is the server: its requests and what each does. The rest, one job a file, in
//! the order they depend on each other (none imports this file): client.rs (updates sent, files
//! read through the client), sessions.rs (the sessions and their files), commands.rs and
//! rollback.rs (the slash commands), shell.rs (the ACP `Shell` a run goes through), output.rs
//! (what a run's events look like), run.rs (one run and its live view).

mod client;
mod commands;
mod output;
mod rollback;
mod run;
mod sessions;
mod shell;

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    self, AgentCapabilities, AvailableCommandsUpdate, CancelNotification, ContentBlock,
    InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse, SessionUpdate,
    StopReason,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Stdio};
use tokio_util::sync::CancellationToken;

use agent_ls_runtime::config::{self, McpServerConfig};
use agent_ls_runtime::drive;
use agent_ls_runtime::journal::RunSummary;
use agent_ls_runtime::store::Store;
use client::{notify, say, text_chunk};
use commands::Answer;
use sessions::{Session, State, save_session, saved_session};

/// Why `agent-ls acp` stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    #[error("the ACP connection failed: {0}")]
    Connection(agent_client_protocol::Error),
}

/// What a handler answers the protocol with.
type Handled = Result<(), agent_client_protocol::Error>;

/// Serves ACP on stdin and stdout until the client goes away.
pub async fn serve() -> Result<(), AcpError> {
    let state = State::default();
    let (s1, s2, s3, s4, s5) = (
        state.clone(),
        state.clone(),
        state.clone(),
        state.clone(),
        state.clone(),
    );
    // One handler a request, each a function below; the closures only name the types.
    Agent
        .v1()
        .name("agent-ls")
        .on_receive_request(
            async move |req: InitializeRequest,
                        responder: Responder<InitializeResponse>,
                        _conn: ConnectionTo<Client>| {
                initialize(&s1, req, responder)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest,
                        responder: Responder<NewSessionResponse>,
                        conn: ConnectionTo<Client>| {
                new_session(&s2, req, responder, conn)
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
                cancel(&s5, &n);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Stdio::new())
        .await
        .map_err(AcpError::Connection)
}

/// initialize: what the client can do with files is kept; this agent can load sessions.
fn initialize(
    state: &State,
    req: InitializeRequest,
    responder: Responder<InitializeResponse>,
) -> Handled {
    if let Ok(mut fs) = state.fs.lock() {
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
}

/// session/new: a session in the client's folder, kept on disk for a later session/load.
fn new_session(
    state: &State,
    req: NewSessionRequest,
    responder: Responder<NewSessionResponse>,
    conn: ConnectionTo<Client>,
) -> Handled {
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
    state.insert(
        &id,
        Session::new(root.clone(), &req.mcp_servers, None, None),
    );
    save_session(&root, &id, None);
    responder.respond(NewSessionResponse::new(id.clone()))?;
    tell_trust(&conn, &id, &root, None);
    offer_commands(&conn, &id, &root);
    Ok(())
}

/// session/cancel: the session's run stops.
fn cancel(state: &State, n: &CancelNotification) {
    if let Ok(sessions) = state.sessions.lock()
        && let Some(s) = sessions.get(&n.session_id.to_string())
        && let Some(c) = &s.cancel
    {
        c.cancel();
    }
}

/// Lists the session's commands at the client.
fn offer_commands(conn: &ConnectionTo<Client>, session: &str, root: &Path) {
    let offered = commands::available(root);
    notify(
        conn,
        session,
        SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(offered)),
    );
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
    say(conn, session, text);
    true
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

/// A prompt's session as it was when the prompt came.
struct Turn {
    id: String,
    root: PathBuf,
    mcp: Vec<(String, McpServerConfig)>,
    last_goal: Option<String>,
    told_trust: bool,
}

/// The session a prompt is for, or the error to answer it with.
fn turn(state: &State, id: String) -> Result<Turn, agent_client_protocol::Error> {
    let Ok(sessions) = state.sessions.lock() else {
        return Err(agent_client_protocol::Error::internal_error());
    };
    let Some(s) = sessions.get(&id) else {
        return Err(agent_client_protocol::Error::invalid_params().data(format!("no session {id}")));
    };
    Ok(Turn {
        root: s.root.clone(),
        mcp: s.mcp.clone(),
        last_goal: s.last_goal.clone(),
        told_trust: s.told_trust,
        id,
    })
}

/// session/prompt: one of the session's commands is answered at once, without a model; any
/// other text is a goal, and starts a run.
fn prompt(
    state: &State,
    req: PromptRequest,
    responder: Responder<PromptResponse>,
    conn: ConnectionTo<Client>,
) -> Handled {
    let text = prompt_text(&req.prompt);
    let turn = match turn(state, req.session_id.to_string()) {
        Ok(t) => t,
        Err(e) => return responder.respond_with_error(e),
    };
    let loaded = agent_ls_runtime::runs::configuration(Some(turn.root.clone()));
    let command = text.trim();
    // `/NAME [REQUEST]` of a skill starts a run of it (docs/skills.md).
    if let Some(goal) = commands::skill_goal(command, &turn.root) {
        return start_run(state, turn, loaded, goal, (responder, conn));
    }
    let cx = commands::Context {
        conn: conn.clone(),
        session: turn.id.clone(),
        root: turn.root.clone(),
        fs: state.client_fs(),
        has_last: turn.last_goal.is_some(),
    };
    match commands::answer(command, &cx, &loaded) {
        Some(Answer::Now(answer)) => {
            say(&conn, &turn.id, answer);
            return responder.respond(PromptResponse::new(StopReason::EndTurn));
        }
        Some(Answer::Later(work)) => {
            tokio::spawn(async move {
                let answer = work.await;
                say(&conn, &turn.id, answer);
                let _ = responder.respond(PromptResponse::new(StopReason::EndTurn));
            });
            return Ok(());
        }
        None => {}
    }
    let goal = match &turn.last_goal {
        Some(g) if command == "/rerun" => g.clone(),
        _ => text.clone(),
    };
    start_run(state, turn, loaded, goal, (responder, conn))
}

/// Starts the run of `goal` for the prompt's turn; the prompt is answered when it ends.
fn start_run(
    state: &State,
    turn: Turn,
    loaded: config::Loaded,
    goal: String,
    (responder, conn): (Responder<PromptResponse>, ConnectionTo<Client>),
) -> Handled {
    // Said again in the first turn: a client may show nothing sent outside a turn.
    let told = turn.told_trust || tell_trust(&conn, &turn.id, &turn.root, Some(&loaded));
    let cancel = CancellationToken::new();
    if let Ok(mut sessions) = state.sessions.lock()
        && let Some(s) = sessions.get_mut(&turn.id)
    {
        s.cancel = Some(cancel.clone());
        s.last_goal = Some(goal.clone());
        s.told_trust = told;
    }
    save_session(&turn.root, &turn.id, Some(&goal));
    let trusted = loaded.trusted;
    let mut cfg = loaded.config;
    for (name, server) in turn.mcp {
        cfg.mcp.servers.insert(name, server);
    }
    let Some(root) = run::isolated_root(&conn, &turn.id, turn.root, &cfg, &goal) else {
        return responder.respond(PromptResponse::new(StopReason::EndTurn));
    };
    let peer = (turn.id, conn, state.client_fs());
    tokio::spawn(async move {
        let stop = run::run((cfg, trusted), root, goal, None, peer, cancel).await;
        let _ = responder.respond(PromptResponse::new(stop));
    });
    Ok(())
}

/// session/load: the recorded run's goal and answer are shown; an interrupted run goes on
/// from its checkpoint, streaming into the session. A session this agent issued and saved
/// is opened again.
fn load(
    state: &State,
    req: LoadSessionRequest,
    responder: Responder<LoadSessionResponse>,
    conn: ConnectionTo<Client>,
) -> Handled {
    let id = req.session_id.to_string();
    let Ok(root) = req.cwd.canonicalize() else {
        return responder.respond_with_error(
            agent_client_protocol::Error::invalid_params().data("cwd is not a folder"),
        );
    };
    let recorded = agent_ls_runtime::journal::list(&root)
        .into_iter()
        .find(|r| r.run_id == id);
    if let Some(recorded) = recorded {
        return load_recorded(state, (id, root), recorded, &req, (responder, conn));
    }
    match saved_session(&root, &id) {
        Some(last_goal) => load_saved(state, (&id, root), last_goal, &req, (responder, conn)),
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
    }
}

/// session/load of a recorded run: its goal is shown, and it goes on from its checkpoint
/// when it was interrupted, or its end is said.
fn load_recorded(
    state: &State,
    (id, root): (String, PathBuf),
    recorded: RunSummary,
    req: &LoadSessionRequest,
    (responder, conn): (Responder<LoadSessionResponse>, ConnectionTo<Client>),
) -> Handled {
    notify(
        &conn,
        &id,
        SessionUpdate::UserMessageChunk(text_chunk(recorded.goal.clone())),
    );
    let cancel = CancellationToken::new();
    let session = Session::new(
        root.clone(),
        &req.mcp_servers,
        Some(cancel.clone()),
        Some(recorded.goal.clone()),
    );
    state.insert(&id, session);
    let resumable = Store::open(&root)
        .ok()
        .and_then(|(store, _)| drive::resume_point(&store, &id, None).ok());
    // The history (the goal, and how the run ended) is streamed before the answer, as ACP
    // asks; what goes on from here (the resumed run) comes after it.
    if resumable.is_none() {
        say(
            &conn,
            &id,
            format!("run {id} ended: {}", recorded.status.as_str()),
        );
    }
    responder.respond(LoadSessionResponse::new())?;
    tell_trust(&conn, &id, &root, None);
    offer_commands(&conn, &id, &root);
    if let Some((goal, checkpoint)) = resumable {
        let fs = state.client_fs();
        let loaded = agent_ls_runtime::runs::configuration(Some(root.clone()));
        tokio::spawn(async move {
            let peer = (id, conn, fs);
            let setting = (loaded.config, loaded.trusted);
            run::run(setting, root, goal, Some(checkpoint), peer, cancel).await;
        });
    }
    Ok(())
}

/// session/load of a session this agent issued earlier, perhaps in another process: it is
/// open again, with its last goal shown and kept for `/rerun`.
fn load_saved(
    state: &State,
    (id, root): (&str, PathBuf),
    last_goal: Option<String>,
    req: &LoadSessionRequest,
    (responder, conn): (Responder<LoadSessionResponse>, ConnectionTo<Client>),
) -> Handled {
    let session = Session::new(root.clone(), &req.mcp_servers, None, last_goal.clone());
    state.insert(id, session);
    // The history first, then the answer (ACP's order).
    if let Some(goal) = last_goal {
        notify(&conn, id, SessionUpdate::UserMessageChunk(text_chunk(goal)));
    }
    responder.respond(LoadSessionResponse::new())?;
    tell_trust(&conn, id, &root, None);
    offer_commands(&conn, id, &root);
    Ok(())
}
