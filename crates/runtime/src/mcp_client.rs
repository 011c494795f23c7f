//! The MCP client: the stdio servers of `[mcp.servers.NAME]` started for a run (the official
//! `rmcp` SDK), their tools offered beside the built-in ones as `mcp__NAME__tool`. Every call
//! has a timeout; a server that crashes is restarted once, and after a second crash its tools
//! are withdrawn with a warning while the built-in tools keep working. Each server runs in a
//! process group of its own, ended whole when the run ends.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::Value;
use tokio::sync::Mutex;

use crate::config::McpServerConfig;
use crate::model::ToolSpec;

/// The prefix of every MCP tool's name in the registry; `mcp__*` in an agent's tools means
/// all of them.
pub const PREFIX: &str = "mcp__";
pub const ALL: &str = "mcp__*";

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot start `{command}`: {source}")]
    Start {
        command: String,
        source: std::io::Error,
    },
    #[error("it did not start an MCP session: {0}")]
    Session(Box<rmcp::service::ClientInitializeError>),
    #[error("it did not answer `initialize` within 30 s")]
    NoAnswer,
}

/// Why an MCP tool call gave no answer. The text is the tool result the model reads.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("there is no MCP tool `{0}`")]
    NoSuchTool(String),
    #[error("the MCP server `{0}` crashed twice; its tools are withdrawn for this run")]
    Withdrawn(String),
    #[error("the arguments must be an object, not {0}")]
    NotAnObject(Value),
    #[error("the MCP server `{0}` is not running")]
    NotRunning(String),
    #[error("`{tool}` did not answer within {seconds} s (mcp.call_timeout_secs)")]
    Timeout { tool: String, seconds: u64 },
    /// The tool answered, with an error: its text.
    #[error("{0}")]
    Tool(String),
    #[error("`{tool}` failed: {source}")]
    Failed {
        tool: String,
        source: Box<rmcp::service::ServiceError>,
    },
    #[error(
        "the MCP server `{server}` crashed again ({reason}); its tools are withdrawn for this run"
    )]
    CrashedAgain {
        server: String,
        reason: Box<rmcp::service::ServiceError>,
    },
    #[error(
        "the MCP server `{server}` crashed and did not restart ({why}); its tools are withdrawn for this run"
    )]
    NoRestart {
        server: String,
        #[source]
        why: ConnectError,
    },
    #[error("`{0}` failed twice")]
    FailedTwice(String),
    /// A thread panicked while it held the server's state.
    #[error("poisoned")]
    Poisoned,
}

impl McpError {
    /// The server's tools are gone for the rest of the run: worth a warning to the user.
    pub fn withdraws_tools(&self) -> bool {
        matches!(
            self,
            McpError::Withdrawn(_) | McpError::CrashedAgain { .. } | McpError::NoRestart { .. }
        )
    }
}

struct Connection {
    service: RunningService<RoleClient, ()>,
    /// The server's process group, ended whole on shutdown.
    pgid: Option<i32>,
}

struct Server {
    name: String,
    config: McpServerConfig,
    connection: Mutex<Option<Connection>>,
    /// Restarts used (one is allowed), and whether its tools are withdrawn.
    state: std::sync::Mutex<(u32, bool)>,
}

impl Server {
    /// After the server went away during a call: restarts it, once per run (`attempt` 0 of
    /// the call), into `guard`; otherwise, or when it does not start, withdraws its tools.
    async fn restart(
        &self,
        guard: &mut Option<Connection>,
        attempt: u32,
        e: rmcp::service::ServiceError,
        root: &Path,
    ) -> Result<(), McpError> {
        if let Some(old) = guard.take() {
            end_group(old.pgid);
        }
        let first = {
            let mut s = self.state.lock().map_err(|_| McpError::Poisoned)?;
            if s.0 == 0 && attempt == 0 {
                s.0 = 1;
                true
            } else {
                s.1 = true;
                false
            }
        };
        if !first {
            return Err(McpError::CrashedAgain {
                server: self.name.clone(),
                reason: Box::new(e),
            });
        }
        tracing::warn!(server = %self.name, "the MCP server crashed ({e}); restarting it once");
        match connect(&self.config, root).await {
            Ok(c) => {
                *guard = Some(c);
                Ok(())
            }
            Err(why) => {
                if let Ok(mut s) = self.state.lock() {
                    s.1 = true;
                }
                Err(McpError::NoRestart {
                    server: self.name.clone(),
                    why,
                })
            }
        }
    }
}

/// The tool's answer as the model reads it: its text parts, else its structured content; an
/// answer the tool marks as an error is `McpError::Tool`.
fn answer(result: &rmcp::model::CallToolResult) -> Result<String, McpError> {
    let text: Vec<String> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    let mut text = text.join("\n");
    if text.is_empty()
        && let Some(s) = &result.structured_content
    {
        text = s.to_string();
    }
    if result.is_error == Some(true) {
        Err(McpError::Tool(text))
    } else {
        Ok(text)
    }
}

/// Whether a failed call means the server is gone: a transport that broke or closed (or a
/// cancelled session). Any other error is one the server answered with, the call's own.
fn gone(conn: &Connection, e: &rmcp::service::ServiceError) -> bool {
    use rmcp::service::ServiceError as E;
    conn.service.is_closed()
        || matches!(
            e,
            E::TransportClosed | E::TransportSend(_) | E::Cancelled { .. }
        )
}

/// One MCP tool as the registry offers it.
#[derive(Debug, Clone)]
struct Entry {
    server: usize,
    tool: String,
    spec: ToolSpec,
}

/// The MCP servers of a run and their tools.
#[derive(Default)]
pub struct McpTools {
    servers: Vec<Server>,
    tools: BTreeMap<String, Entry>,
    timeout: Duration,
}

async fn connect(config: &McpServerConfig, root: &Path) -> Result<Connection, ConnectError> {
    let mut cmd = tokio::process::Command::new(&config.command);
    cmd.args(&config.args)
        .current_dir(root)
        .env_clear()
        .process_group(0);
    crate::child::start_clean_async(&mut cmd);
    // A server sees PATH and HOME, and the variables its configuration names.
    for key in ["PATH", "HOME", "LANG", "TMPDIR", "USER"] {
        if let Ok(v) = std::env::var(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(&config.env);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|source| ConnectError::Start {
            command: config.command.clone(),
            source,
        })?;
    let pgid = transport.id().map(|p| p as i32);
    match tokio::time::timeout(Duration::from_secs(30), ().serve(transport)).await {
        Ok(Ok(service)) => Ok(Connection { service, pgid }),
        Ok(Err(e)) => {
            end_group(pgid);
            Err(ConnectError::Session(Box::new(e)))
        }
        Err(_) => {
            end_group(pgid);
            Err(ConnectError::NoAnswer)
        }
    }
}

fn end_group(pgid: Option<i32>) {
    if let Some(pgid) = pgid {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

impl McpTools {
    /// Starts every configured server and lists its tools. A server that does not start is
    /// left out with a warning; the others and the built-in tools work as usual.
    pub async fn connect(
        servers: &BTreeMap<String, McpServerConfig>,
        root: &Path,
        timeout: Duration,
    ) -> (McpTools, Vec<String>) {
        let mut out = McpTools {
            timeout,
            ..McpTools::default()
        };
        let mut warnings = Vec::new();
        for (name, config) in servers {
            let connection = match connect(config, root).await {
                Ok(c) => c,
                Err(e) => {
                    warnings.push(format!(
                        "the MCP server `{name}` is not available ({e}); its tools are left out"
                    ));
                    continue;
                }
            };
            let listed = tokio::time::timeout(timeout, connection.service.list_all_tools()).await;
            let tools = match listed {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    warnings.push(format!(
                        "the MCP server `{name}` did not list its tools ({e}); they are left out"
                    ));
                    end_group(connection.pgid);
                    continue;
                }
                Err(_) => {
                    warnings.push(format!(
                        "the MCP server `{name}` did not list its tools in time; they are left out"
                    ));
                    end_group(connection.pgid);
                    continue;
                }
            };
            let index = out.servers.len();
            for t in tools {
                let full = format!("{PREFIX}{name}__{}", t.name);
                out.tools.insert(
                    full.clone(),
                    Entry {
                        server: index,
                        tool: t.name.to_string(),
                        spec: ToolSpec {
                            name: full,
                            description: t.description.as_deref().unwrap_or("").to_string(),
                            parameters: Value::Object((*t.input_schema).clone()),
                        },
                    },
                );
            }
            out.servers.push(Server {
                name: name.clone(),
                config: config.clone(),
                connection: Mutex::new(Some(connection)),
                state: std::sync::Mutex::new((0, false)),
            });
        }
        (out, warnings)
    }

    fn withdrawn(&self, server: usize) -> bool {
        self.servers[server]
            .state
            .lock()
            .map(|s| s.1)
            .unwrap_or(true)
    }

    /// The tools offered for `names` (an agent's list): those it names, or all with `mcp__*`;
    /// a withdrawn server's are gone.
    pub fn specs(&self, names: &[String]) -> Vec<ToolSpec> {
        let all = names.iter().any(|n| n == ALL);
        self.tools
            .iter()
            .filter(|(full, e)| (all || names.contains(full)) && !self.withdrawn(e.server))
            .map(|(_, e)| e.spec.clone())
            .collect()
    }

    /// Calls an MCP tool by its registry name; the answer (or why there is none) is text for
    /// the model, and `Err` marks a failed call.
    pub async fn call(&self, full: &str, args: &Value, root: &Path) -> Result<String, McpError> {
        let entry = self
            .tools
            .get(full)
            .ok_or_else(|| McpError::NoSuchTool(full.into()))?;
        let server = &self.servers[entry.server];
        if self.withdrawn(entry.server) {
            return Err(McpError::Withdrawn(server.name.clone()));
        }
        let arguments = match args {
            Value::Object(m) => m.clone(),
            Value::Null => serde_json::Map::new(),
            other => return Err(McpError::NotAnObject(other.clone())),
        };
        for attempt in 0..2 {
            let mut guard = server.connection.lock().await;
            let Some(conn) = guard.as_ref() else {
                return Err(McpError::NotRunning(server.name.clone()));
            };
            let params =
                CallToolRequestParams::new(entry.tool.clone()).with_arguments(arguments.clone());
            match tokio::time::timeout(self.timeout, conn.service.call_tool(params)).await {
                Err(_) => {
                    return Err(McpError::Timeout {
                        tool: full.into(),
                        seconds: self.timeout.as_secs(),
                    });
                }
                Ok(Ok(result)) => return answer(&result),
                Ok(Err(e)) if !gone(conn, &e) => {
                    return Err(McpError::Failed {
                        tool: full.into(),
                        source: Box::new(e),
                    });
                }
                Ok(Err(e)) => server.restart(&mut guard, attempt, e, root).await?,
            }
        }
        Err(McpError::FailedTwice(full.into()))
    }

    /// The warning at the run's end naming the servers withdrawn during it, if any: the
    /// warning given when one was withdrawn may be long scrolled away by then, and the run's
    /// answer may rest on tools that stopped being offered.
    pub fn withdrawn_warning(&self) -> Option<String> {
        let names: Vec<String> = (0..self.servers.len())
            .filter(|i| self.withdrawn(*i))
            .map(|i| format!("`{}`", self.servers[i].name))
            .collect();
        (!names.is_empty()).then(|| {
            format!(
                "MCP servers withdrawn during this run (their tools were not offered after): {}",
                names.join(", ")
            )
        })
    }

    /// Ends every server: its session, then its whole process group.
    pub async fn shutdown(self) {
        for s in self.servers {
            if let Some(conn) = s.connection.into_inner() {
                let pgid = conn.pgid;
                let _ = tokio::time::timeout(Duration::from_secs(2), conn.service.cancel()).await;
                end_group(pgid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server as `connect` leaves it, without a process: `restarts` used and `withdrawn`.
    fn server(name: &str, restarts: u32, withdrawn: bool) -> Server {
        Server {
            name: name.into(),
            config: McpServerConfig::default(),
            connection: Mutex::new(None),
            state: std::sync::Mutex::new((restarts, withdrawn)),
        }
    }

    #[test]
    fn the_end_of_run_warning_names_the_withdrawn_servers_alone() {
        let tools = McpTools {
            servers: vec![
                server("docs", 1, true),
                server("files", 1, false),
                server("web", 1, true),
            ],
            ..McpTools::default()
        };
        assert_eq!(
            tools.withdrawn_warning().as_deref(),
            Some(
                "MCP servers withdrawn during this run (their tools were not offered after): `docs`, `web`"
            )
        );
    }

    #[test]
    fn no_warning_when_every_server_kept_its_tools() {
        let tools = McpTools {
            servers: vec![server("docs", 0, false), server("files", 1, false)],
            ..McpTools::default()
        };
        assert_eq!(tools.withdrawn_warning(), None);
        assert_eq!(McpTools::default().withdrawn_warning(), None);
    }
}
