//! The sessions of `agent-ls acp`: what this process holds of each (its folder, its MCP
//! servers, the run going on, the last goal, the agent and model chosen for its runs), and the
//! small file that lets another process load, resume or list a session this agent issued
//! (`.agent-ls/acp-sessions/<id>.json`: the last goal, the runs it started, the choices).

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
    /// What is kept on disk for another process: the runs started, the agent and the model.
    pub saved: Saved,
    /// What the session's runs have spent on model calls, in US dollars, as `[prices]` says.
    pub cost_usd: f64,
}

/// What a session keeps on disk. `agent` and `model` are the user's choices for the next
/// runs (`None`: the configuration's default).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Saved {
    #[serde(default)]
    pub last_goal: Option<String>,
    /// The runs the session's prompts started, oldest first: its conversation.
    #[serde(default)]
    pub runs: Vec<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
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
            saved: Saved::default(),
            cost_usd: 0.0,
        }
    }

    /// The same session, with what was kept of it.
    pub fn with_saved(mut self, saved: Saved) -> Self {
        if self.last_goal.is_none() {
            self.last_goal = saved.last_goal.clone();
        }
        self.saved = saved;
        self
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

    /// The folder of open session `id`.
    pub fn root_of(&self, id: &str) -> Option<PathBuf> {
        let sessions = self.sessions.lock().ok()?;
        sessions.get(id).map(|s| s.root.clone())
    }

    /// The folders of the open sessions, or this process's folder when none is open: where a
    /// list without a folder looks.
    pub fn roots(&self) -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = self
            .sessions
            .lock()
            .map(|s| s.values().map(|s| s.root.clone()).collect())
            .unwrap_or_default();
        roots.sort();
        roots.dedup();
        if roots.is_empty() {
            roots.extend(
                std::env::current_dir()
                    .ok()
                    .and_then(|d| d.canonicalize().ok()),
            );
        }
        roots
    }

    /// Adds what a run of session `id` spent to the session's cost.
    pub fn spent(&self, id: &str, usd: f64) {
        if let Ok(mut sessions) = self.sessions.lock()
            && let Some(s) = sessions.get_mut(id)
        {
            s.cost_usd += usd;
        }
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

/// Records a session (its last goal, runs and choices); a store that cannot be written costs
/// only loading the session later.
pub(super) fn save_session(root: &Path, id: &str, saved: &Saved) {
    let Some(path) = session_file(root, id) else {
        return;
    };
    let mut value = serde_json::to_value(saved).unwrap_or_default();
    value["id"] = serde_json::json!(id);
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| std::fs::write(&path, value.to_string()));
    if let Err(e) = written {
        tracing::warn!("cannot keep session {id} in {}: {e}", path.display());
    }
}

/// What was kept of session `id` in `root`, or `None` when this folder has no such session.
pub(super) fn saved_session(root: &Path, id: &str) -> Option<Saved> {
    let text = std::fs::read_to_string(session_file(root, id)?).ok()?;
    serde_json::from_str(&text).ok()
}

/// The sessions kept in `root`: each id, what was kept, and when it was last written (ms).
pub(super) fn saved_sessions(root: &Path) -> Vec<(String, Saved, i64)> {
    let dir = root.join(".agent-ls").join("acp-sessions");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let id = name.strip_suffix(".json")?.to_string();
            let saved = saved_session(root, &id)?;
            let modified = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as i64);
            Some((id, saved, modified))
        })
        .collect()
}
