//! One language server process and the JSON-RPC between us: started in the sandbox in a
//! process group of its own, its stdout read by a task that answers its requests (with
//! nothing: we configure nothing), hands responses to their callers and keeps the latest
//! diagnostics of each file, each with a count that tells a fresh publication from an old
//! one. The wire types are `ls_types`'; none leaves the `lsp_client` folder.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ls_types::notification::{Exit, Initialized, Notification, PublishDiagnostics};
use ls_types::request::{Initialize, Request, Shutdown, WorkspaceConfiguration};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use super::settle::{Settled, settle};

/// Why talking to a server failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("could not start `{command}`: {source}")]
    Start {
        command: String,
        source: std::io::Error,
    },
    #[error("it did not answer within the wait budget")]
    Timeout,
    #[error("it exited")]
    Exited,
    #[error("it answered `{method}` with an error: {message}")]
    Refused { method: String, message: String },
    #[error("writing to it failed: {0}")]
    Write(std::io::Error),
}

/// The latest diagnostics of one file: the publication's count, its version, and the items.
#[derive(Debug, Clone, Default)]
pub struct Published {
    pub count: u64,
    pub version: Option<i32>,
    pub diagnostics: Vec<ls_types::Diagnostic>,
}

/// What the reader task and the callers share.
#[derive(Default)]
struct Shared {
    pending: HashMap<i64, oneshot::Sender<Value>>,
    published: HashMap<String, Published>,
    /// Publications so far, of every file.
    count: u64,
    alive: bool,
}

pub struct Connection {
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
    shared: Arc<Mutex<Shared>>,
    changed: Arc<Notify>,
    next_id: i64,
    child: Option<Child>,
    pgid: Option<i32>,
}

impl Connection {
    /// Starts `argv` (already wrapped in the sandbox) in `root` with exactly `env`.
    pub fn start(
        argv: &[String],
        root: &Path,
        env: &[(String, String)],
    ) -> Result<Connection, ConnectionError> {
        let start = |source| ConnectionError::Start {
            command: argv.join(" "),
            source,
        };
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| start(std::io::Error::other("empty command")))?;
        let mut command = Command::new(program);
        crate::child::start_clean_async(&mut command);
        let mut child = command
            .args(args)
            .current_dir(root)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(start)?;
        let pgid = child.id().map(|p| p as i32);
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(start(std::io::Error::other("no pipes")));
        };
        let stdin = Arc::new(tokio::sync::Mutex::new(stdin));
        let shared = Arc::new(Mutex::new(Shared {
            alive: true,
            ..Shared::default()
        }));
        let changed = Arc::new(Notify::new());
        tokio::spawn(read_loop(
            stdout,
            stdin.clone(),
            shared.clone(),
            changed.clone(),
        ));
        Ok(Connection {
            stdin,
            shared,
            changed,
            next_id: 0,
            child: Some(child),
            pgid,
        })
    }

    /// `initialize` and `initialized`, for the workspace at `root_uri`, by `deadline`.
    pub async fn initialize(
        &mut self,
        root_uri: &str,
        name: &str,
        deadline: Instant,
    ) -> Result<(), ConnectionError> {
        // No process id: a server told one checks now and then that the process lives, and
        // exits when it cannot tell (the sandbox may deny it a signal to a process outside);
        // its life is ours to end anyway.
        let params = json!({
            "processId": null,
            "rootUri": root_uri,
            "workspaceFolders": [{"uri": root_uri, "name": name}],
            "capabilities": {
                "textDocument": {
                    "synchronization": {"didSave": false, "dynamicRegistration": false},
                    "publishDiagnostics": {"versionSupport": true, "relatedInformation": false},
                },
                "workspace": {"configuration": true, "workspaceFolders": true},
                "window": {"workDoneProgress": false},
            },
            "clientInfo": {"name": "agent-ls", "version": env!("CARGO_PKG_VERSION")},
        });
        self.request(Initialize::METHOD, params, deadline).await?;
        self.notify(Initialized::METHOD, json!({})).await
    }

    /// Sends a request and waits for its result until `deadline`.
    pub async fn request(
        &mut self,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<Value, ConnectionError> {
        self.next_id += 1;
        let id = self.next_id;
        let (tx, rx) = oneshot::channel();
        lock(&self.shared).pending.insert(id, tx);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        write(&self.stdin, &message).await?;
        let answer = match tokio::time::timeout_at(deadline, rx).await {
            Err(_) => {
                lock(&self.shared).pending.remove(&id);
                return Err(ConnectionError::Timeout);
            }
            Ok(Err(_)) => return Err(ConnectionError::Exited),
            Ok(Ok(answer)) => answer,
        };
        if let Some(error) = answer.get("error") {
            return Err(ConnectionError::Refused {
                method: method.to_string(),
                message: error["message"].as_str().unwrap_or("").to_string(),
            });
        }
        Ok(answer.get("result").cloned().unwrap_or(Value::Null))
    }

    pub async fn notify(&self, method: &str, params: Value) -> Result<(), ConnectionError> {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        write(&self.stdin, &message).await
    }

    /// The count of publications so far, to wait for one after it.
    pub fn count(&self) -> u64 {
        lock(&self.shared).count
    }

    /// The diagnostics of `uri` published after publication `after` (and for `version` or
    /// later, when the server names versions), once the server has been quiet about the
    /// file for `quiet`: servers publish a file's errors in steps (syntax, then types).
    /// Whatever came by `deadline` when something did; a timeout when nothing did.
    pub async fn diagnostics(
        &self,
        uri: &str,
        (after, version): (u64, i32),
        quiet: Duration,
        deadline: Instant,
    ) -> Result<Vec<ls_types::Diagnostic>, ConnectionError> {
        let look = || {
            let shared = lock(&self.shared);
            let fresh = shared
                .published
                .get(&normal(uri))
                .filter(|p| p.count > after && p.version.is_none_or(|v| v >= version))
                .map(|p| (p.count, p.diagnostics.clone()));
            (shared.alive, fresh)
        };
        match settle(&self.changed, quiet, deadline, look).await {
            Settled::Value(diagnostics) => Ok(diagnostics),
            Settled::Gone => Err(ConnectionError::Exited),
            Settled::Timeout => Err(ConnectionError::Timeout),
        }
    }

    /// `shutdown` and `exit` within `grace`, then the process group is ended whatever it did.
    pub async fn shutdown(mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        if lock(&self.shared).alive
            && self
                .request(Shutdown::METHOD, Value::Null, deadline)
                .await
                .is_ok()
        {
            let _ = self.notify(Exit::METHOD, Value::Null).await;
            if let Some(child) = self.child.as_mut() {
                let _ = tokio::time::timeout_at(deadline, child.wait()).await;
            }
        }
        self.kill();
    }

    /// Ends the server's whole process group, and the sandbox's group of it once reaped.
    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if let Some(mut child) = self.child.take() {
            let pid = child.id();
            let _ = child.start_kill();
            tokio::spawn(async move {
                let _ = child.wait().await;
                if let Some(pid) = pid {
                    crate::trust::limits::remove_group(pid);
                }
            });
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes one framed message.
async fn write(
    stdin: &tokio::sync::Mutex<ChildStdin>,
    message: &Value,
) -> Result<(), ConnectionError> {
    let body = message.to_string();
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(body.as_bytes());
    let mut stdin = stdin.lock().await;
    stdin
        .write_all(&frame)
        .await
        .map_err(ConnectionError::Write)?;
    stdin.flush().await.map_err(ConnectionError::Write)
}

/// Reads the server's messages until its stdout closes: responses go to their callers,
/// requests are answered, diagnostics are kept. Then the server is marked gone.
async fn read_loop(
    stdout: ChildStdout,
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
    shared: Arc<Mutex<Shared>>,
    changed: Arc<Notify>,
) {
    let mut reader = BufReader::new(stdout);
    while let Some(message) = read_message(&mut reader).await {
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").cloned();
        match (method, id) {
            (None, Some(id)) => {
                let sender = id.as_i64().and_then(|id| lock(&shared).pending.remove(&id));
                if let Some(sender) = sender {
                    let _ = sender.send(message);
                }
            }
            (Some(method), Some(id)) => {
                let result = answer_for(method, &message["params"]);
                let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
                let _ = write(&stdin, &reply).await;
            }
            (Some(PublishDiagnostics::METHOD), None) => {
                publish(&shared, &message["params"]);
                changed.notify_waiters();
            }
            _ => {}
        }
    }
    let mut s = lock(&shared);
    s.alive = false;
    s.pending.clear();
    drop(s);
    changed.notify_waiters();
}

/// What we answer a server's request: no configuration for each item asked, else nothing.
fn answer_for(method: &str, params: &Value) -> Value {
    if method == WorkspaceConfiguration::METHOD {
        let items = params["items"].as_array().map_or(0, Vec::len);
        return Value::Array(vec![Value::Null; items]);
    }
    Value::Null
}

/// Keeps a publication of a file's diagnostics, unless it names no version and the server
/// has named one for the file before. gopls does both: its open files' diagnostics carry
/// their version, and its workspace-wide pass publishes versionless lists that may describe
/// an older text and arrive after a change. Once a server has named a version for a file,
/// only a named version says which text a list is about; servers that never name one
/// (typescript-language-server) are taken as they publish.
fn publish(shared: &Mutex<Shared>, params: &Value) {
    let Ok(p) = serde_json::from_value::<ls_types::PublishDiagnosticsParams>(params.clone()) else {
        return;
    };
    let uri = normal(p.uri.as_str());
    let mut s = lock(shared);
    let versioned = s.published.get(&uri).is_some_and(|k| k.version.is_some());
    if p.version.is_none() && versioned {
        return;
    }
    s.count += 1;
    let count = s.count;
    s.published.insert(
        uri,
        Published {
            count,
            version: p.version,
            diagnostics: p.diagnostics,
        },
    );
}

/// One message: headers up to the blank line, then `Content-Length` bytes of JSON. `None`
/// at the end of the stream or on a frame that cannot be read.
async fn read_message(reader: &mut BufReader<ChildStdout>) -> Option<Value> {
    let mut length: Option<usize> = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok();
        }
    }
    let mut body = vec![0; length?];
    reader.read_exact(&mut body).await.ok()?;
    serde_json::from_slice(&body).ok()
}

/// A `file://` URI in one spelling (servers differ in what they percent-encode).
fn normal(uri: &str) -> String {
    let bytes = uri.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| uri.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                decoded.push(b);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    let text = String::from_utf8_lossy(&decoded);
    match text.strip_prefix("file://") {
        Some(path) => super::uri::file_uri(std::path::Path::new(path)),
        None => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publication(version: Option<i32>, messages: &[&str]) -> Value {
        let diagnostics: Vec<Value> = messages
            .iter()
            .map(|m| json!({"range": {"start": {"line": 3, "character": 12}, "end": {"line": 3, "character": 13}}, "message": m}))
            .collect();
        let mut p = json!({"uri": "file:///w/calc.go", "diagnostics": diagnostics});
        if let Some(v) = version {
            p["version"] = json!(v);
        }
        p
    }

    fn latest(shared: &Mutex<Shared>) -> (Option<i32>, Vec<String>) {
        let s = lock(shared);
        let p = &s.published[&normal("file:///w/calc.go")];
        (
            p.version,
            p.diagnostics.iter().map(|d| d.message.clone()).collect(),
        )
    }

    #[test]
    fn a_versionless_list_after_a_versioned_one_is_not_taken_for_the_file() {
        let shared = Mutex::new(Shared::default());
        // gopls: the open's list without a version, then the change's with one, then its
        // workspace pass's empty list without one.
        publish(&shared, &publication(None, &[]));
        assert_eq!(latest(&shared), (None, vec![]));
        publish(&shared, &publication(Some(2), &["undeclared name: c"]));
        publish(&shared, &publication(None, &[]));
        assert_eq!(
            latest(&shared),
            (Some(2), vec!["undeclared name: c".to_string()])
        );
        assert_eq!(lock(&shared).count, 2, "the ignored list is not counted");
    }

    #[test]
    fn a_server_that_never_names_a_version_is_taken_as_it_publishes() {
        let shared = Mutex::new(Shared::default());
        publish(&shared, &publication(None, &["Cannot find name 'c'."]));
        publish(&shared, &publication(None, &[]));
        assert_eq!(latest(&shared), (None, vec![]));
        assert_eq!(lock(&shared).count, 2);
    }
}
