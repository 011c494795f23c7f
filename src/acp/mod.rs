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
//! `/undo`, `/redo`, `/rollback`, `/rewind STEP INSTRUCTION` (docs/rewind.md), `/rerun`,
//! `/status`, `/commit` and `/test BUG` (reproduce the bug with a test first, docs/tester.md)
//! are the session's commands; `session/load` replays a
//! recorded conversation and goes on with a run that was interrupted. `$/cancel_request` of a
//! prompt stops its run as `session/cancel` does, and the prompt answers -32800.
//!
//! This file is the server: its requests and what each does. The rest, one job a file, in
//! the order they depend on each other (none imports this file): client.rs (updates sent, files
//! read through the client), sessions.rs (the sessions and their files), commands.rs,
//! rollback.rs and rewind.rs (the slash commands), shell.rs (the ACP `Shell` a run goes through), output.rs
//! (what a run's events look like), run.rs (one run and its live view), replay.rs (a recorded
//! run's conversation again), options.rs (the mode and model options), lifecycle.rs (list,
//! resume, close and the set requests).

mod client;
mod commands;
mod lifecycle;
mod opening;
mod options;
mod output;
mod replay;
mod rewind;
mod rollback;
mod run;
mod sessions;
mod shell;

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    self, AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse,
    ContentBlock, InitializeRequest, InitializeResponse, ListSessionsRequest, ListSessionsResponse,
    LoadSessionRequest, LoadSessionResponse, NewSessionRequest, NewSessionResponse, PromptRequest,
    PromptResponse, ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities,
    SessionCloseCapabilities, SessionInfoUpdate, SessionListCapabilities,
    SessionResumeCapabilities, SessionUpdate, SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse, SetSessionModeRequest, SetSessionModeResponse, StopReason,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Stdio};
use tokio_util::sync::CancellationToken;

use agent_ls_runtime::clock::{iso8601, now_ms};
use agent_ls_runtime::config::{self, McpServerConfig};
use agent_ls_runtime::drive;
use agent_ls_runtime::journal::RunSummary;
use agent_ls_runtime::runs::Begin;
use agent_ls_runtime::store::Store;
use client::{notify, say, text_chunk};
use commands::Answer;
use opening::{Handled, not_found, offer_commands, tell_trust};
use sessions::{Saved, Session, State, save_session, saved_session};

/// Why `agent-ls acp` stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    #[error("the ACP connection failed: {0}")]
    Connection(agent_client_protocol::Error),
}

/// Registers `$handler` (a function below or in lifecycle.rs, given the state, the request,
/// its responder and the connection) for requests of type `$req` answered with `$resp`.
macro_rules! handle {
    ($builder:expr, $state:expr, $req:ty, $resp:ty, $handler:path) => {{
        let state = $state.clone();
        $builder.on_receive_request(
            async move |req: $req, responder: Responder<$resp>, conn: ConnectionTo<Client>| {
                $handler(&state, req, responder, conn)
            },
            agent_client_protocol::on_receive_request!(),
        )
    }};
}

/// Serves ACP on stdin and stdout until the client goes away.
pub async fn serve() -> Result<(), AcpError> {
    let state = State::default();
    let cancels = state.clone();
    let agent = Agent.v1().name("agent-ls");
    let agent = handle!(
        agent,
        state,
        InitializeRequest,
        InitializeResponse,
        initialize
    );
    let agent = handle!(
        agent,
        state,
        NewSessionRequest,
        NewSessionResponse,
        new_session
    );
    let agent = handle!(agent, state, LoadSessionRequest, LoadSessionResponse, load);
    let agent = handle!(agent, state, PromptRequest, PromptResponse, prompt);
    let agent = handle!(
        agent,
        state,
        ListSessionsRequest,
        ListSessionsResponse,
        lifecycle::list
    );
    let agent = handle!(
        agent,
        state,
        ResumeSessionRequest,
        ResumeSessionResponse,
        lifecycle::resume
    );
    let agent = handle!(
        agent,
        state,
        CloseSessionRequest,
        CloseSessionResponse,
        lifecycle::close
    );
    let agent = handle!(
        agent,
        state,
        SetSessionModeRequest,
        SetSessionModeResponse,
        lifecycle::set_mode
    );
    let agent = handle!(
        agent,
        state,
        SetSessionConfigOptionRequest,
        SetSessionConfigOptionResponse,
        lifecycle::set_config_option
    );
    agent
        .on_receive_notification(
            async move |n: CancelNotification, _conn: ConnectionTo<Client>| {
                cancel(&cancels, &n);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Stdio::new())
        .await
        .map_err(AcpError::Connection)
}

/// initialize: what the client can do with files is kept; this agent can load, list, resume
/// and close sessions.
fn initialize(
    state: &State,
    req: InitializeRequest,
    responder: Responder<InitializeResponse>,
    _conn: ConnectionTo<Client>,
) -> Handled {
    if let Ok(mut fs) = state.fs.lock() {
        fs.read = req.client_capabilities.fs.read_text_file;
        fs.write = req.client_capabilities.fs.write_text_file;
    }
    responder.respond(
        InitializeResponse::new(req.protocol_version)
            .agent_capabilities(
                AgentCapabilities::new()
                    .load_session(true)
                    .session_capabilities(
                        SessionCapabilities::new()
                            .list(SessionListCapabilities::new())
                            .resume(SessionResumeCapabilities::new())
                            .close(SessionCloseCapabilities::new()),
                    ),
            )
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
    let saved = Saved::default();
    save_session(&root, &id, &saved);
    let config = agent_ls_runtime::runs::configuration(Some(root.clone())).config;
    responder.respond(
        NewSessionResponse::new(id.clone())
            .modes(options::modes(&config, &saved))
            .config_options(options::options(&config, &saved)),
    )?;
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
    saved: Saved,
    spent_usd: f64,
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
        saved: s.saved.clone(),
        spent_usd: s.cost_usd,
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
        return start_run(state, turn, loaded, (goal, Begin::New), (responder, conn));
    }
    if let Some(asked) = rewind::parse(command) {
        return rewind_then_run(state, turn, loaded, asked, (responder, conn));
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
    start_run(state, turn, loaded, (goal, Begin::New), (responder, conn))
}

/// `/rewind STEP INSTRUCTION`: the step's run goes back to it first (said in the session),
/// then the instruction runs as the session's next run, following that run's conversation up
/// to the step. A refusal (a file edited since, no such step) is said, and nothing runs.
fn rewind_then_run(
    state: &State,
    turn: Turn,
    loaded: config::Loaded,
    asked: Option<(u64, String)>,
    (responder, conn): (Responder<PromptResponse>, ConnectionTo<Client>),
) -> Handled {
    let Some((step, instruction)) = asked else {
        say(&conn, &turn.id, rewind::USAGE);
        return responder.respond(PromptResponse::new(StopReason::EndTurn));
    };
    let state = state.clone();
    let (peer, root) = ((conn.clone(), turn.id.clone()), turn.root.clone());
    let limits = loaded.config.edit.limits();
    tokio::spawn(async move {
        match rewind::take_back(peer, root, state.client_fs(), limits, step).await {
            Ok(r) => {
                say(&conn, &turn.id, rewind::said(&r));
                let goal = (instruction, r.begin());
                if let Err(e) = start_run(&state, turn, loaded, goal, (responder, conn)) {
                    tracing::warn!("the rewound run did not start: {e}");
                }
            }
            Err(e) => {
                say(&conn, &turn.id, format!("agent-ls: {e}"));
                let _ = responder.respond(PromptResponse::new(StopReason::EndTurn));
            }
        }
    });
    Ok(())
}

/// Starts the run of `goal` for the prompt's turn, by the session's agent and model; the
/// prompt is answered when it ends, or at once with -32800 when the client cancels the request
/// (`$/cancel_request`), which stops the run as session/cancel does.
fn start_run(
    state: &State,
    turn: Turn,
    loaded: config::Loaded,
    (goal, begin): (String, Begin),
    (responder, conn): (Responder<PromptResponse>, ConnectionTo<Client>),
) -> Handled {
    // Said again in the first turn: a client may show nothing sent outside a turn.
    let told = turn.told_trust || tell_trust(&conn, &turn.id, &turn.root, Some(&loaded));
    let cancel = CancellationToken::new();
    let run_id = drive::new_run_id();
    let mut saved = turn.saved;
    saved.last_goal = Some(goal.clone());
    saved.runs.push(run_id.clone());
    if let Ok(mut sessions) = state.sessions.lock()
        && let Some(s) = sessions.get_mut(&turn.id)
    {
        s.cancel = Some(cancel.clone());
        s.last_goal = Some(goal.clone());
        s.told_trust = told;
        s.saved = saved.clone();
    }
    save_session(&turn.root, &turn.id, &saved);
    let info = SessionInfoUpdate::new()
        .title(goal.clone())
        .updated_at(iso8601(now_ms()));
    notify(&conn, &turn.id, SessionUpdate::SessionInfoUpdate(info));
    let trusted = loaded.trusted;
    let mut cfg = options::session_config(loaded.config, &saved);
    for (name, server) in turn.mcp {
        cfg.mcp.servers.insert(name, server);
    }
    let Some(root) = run::isolated_root(&conn, &turn.id, turn.root, &cfg, &goal) else {
        return responder.respond(PromptResponse::new(StopReason::EndTurn));
    };
    let ask = run::Ask {
        goal,
        run_id,
        agent: saved.agent.clone(),
        spent_usd: turn.spent_usd,
    };
    let (state, id) = (state.clone(), turn.id.clone());
    let peer = (turn.id, conn, state.client_fs());
    let asked = responder.cancellation();
    tokio::spawn(async move {
        let watch = tokio::spawn({
            let (asked, cancel) = (asked.clone(), cancel.clone());
            async move {
                asked.cancelled().await;
                cancel.cancel();
            }
        });
        let (stop, spent) = run::run((cfg, trusted), root, ask, begin, peer, cancel).await;
        watch.abort();
        state.spent(&id, spent);
        let _ = if asked.is_cancelled() {
            responder.respond_with_error(agent_client_protocol::Error::request_cancelled())
        } else {
            responder.respond(PromptResponse::new(stop))
        };
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
        Some(saved) => load_saved(state, (&id, root), saved, &req, (responder, conn)),
        None => responder.respond_with_error(not_found(&id, &root)),
    }
}

/// session/load of a recorded run: its conversation is replayed, and it goes on from its
/// checkpoint when it was interrupted, or its end is said (a rolled-back run as rolled back).
fn load_recorded(
    state: &State,
    (id, root): (String, PathBuf),
    recorded: RunSummary,
    req: &LoadSessionRequest,
    (responder, conn): (Responder<LoadSessionResponse>, ConnectionTo<Client>),
) -> Handled {
    replay::replay(&conn, &id, &root, &id);
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
        let ended = agent_ls_runtime::runs::history::ended(&root, &id, recorded.status);
        say(&conn, &id, format!("run {id} ended: {}", ended.as_str()));
    }
    responder.respond(loaded_answer(&root, &Saved::default()))?;
    tell_trust(&conn, &id, &root, None);
    offer_commands(&conn, &id, &root);
    if let Some((goal, checkpoint)) = resumable {
        let fs = state.client_fs();
        let loaded = agent_ls_runtime::runs::configuration(Some(root.clone()));
        tokio::spawn(async move {
            let ask = run::Ask {
                goal,
                run_id: id.clone(),
                agent: None,
                spent_usd: 0.0,
            };
            let peer = (id, conn, fs);
            let setting = (loaded.config, loaded.trusted);
            let begin = Begin::Resume(checkpoint.map(Box::new));
            run::run(setting, root, ask, begin, peer, cancel).await;
        });
    }
    Ok(())
}

/// session/load of a session this agent issued earlier, perhaps in another process: it is
/// open again with its choices, its conversation replayed (each run it started, or its last
/// goal when it kept none) and its last goal kept for `/rerun`.
fn load_saved(
    state: &State,
    (id, root): (&str, PathBuf),
    saved: Saved,
    req: &LoadSessionRequest,
    (responder, conn): (Responder<LoadSessionResponse>, ConnectionTo<Client>),
) -> Handled {
    // The history first, then the answer (ACP's order).
    for run in &saved.runs {
        replay::replay(&conn, id, &root, run);
    }
    if let (true, Some(goal)) = (saved.runs.is_empty(), &saved.last_goal) {
        notify(
            &conn,
            id,
            SessionUpdate::UserMessageChunk(text_chunk(goal.clone())),
        );
    }
    let answer = loaded_answer(&root, &saved);
    let session = Session::new(root.clone(), &req.mcp_servers, None, None).with_saved(saved);
    state.insert(id, session);
    responder.respond(answer)?;
    tell_trust(&conn, id, &root, None);
    offer_commands(&conn, id, &root);
    Ok(())
}

/// session/load's answer: the session's modes and options, its choices current.
fn loaded_answer(root: &Path, saved: &Saved) -> LoadSessionResponse {
    let config = agent_ls_runtime::runs::configuration(Some(root.to_path_buf())).config;
    LoadSessionResponse::new()
        .modes(options::modes(&config, saved))
        .config_options(options::options(&config, saved))
}
