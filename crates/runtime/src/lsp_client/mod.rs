//! agent-ls as a client of the project's own language servers (docs/project-lsp.md): after
//! each applied edit the edited files are opened or changed in the server that serves them,
//! its diagnostics are awaited within `lsp_servers.wait_ms`, and the errors the edit
//! introduced (`compare::introduced`) go back to the model before any test runs.
//!
//! A server starts lazily, on the first file it serves, inside the same sandbox and limits
//! as the tests, and lives for the run (`shutdown` ends it: `shutdown`, `exit`, then its
//! process group is killed). A server that is missing, exits or does not answer in time is
//! one warning and is not asked again in the run; the loop goes on as without it.
//! `settings.rs` is the `[lsp_servers]` section, `connection.rs` one server process and its
//! JSON-RPC, `compare.rs` which errors are new. Nothing here exports an LSP type.

mod compare;
mod connection;
mod forwarded;
pub mod settings;
mod settle;
mod uri;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ls_types::notification::{DidChangeTextDocument, DidOpenTextDocument, Notification};
use serde_json::json;
use tokio::time::Instant;

pub use compare::{FileError, introduced};
use connection::{Connection, ConnectionError};
pub use forwarded::Forwarded;
pub use settings::{LspServerConfig, LspServersConfig};
pub use uri::file_uri;

use crate::trust::sandbox::Sandbox;

/// How long a server must stay quiet about a file before its diagnostics are taken: it
/// publishes them in steps.
const QUIET: Duration = Duration::from_millis(200);
/// How long `shutdown` and `exit` may take before the process group is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(1000);

/// A file as an edit left it: its path relative to the workspace, its text before (`None`:
/// new) and after.
pub struct Edited<'a> {
    pub path: &'a str,
    pub before: Option<&'a str>,
    pub after: &'a str,
}

/// What checking an edit found: the errors it introduced, how long it waited, and the
/// warnings about servers given up.
#[derive(Debug, Default)]
pub struct Checked {
    pub new_errors: Vec<FileError>,
    pub wait_ms: u64,
    pub warnings: Vec<String>,
    /// Whether any server checked a file (none serves them, or all were given up: false).
    pub checked: bool,
}

/// A server of one language, as the run has it.
enum Slot {
    Running(Box<Server>),
    /// Given up for the run (missing, exited, too slow).
    Gone,
}

struct Server {
    connection: Connection,
    command: String,
    /// Each open file: the version last sent and its errors then.
    open: HashMap<String, (i32, Vec<FileError>)>,
}

/// The run's language servers, started on demand.
pub struct ProjectServers {
    root: PathBuf,
    sandbox: Sandbox,
    env: Vec<(String, String)>,
    wait: Duration,
    servers: Vec<(String, LspServerConfig)>,
    /// Every server that may be configured or built in, found on PATH or not: the files of
    /// a language some server checks.
    languages: Vec<(String, LspServerConfig)>,
    slots: HashMap<String, Slot>,
    /// Whether a program is on PATH (`tests_run::command::on_path`, passed in).
    on_path: fn(&str) -> bool,
}

impl ProjectServers {
    /// The servers `config` names or finds on PATH (as `on_path` tells) for the workspace at
    /// `root`, to run under `sandbox` with `env`; none is started yet.
    pub fn new(
        config: &LspServersConfig,
        root: &Path,
        (sandbox, env): (Sandbox, Vec<(String, String)>),
        on_path: fn(&str) -> bool,
    ) -> ProjectServers {
        let (servers, languages) = if config.enabled {
            (config.servers(on_path), config.servers(|_| true))
        } else {
            (Vec::new(), Vec::new())
        };
        ProjectServers {
            root: root.to_path_buf(),
            sandbox,
            env,
            wait: Duration::from_millis(config.wait_ms),
            servers,
            languages,
            slots: HashMap::new(),
            on_path,
        }
    }

    /// Whether `path` is of a language some server checks (the editor's diagnostics are
    /// waited for only for those).
    pub fn checked_language(&self, path: &str) -> bool {
        LspServersConfig::choose(&self.languages, path).is_some()
    }

    /// Whether some server may check `path`.
    pub fn serves(&self, path: &str) -> bool {
        LspServersConfig::choose(&self.servers, path)
            .is_some_and(|c| !matches!(self.slots.get(&c.language), Some(Slot::Gone)))
    }

    /// The errors the servers report in `files` as they are now (each opened, if it was
    /// not), within one wait budget: what is there before the run's first edit.
    pub async fn current(&mut self, files: &[(&str, &str)]) -> Checked {
        let started = Instant::now();
        let deadline = started + self.wait;
        let mut out = Checked::default();
        for (path, text) in files {
            let Some(language) = self.ready(path, deadline, &mut out.warnings).await else {
                continue;
            };
            match self.sync(&language, path, text, deadline).await {
                Ok(errors) => {
                    out.checked = true;
                    out.new_errors.extend(errors);
                }
                Err(e) => self.give_up(&language, &e, &mut out.warnings).await,
            }
        }
        out.wait_ms = started.elapsed().as_millis() as u64;
        out
    }

    /// Checks an applied edit: each edited file a server serves is brought to its text after
    /// the edit (opened first with its text before, when it was not open), and the errors
    /// not there before are returned, within one wait budget.
    pub async fn check(&mut self, edited: &[Edited<'_>]) -> Checked {
        let started = Instant::now();
        let deadline = started + self.wait;
        let mut out = Checked::default();
        for file in edited {
            let Some(language) = self.ready(file.path, deadline, &mut out.warnings).await else {
                continue;
            };
            let before_text = file.before.unwrap_or("");
            let result = match self.known(&language, file.path) {
                Some(before) => Ok(before),
                None => self.sync(&language, file.path, before_text, deadline).await,
            };
            let result = match result {
                Ok(before) => self
                    .sync(&language, file.path, file.after, deadline)
                    .await
                    .map(|after| introduced(&before, &after, before_text, file.after)),
                Err(e) => Err(e),
            };
            match result {
                Ok(new) => {
                    out.checked = true;
                    out.new_errors.extend(new);
                }
                Err(e) => self.give_up(&language, &e, &mut out.warnings).await,
            }
        }
        out.wait_ms = started.elapsed().as_millis() as u64;
        out
    }

    /// Ends every server: `shutdown`, `exit`, then its process group.
    pub async fn shutdown(mut self) {
        for (_, slot) in self.slots.drain() {
            if let Slot::Running(server) = slot {
                server.connection.shutdown(SHUTDOWN_GRACE).await;
            }
        }
    }

    /// The language of the running server for `path`, started now if it is not yet; `None`
    /// when none serves it or its server was given up (a warning when that happens now).
    async fn ready(
        &mut self,
        path: &str,
        deadline: Instant,
        warnings: &mut Vec<String>,
    ) -> Option<String> {
        let chosen = LspServersConfig::choose(&self.servers, path)?;
        match self.slots.get(&chosen.language) {
            Some(Slot::Running(_)) => return Some(chosen.language),
            Some(Slot::Gone) => return None,
            None => {}
        }
        let command = chosen.command.join(" ");
        match self.start(&chosen.command, deadline).await {
            Ok(connection) => {
                let server = Server {
                    connection,
                    command,
                    open: HashMap::new(),
                };
                self.slots
                    .insert(chosen.language.clone(), Slot::Running(Box::new(server)));
                Some(chosen.language)
            }
            Err(e) => {
                warnings.push(warning(&chosen.language, &command, &e, self.wait));
                self.slots.insert(chosen.language, Slot::Gone);
                None
            }
        }
    }

    async fn start(
        &self,
        command: &[String],
        deadline: Instant,
    ) -> Result<Connection, ConnectionError> {
        if !(self.on_path)(&command[0]) && !Path::new(&command[0]).is_file() {
            return Err(ConnectionError::Start {
                command: command.join(" "),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not found"),
            });
        }
        let argv = self.sandbox.wrap(&self.root, command);
        let mut connection = Connection::start(&argv, &self.root, &self.env)?;
        let name = self
            .root
            .file_name()
            .map_or("workspace".into(), |n| n.to_string_lossy().into_owned());
        match connection
            .initialize(&file_uri(&self.root), &name, deadline)
            .await
        {
            Ok(()) => Ok(connection),
            Err(e) => {
                connection.shutdown(Duration::ZERO).await;
                Err(e)
            }
        }
    }

    /// The errors last seen in `path`, when the server has it open.
    fn known(&self, language: &str, path: &str) -> Option<Vec<FileError>> {
        match self.slots.get(language) {
            Some(Slot::Running(s)) => s.open.get(path).map(|(_, e)| e.clone()),
            _ => None,
        }
    }

    /// Sends `text` as the file's content (opening it, or as its next version) and waits
    /// for its diagnostics: its errors then.
    async fn sync(
        &mut self,
        language: &str,
        path: &str,
        text: &str,
        deadline: Instant,
    ) -> Result<Vec<FileError>, ConnectionError> {
        let Some(Slot::Running(server)) = self.slots.get_mut(language) else {
            return Err(ConnectionError::Exited);
        };
        let uri = file_uri(&self.root.join(path));
        let after = server.connection.count();
        let version = match server.open.get(path) {
            Some((v, _)) => {
                let version = v + 1;
                let params = json!({
                    "textDocument": {"uri": uri, "version": version},
                    "contentChanges": [{"text": text}],
                });
                server
                    .connection
                    .notify(DidChangeTextDocument::METHOD, params)
                    .await?;
                version
            }
            None => {
                let params = json!({"textDocument": {
                    "uri": uri, "languageId": language_id(language, path), "version": 1, "text": text,
                }});
                server
                    .connection
                    .notify(DidOpenTextDocument::METHOD, params)
                    .await?;
                1
            }
        };
        let diagnostics = server
            .connection
            .diagnostics(&uri, (after, version), QUIET, deadline)
            .await?;
        let errors: Vec<FileError> = diagnostics
            .into_iter()
            .filter(|d| {
                d.severity
                    .is_none_or(|s| s == ls_types::DiagnosticSeverity::ERROR)
            })
            .map(|d| FileError {
                path: path.to_string(),
                line: d.range.start.line,
                character: d.range.start.character,
                message: d.message,
                code: d.code.map(|c| match c {
                    ls_types::NumberOrString::Number(n) => n.to_string(),
                    ls_types::NumberOrString::String(s) => s,
                }),
            })
            .collect();
        server
            .open
            .insert(path.to_string(), (version, errors.clone()));
        Ok(errors)
    }

    /// The server of `language` failed: one warning, and it is not asked again.
    async fn give_up(&mut self, language: &str, e: &ConnectionError, warnings: &mut Vec<String>) {
        if let Some(Slot::Running(server)) = self.slots.insert(language.to_string(), Slot::Gone) {
            warnings.push(warning(language, &server.command, e, self.wait));
            server.connection.shutdown(Duration::ZERO).await;
        }
    }
}

/// The one warning about a server given up.
fn warning(language: &str, command: &str, e: &ConnectionError, wait: Duration) -> String {
    let why = match e {
        ConnectionError::Timeout => format!(
            "it did not answer within {} ms (lsp_servers.wait_ms)",
            wait.as_millis()
        ),
        other => other.to_string(),
    };
    format!(
        "the {language} language server (`{command}`) is not used in this run: {why}; edits are checked by the tests alone"
    )
}

/// The languageId the protocol names for a file.
fn language_id(language: &str, path: &str) -> String {
    let ext = path.rsplit('.').next().unwrap_or("");
    match ext {
        "py" | "pyi" => "python",
        "rs" => "rust",
        "go" => "go",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "typescriptreact",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        _ => language,
    }
    .to_string()
}
