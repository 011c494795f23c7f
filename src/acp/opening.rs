//! What a session says as it opens (new, loaded or resumed): the commands it offers, and
//! the notice of an untrusted folder's ignored settings; and the answers every session
//! request shares (a handler's result, the error for an id this folder does not know).

use std::path::Path;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{AvailableCommandsUpdate, SessionUpdate};
use agent_ls_runtime::config;

use super::client::{notify, say};
use super::commands;

/// What a handler answers the protocol with.
pub(super) type Handled = Result<(), agent_client_protocol::Error>;

/// Lists the session's commands at the client.
pub(super) fn offer_commands(conn: &ConnectionTo<Client>, session: &str, root: &Path) {
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
pub(super) fn tell_trust(
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

/// The error a load or resume of an id this folder does not know answers: acpx and other
/// hosts start a new session on exactly this code.
pub(super) fn not_found(id: &str, root: &Path) -> agent_client_protocol::Error {
    agent_client_protocol::Error::new(
        agent_client_protocol::ErrorCode::RESOURCE_NOT_FOUND,
        "Resource not found",
    )
    .data(format!(
        "no session or recorded run {id} in {}",
        root.display()
    ))
}
