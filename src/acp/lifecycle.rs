//! The session requests beside new, load and prompt: `session/list` (the sessions this agent
//! issued and the runs recorded in a folder, from disk, so the list outlives the process),
//! `session/resume` (a session opened again without its history), `session/close`, and the
//! choices of the next run's agent and model (`session/set_mode`,
//! `session/set_config_option`).

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    CloseSessionRequest, CloseSessionResponse, ConfigOptionUpdate, CurrentModeUpdate,
    ListSessionsRequest, ListSessionsResponse, ResumeSessionRequest, ResumeSessionResponse,
    SessionConfigOptionValue, SessionInfo, SessionUpdate, SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse, SetSessionModeRequest, SetSessionModeResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Client, Error};
use agent_ls_runtime::clock::iso8601;

use super::client::notify;
use super::opening::{Handled, not_found, offer_commands, tell_trust};
use super::options::{self, MODE};
use super::sessions::{Saved, Session, State, save_session, saved_session, saved_sessions};

/// How many sessions one `session/list` page holds.
const PAGE: usize = 50;

/// session/list: the sessions of `cwd` (or, without one, of every folder this process has a
/// session in), newest first, a page at a time; the cursor is where the next page starts.
pub(super) fn list(
    state: &State,
    req: ListSessionsRequest,
    responder: Responder<ListSessionsResponse>,
    _conn: ConnectionTo<Client>,
) -> Handled {
    let start = match req.cursor.as_deref().map(str::parse::<usize>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return responder.respond_with_error(
                Error::invalid_params().data("the cursor is not one session/list gave"),
            );
        }
    };
    let roots: Vec<PathBuf> = match &req.cwd {
        Some(cwd) => cwd.canonicalize().into_iter().collect(),
        None => state.roots(),
    };
    let mut all: Vec<(i64, SessionInfo)> = roots.iter().flat_map(|r| listed(r)).collect();
    all.sort_by_key(|(ms, _)| std::cmp::Reverse(*ms));
    let next = (all.len() > start + PAGE).then(|| (start + PAGE).to_string());
    let page = all.into_iter().skip(start).take(PAGE).map(|(_, s)| s);
    responder.respond(ListSessionsResponse::new(page.collect()).next_cursor(next))
}

/// The sessions of `root`, each with when it was last active: the sessions this agent issued
/// (titled with their last goal), then the recorded runs no such session started (each
/// loadable by its id, titled with its goal).
fn listed(root: &Path) -> Vec<(i64, SessionInfo)> {
    let saved = saved_sessions(root);
    let of_sessions: Vec<&String> = saved.iter().flat_map(|(_, s, _)| &s.runs).collect();
    let sessions = saved.iter().map(|(id, s, ms)| {
        let info = SessionInfo::new(id.clone(), root.to_path_buf())
            .title(s.last_goal.clone())
            .updated_at(iso8601(*ms));
        (*ms, info)
    });
    let runs = agent_ls_runtime::journal::list(root)
        .into_iter()
        .filter(|r| !of_sessions.contains(&&r.run_id))
        .map(|r| {
            let ms = r.started_ms as i64;
            let info = SessionInfo::new(r.run_id, root.to_path_buf())
                .title(r.goal)
                .updated_at(iso8601(ms));
            (ms, info)
        });
    sessions.chain(runs).collect()
}

/// session/resume: a session this agent issued (or a recorded run) opens again, with its
/// choices, and without streaming its history (that is session/load).
pub(super) fn resume(
    state: &State,
    req: ResumeSessionRequest,
    responder: Responder<ResumeSessionResponse>,
    conn: ConnectionTo<Client>,
) -> Handled {
    let id = req.session_id.to_string();
    let Ok(root) = req.cwd.canonicalize() else {
        return responder.respond_with_error(Error::invalid_params().data("cwd is not a folder"));
    };
    let saved = match saved_session(&root, &id) {
        Some(s) => s,
        None => match agent_ls_runtime::journal::list(&root)
            .into_iter()
            .find(|r| r.run_id == id)
        {
            Some(run) => Saved {
                last_goal: Some(run.goal),
                ..Saved::default()
            },
            None => return responder.respond_with_error(not_found(&id, &root)),
        },
    };
    let config = agent_ls_runtime::runs::configuration(Some(root.clone())).config;
    let answer = ResumeSessionResponse::new()
        .modes(options::modes(&config, &saved))
        .config_options(options::options(&config, &saved));
    let session = Session::new(root.clone(), &req.mcp_servers, None, None).with_saved(saved);
    state.insert(&id, session);
    responder.respond(answer)?;
    tell_trust(&conn, &id, &root, None);
    offer_commands(&conn, &id, &root);
    Ok(())
}

/// session/close: the session's run stops, as on session/cancel, and this process forgets it
/// (it stays on disk, to be loaded or resumed).
pub(super) fn close(
    state: &State,
    req: CloseSessionRequest,
    responder: Responder<CloseSessionResponse>,
    _conn: ConnectionTo<Client>,
) -> Handled {
    let id = req.session_id.to_string();
    let closed = state
        .sessions
        .lock()
        .ok()
        .and_then(|mut sessions| sessions.remove(&id));
    match closed {
        Some(session) => {
            if let Some(c) = &session.cancel {
                c.cancel();
            }
            responder.respond(CloseSessionResponse::new())
        }
        None => responder
            .respond_with_error(Error::invalid_params().data(format!("no open session {id}"))),
    }
}

/// session/set_mode: the agent of the session's next runs. The options follow as an update.
pub(super) fn set_mode(
    state: &State,
    req: SetSessionModeRequest,
    responder: Responder<SetSessionModeResponse>,
    conn: ConnectionTo<Client>,
) -> Handled {
    let id = req.session_id.to_string();
    let value = SessionConfigOptionValue::value_id(req.mode_id.to_string());
    match choose(state, &id, MODE, &value) {
        Ok(options) => {
            responder.respond(SetSessionModeResponse::new())?;
            notify(
                &conn,
                &id,
                SessionUpdate::ConfigOptionUpdate(ConfigOptionUpdate::new(options)),
            );
            Ok(())
        }
        Err(e) => responder.respond_with_error(e),
    }
}

/// session/set_config_option: the mode or the model of the session's next runs; the answer is
/// every option as it now is. A new mode is also told as ACP's older mode update.
pub(super) fn set_config_option(
    state: &State,
    req: SetSessionConfigOptionRequest,
    responder: Responder<SetSessionConfigOptionResponse>,
    conn: ConnectionTo<Client>,
) -> Handled {
    let id = req.session_id.to_string();
    let option = req.config_id.to_string();
    match choose(state, &id, &option, &req.value) {
        Ok(options) => {
            responder.respond(SetSessionConfigOptionResponse::new(options))?;
            if option == MODE
                && let Some(mode) = req.value.as_value_id()
            {
                notify(
                    &conn,
                    &id,
                    SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(mode.to_string())),
                );
            }
            Ok(())
        }
        Err(e) => responder.respond_with_error(e),
    }
}

/// Sets option `option` of session `id` to `value`, keeps the choice on disk, and gives the
/// session's options as they now are; invalid params when the session, the option or the
/// value is unknown.
fn choose(
    state: &State,
    id: &str,
    option: &str,
    value: &SessionConfigOptionValue,
) -> Result<Vec<agent_client_protocol::v1::schema::SessionConfigOption>, Error> {
    let Some(root) = state.root_of(id) else {
        return Err(Error::invalid_params().data(format!("no session {id}")));
    };
    let config = agent_ls_runtime::runs::configuration(Some(root.clone())).config;
    let Ok(mut sessions) = state.sessions.lock() else {
        return Err(Error::internal_error());
    };
    let Some(session) = sessions.get_mut(id) else {
        return Err(Error::invalid_params().data(format!("no session {id}")));
    };
    options::set(&config, &mut session.saved, option, value)
        .map_err(|e| Error::invalid_params().data(e.to_string()))?;
    save_session(&root, id, &session.saved);
    Ok(options::options(&config, &session.saved))
}
