//! The sessions of `agent-ls acp`: what this process holds of each (its folder, its MCP
//! servers, the run going on, the last goal), and the small file that lets another process
//! load a session this agent issued (`.agent-ls/acp-sessions/<id>.json`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema;
use agent_ls_runtime::config::McpServerConfig;
use tokio_util::sync::CancellationToken;

use super::client::ClientFs;

pub(super) struct Session {
    pub root: PathBuf,
    /// The session's own MCP servers (`mcpServers` of session/new), beside the configured ones.
    pub mcp: Vec<(String, McpServerConfig)>,
    pub cancel: Option<CancellationToken>,
    pub last_goal: Option<String>,
    /// The untrusted folder's ignored settings were told in a prompt turn.
    pub told_trust: bool,
}

impl Session {
    /// A session in `root` with the client's MCP servers, the run's `cancel` when one is going
    /// on, and the goal to run again with `/rerun`.
    pub fn new(
        root: PathBuf,
        servers: &[schema::McpServer],
        cancel: Option<CancellationToken>,
        last_goal: Option<String>,
    ) -> Self {
        // A session's runs start with the whole map, as the editor's do: it is built now, at a
        // low priority, and kept while the agent serves (docs/bigrepo.md).
        agent_ls_runtime::repomap::warm::keep(&root);
        Session {
            root,
            mcp: session_mcp(servers),
            cancel,
            last_goal,
            told_trust: false,
        }
    }
}

/// The server's state, shared by its handlers.
#[derive(Clone, Default)]
pub(super) struct State {
    pub fs: Arc<Mutex<ClientFs>>,
    pub sessions: Arc<Mutex<HashMap<String, Session>>>,
}

impl State {
    /// What the client said it can do with files.
    pub fn client_fs(&self) -> ClientFs {
        self.fs.lock().map(|f| *f).unwrap_or_default()
    }

    /// Opens (or opens again) session `id`.
    pub fn insert(&self, id: &str, session: Session) {
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(id.to_string(), session);
        }
    }
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
pub(super) fn save_session(root: &Path, id: &str, last_goal: Option<&str>) {
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
pub(super) fn saved_session(root: &Path, id: &str) -> Option<Option<String>> {
    let text = std::fs::read_to_string(session_file(root, id)?).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(value["last_goal"].as_str().map(String::from))
}
