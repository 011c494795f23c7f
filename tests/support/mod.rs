//! The test client: spawns the real `agent-ls` binary, frames JSON-RPC over its stdio, answers
//! the server's own requests and collects its notifications. Every wait has a deadline.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub mod deep;
pub mod editor;
pub mod git;
pub mod model_server;

use serde_json::{Value, json};

/// How long any single wait may take before the test fails with the server's log.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agent-ls"))
}

/// `agent-ls ARGS` as a new user's shell would run it: nothing of this machine's environment
/// but PATH, `home` as HOME and the config folder, no stdin. A test adds what its case needs
/// (`.env(...)`, `.arg(...)`) to the command.
pub fn agent_ls(args: &[&str], home: &Path) -> Command {
    let mut cmd = Command::new(binary());
    with_default_signals(&mut cmd);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .stdin(Stdio::null());
    cmd
}

/// Starts the process with SIGINT, SIGQUIT and SIGTERM at their defaults and none blocked, as
/// a terminal or an editor starts agent-ls. A test binary started in the background by a
/// shell without job control (CI's launcher can be one) inherits SIGINT ignored, and an
/// ignored signal stays ignored across exec: agent-ls rightly keeps it so, and a test that
/// sends SIGINT would see nothing happen.
pub fn with_default_signals(cmd: &mut Command) {
    use nix::sys::signal::{SigHandler, SigSet, Signal, signal};
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls are made (sigaction and
    // sigprocmask), with no allocation.
    unsafe {
        cmd.pre_exec(|| {
            for s in [Signal::SIGINT, Signal::SIGQUIT, Signal::SIGTERM] {
                signal(s, SigHandler::SigDfl).map_err(std::io::Error::from)?;
            }
            SigSet::empty()
                .thread_set_mask()
                .map_err(std::io::Error::from)
        });
    }
}

/// `agent-ls ARGS --workspace WS`, as `agent_ls` runs it.
pub fn in_workspace(args: &[&str], ws: &Path, home: &Path) -> Command {
    let mut cmd = agent_ls(args, home);
    cmd.arg("--workspace").arg(ws);
    cmd
}

/// `agent-ls ARGS --workspace WS --json`, as `agent_ls` runs it.
pub fn cli(args: &[&str], ws: &Path, home: &Path) -> Command {
    let mut cmd = in_workspace(args, ws, home);
    cmd.arg("--json");
    cmd
}

/// Whether process `pid` (as a pid file holds it, whitespace allowed) still runs. A zombie
/// has ended, and does not count.
pub fn alive(pid: impl std::fmt::Display) -> bool {
    let pid = pid.to_string();
    std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|s| {
        // The state follows the command name, which is in parentheses and may hold any byte.
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Answers a server request; the notifications it returns are sent after the answer, as a
/// real client sends `didChange` after applying an edit.
type Responder = Box<dyn FnMut(&Value) -> (Value, Vec<Value>) + Send>;

/// Whether a responder's notifications go before its answer (the user typed while a question
/// was open) or after it (an editor's didChange after applying an edit).
#[derive(Clone, Copy, PartialEq)]
enum Order {
    Before,
    After,
}

/// What the reader thread saw on the server's stdout.
enum Incoming {
    Message(Value),
    /// Bytes that were not a well-formed frame: stdout must carry nothing but the protocol.
    Garbage(String),
}

pub struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    incoming: Receiver<Incoming>,
    next_id: i64,
    /// Notifications from the server, in arrival order.
    pub notifications: Vec<Value>,
    /// Requests from the server, in arrival order, with the answers we gave.
    pub server_requests: Vec<Value>,
    responses: HashMap<String, Value>,
    responders: HashMap<String, (Order, Responder)>,
    /// Server requests left unanswered on purpose (see `DEFER`), by method.
    deferred: Vec<(String, Value)>,
    stderr: Arc<Mutex<String>>,
    /// Set when stdout carried something that was not a frame.
    pub protocol_violations: Vec<String>,
    /// Every message from the server, in the order it arrived.
    pub log: Vec<Value>,
    _home: tempfile::TempDir,
}

/// How to start the server: its working directory, extra environment, and a user config file.
#[derive(Default)]
pub struct Spawn {
    pub cwd: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub user_config: Option<String>,
}

impl Client {
    pub fn spawn(opts: Spawn) -> Client {
        // The server sees a clean environment so a developer's own config or keys never leak
        // into a test, and every test gets its own XDG folders.
        let home = tempfile::tempdir().expect("temp home");
        let config_home = home.path().join("config");
        if let Some(text) = &opts.user_config {
            std::fs::create_dir_all(config_home.join("agent-ls")).unwrap();
            std::fs::write(config_home.join("agent-ls/config.toml"), text).unwrap();
        }
        let mut cmd = Command::new(binary());
        with_default_signals(&mut cmd);
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", &config_home)
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("AGENT_LS_LOG", "agent_ls=debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(cwd) = &opts.cwd {
            cmd.current_dir(cwd);
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn agent-ls");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let stderr_pipe = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        {
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stderr_pipe);
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 {
                    stderr.lock().unwrap().push_str(&line);
                    line.clear();
                }
            });
        }
        let (tx, rx) = channel();
        std::thread::spawn(move || read_frames(stdout, tx));
        Client {
            child,
            stdin,
            incoming: rx,
            next_id: 1,
            notifications: Vec::new(),
            server_requests: Vec::new(),
            responses: HashMap::new(),
            responders: HashMap::new(),
            deferred: Vec::new(),
            stderr,
            protocol_violations: Vec::new(),
            log: Vec::new(),
            _home: home,
        }
    }

    /// Starts a server on `root` and initializes it with the given client capabilities.
    pub fn start(root: &Path, capabilities: Value) -> Client {
        let mut c = Client::spawn(Spawn::default());
        c.initialize(root, capabilities, Value::Null);
        c
    }

    /// The first request the server sent with `method`; the test fails when there is none.
    pub fn server_request(&self, method: &str) -> Value {
        self.server_requests
            .iter()
            .find(|r| r["method"] == method)
            .unwrap_or_else(|| panic!("the server sent no {method}"))
            .clone()
    }

    pub fn initialize(&mut self, root: &Path, capabilities: Value, options: Value) -> Value {
        let uri = file_uri(root);
        let result = self
            .request(
                "initialize",
                json!({
                    "processId": null,
                    "rootUri": uri,
                    "workspaceFolders": [{"uri": uri, "name": "ws"}],
                    "capabilities": capabilities,
                    "initializationOptions": options,
                }),
            )
            .unwrap_or_else(|e| panic!("initialize failed: {e}"));
        self.notify("initialized", json!({}));
        result
    }

    /// Answers the server's requests for `method` with `f(params)` instead of the default.
    pub fn on_request(
        &mut self,
        method: &str,
        mut f: impl FnMut(&Value) -> Value + Send + 'static,
    ) {
        self.responders.insert(
            method.to_string(),
            (Order::After, Box::new(move |p| (f(p), Vec::new()))),
        );
    }

    /// Like `on_request_then`, but the notifications are sent before the answer.
    pub fn on_request_before(
        &mut self,
        method: &str,
        f: impl FnMut(&Value) -> (Value, Vec<Value>) + Send + 'static,
    ) {
        self.responders
            .insert(method.to_string(), (Order::Before, Box::new(f)));
    }

    /// Like `on_request`, and the returned notifications are sent right after the answer.
    pub fn on_request_then(
        &mut self,
        method: &str,
        f: impl FnMut(&Value) -> (Value, Vec<Value>) + Send + 'static,
    ) {
        self.responders
            .insert(method.to_string(), (Order::After, Box::new(f)));
    }

    pub fn send(&mut self, message: &Value) {
        let body = serde_json::to_vec(message).unwrap();
        let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        frame.extend(body);
        self.send_raw(&frame);
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to server");
        stdin.flush().expect("flush to server");
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request without waiting; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Sends a request and waits for its answer: `Ok(result)` or `Err(error object)`.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.send_request(method, params);
        self.wait_response(&id)
    }

    /// A response already received for `id`, taken out of the inbox.
    pub fn take_response(&mut self, id: &Value) -> Option<Value> {
        self.responses.remove(&id.to_string())
    }

    pub fn wait_response(&mut self, id: &Value) -> Result<Value, Value> {
        let key = id.to_string();
        let response = self.wait_until(|c| c.take_response(id), &format!("response {key}"));
        match response.get("error") {
            Some(err) => Err(err.clone()),
            None => Ok(response.get("result").cloned().unwrap_or(Value::Null)),
        }
    }

    /// Waits for a notification `method` whose params satisfy `pred`, searching those already
    /// received first; returns its params and removes it from the list.
    pub fn wait_notification(&mut self, method: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_until(
            |c| {
                let pos = c
                    .notifications
                    .iter()
                    .position(|n| n["method"] == method && pred(&n["params"]))?;
                Some(c.notifications.remove(pos)["params"].clone())
            },
            &format!("notification {method}"),
        )
    }

    /// Processes incoming messages until `check` returns something or the deadline passes.
    pub fn wait_until<T>(
        &mut self,
        mut check: impl FnMut(&mut Self) -> Option<T>,
        what: &str,
    ) -> T {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(found) = check(self) {
                return found;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.incoming.recv_timeout(left) {
                Ok(msg) => self.dispatch(msg),
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "timed out waiting for {what}; server log:\n{}",
                        self.stderr()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "server closed stdout while waiting for {what}; log:\n{}",
                        self.stderr()
                    )
                }
            }
        }
    }

    /// Handles what the server sends (answering its requests) for `d`.
    pub fn pump(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.incoming.recv_timeout(left) {
                Ok(msg) => self.dispatch(msg),
                Err(_) => return,
            }
        }
    }

    /// Takes everything already received without waiting.
    pub fn drain(&mut self) {
        while let Ok(msg) = self.incoming.try_recv() {
            self.dispatch(msg);
        }
    }

    fn dispatch(&mut self, msg: Incoming) {
        let msg = match msg {
            Incoming::Message(m) => m,
            Incoming::Garbage(g) => {
                self.protocol_violations.push(g);
                return;
            }
        };
        self.log.push(msg.clone());
        let has_method = msg.get("method").is_some();
        match (msg.get("id"), has_method) {
            (Some(id), true) => {
                let method = msg["method"].as_str().unwrap_or_default().to_string();
                let params = msg.get("params").cloned().unwrap_or(Value::Null);
                let (order, (result, then)) = match self.responders.get_mut(&method) {
                    Some((order, f)) => (*order, f(&params)),
                    None => (Order::After, (default_answer(&method, &params), Vec::new())),
                };
                if order == Order::Before {
                    for n in &then {
                        self.send(n);
                    }
                }
                // As VS Code and Neovim do, an applied edit's CreateFile makes the (empty) file
                // on disk and its DeleteFile removes it; the text edits stay in the unsaved
                // buffer.
                if method == "workspace/applyEdit" && result["applied"] == true {
                    resource_operations(&params);
                }
                let id = id.clone();
                self.server_requests
                    .push(json!({"method": method, "params": params, "answer": result}));
                if result == DEFER {
                    self.deferred.push((method, id));
                    return;
                }
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
                if order == Order::After {
                    for n in then {
                        self.send(&n);
                    }
                }
            }
            (None, true) => self.notifications.push(msg),
            (Some(id), false) => {
                self.responses.insert(id.to_string(), msg.clone());
            }
            (None, false) => self.protocol_violations.push(msg.to_string()),
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether the server's log says `needle` within a few seconds: the log is read on a
    /// thread of its own, so a line written just now may not be here yet.
    pub fn stderr_says(&self, needle: &str) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if self.stderr().contains(needle) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `shutdown` then `exit`; returns the exit status.
    pub fn shutdown(mut self) -> ExitStatus {
        self.request("shutdown", Value::Null)
            .expect("shutdown answered");
        self.notify("exit", Value::Null);
        self.wait_exit()
    }

    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("server did not exit; log:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `workspace/executeCommand` of one of our commands, with its one argument object (or
    /// none for `Value::Null`).
    pub fn command(&mut self, name: &str, arg: Value) -> Result<Value, Value> {
        let arguments = if arg.is_null() {
            json!([])
        } else {
            json!([arg])
        };
        self.request(
            "workspace/executeCommand",
            json!({"command": name, "arguments": arguments}),
        )
    }

    /// agent-ls.status once the store has answered it. The command answers within 100 ms
    /// whatever the store does, marking what the store did not give in time "unknown (store
    /// busy)"; on a loaded machine a server that has just started may not have read its store
    /// yet, so a test that looks at the steps or the interrupted runs asks again.
    pub fn settled_status(&mut self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = self
                .command("agent-ls.status", Value::Null)
                .expect("agent-ls.status answers");
            let busy = ["steps_unknown", "interrupted_unknown"]
                .iter()
                .any(|k| status.get(*k).is_some());
            if !busy || Instant::now() > deadline {
                return status;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills the server with SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The server's copy of a document (`agent-ls/documentState`).
    pub fn document_state(&mut self, uri: &str) -> Value {
        self.request(
            "agent-ls/documentState",
            json!({"textDocument": {"uri": uri}}),
        )
        .unwrap_or_else(|e| panic!("documentState failed: {e}"))
    }

    /// `didChange` replacing one range, (line, character) to (line, character), with `text`.
    pub fn edit(
        &mut self,
        uri: &str,
        version: i32,
        start: (u32, u32),
        end: (u32, u32),
        text: &str,
    ) {
        self.notify(
            "textDocument/didChange",
            json!({
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"range": {
                    "start": {"line": start.0, "character": start.1},
                    "end": {"line": end.0, "character": end.1},
                }, "text": text}]
            }),
        );
    }

    pub fn open(&mut self, uri: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "plaintext", "version": 1, "text": text}}),
        );
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A responder that returns this leaves the request open, as a user who has not answered
/// yet; `answer_deferred` answers it later.
pub const DEFER: &str = "__defer__";

impl Client {
    /// Waits for a deferred request of `method` and answers it now.
    pub fn answer_deferred(&mut self, method: &str, result: Value) {
        let id = self.wait_until(
            |c| {
                let at = c.deferred.iter().position(|(m, _)| m == method)?;
                Some(c.deferred.remove(at).1)
            },
            &format!("a deferred {method}"),
        );
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// Waits until a request of `method` is waiting unanswered.
    /// Waits for a deferred request of `method`; its id.
    pub fn wait_deferred(&mut self, method: &str) -> Value {
        self.wait_until(
            |c| {
                c.deferred
                    .iter()
                    .find(|(m, _)| m == method)
                    .map(|(_, id)| id.clone())
            },
            &format!("a deferred {method}"),
        )
    }
}

/// Carries out the file creations and deletions of a workspace edit on disk.
fn resource_operations(params: &Value) {
    for op in params["edit"]["documentChanges"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let Some(path) = op["uri"]
            .as_str()
            .and_then(|u| u.strip_prefix("file://"))
            .map(|p| PathBuf::from(percent_decode(p)))
        else {
            continue;
        };
        match op["kind"].as_str() {
            Some("create") if !path.exists() => {
                if let Some(dir) = path.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = std::fs::write(&path, "");
            }
            Some("delete") => {
                let _ = std::fs::remove_file(&path);
            }
            _ => {}
        }
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a plain client answers when a test did not say otherwise.
fn default_answer(method: &str, params: &Value) -> Value {
    match method {
        "workspace/applyEdit" => json!({"applied": true}),
        "window/showMessageRequest" => params
            .get("actions")
            .and_then(|a| a.get(0))
            .cloned()
            .unwrap_or(Value::Null),
        "workspace/configuration" => {
            let n = params["items"].as_array().map_or(0, |a| a.len());
            Value::Array(vec![Value::Null; n])
        }
        _ => Value::Null,
    }
}

fn read_frames(stdout: impl Read, tx: std::sync::mpsc::Sender<Incoming>) {
    let mut reader = BufReader::new(stdout);
    loop {
        let mut content_length = None;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let trimmed = line.trim_end_matches(['\r', '\n']);
            if trimmed.is_empty() {
                break;
            }
            match trimmed.split_once(':') {
                Some((name, value)) if name.eq_ignore_ascii_case("content-length") => {
                    content_length = value.trim().parse::<usize>().ok();
                }
                Some((name, _)) if name.eq_ignore_ascii_case("content-type") => {}
                _ => {
                    let _ = tx.send(Incoming::Garbage(line));
                }
            }
        }
        let Some(len) = content_length else {
            let _ = tx.send(Incoming::Garbage("frame without Content-Length".into()));
            continue;
        };
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let msg = match serde_json::from_slice(&body) {
            Ok(v) => Incoming::Message(v),
            Err(_) => Incoming::Garbage(String::from_utf8_lossy(&body).into_owned()),
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
}

/// The real PostgreSQL's URL that scripts/test starts (`scripts/postgres start`), or None to
/// skip where none runs; with `AGENT_LS_REQUIRE_POSTGRES` set (scripts/test) a missing URL
/// fails the test instead.
pub fn postgres_url() -> Option<String> {
    match std::env::var("AGENT_LS_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("AGENT_LS_REQUIRE_POSTGRES").is_some() => panic!(
            "AGENT_LS_TEST_POSTGRES_URL is not set; scripts/test starts PostgreSQL (scripts/postgres start)"
        ),
        _ => {
            eprintln!(
                "skipped: AGENT_LS_TEST_POSTGRES_URL is not set (scripts/postgres start; scripts/test does it)"
            );
            None
        }
    }
}

/// The Python the tests run (scripts/test puts pytest in `.venv-test`).
pub fn python() -> String {
    std::env::var("AGENT_LS_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// A Python with pytest and Hypothesis, for the tester's property tests. scripts/test keeps it
/// apart from `python()`: Hypothesis's pytest plugin costs every pytest start about 2 s of CPU.
pub fn python_with_hypothesis() -> String {
    std::env::var("AGENT_LS_TEST_PYTHON_HYPOTHESIS").unwrap_or_else(|_| python())
}

/// A replay script: one JSON object per line (see docs/replay.md).
pub fn replay_script(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// A test of the module `create_module_answer` creates, so the run passes only with it.
pub const TEST_HELPERS: &str = "import unittest\n\nfrom helpers import double\n\n\nclass T(unittest.TestCase):\n    def test_double(self):\n        self.assertEqual(double(2), 4)\n";

/// The model's answer that fixes `add` and creates a module, `helpers.py`, beside it.
pub fn create_module_answer() -> String {
    json!({"edits": [
        {"path": "calc.py", "search": "    return a - b", "replace": "    return a + b"},
        {"path": "helpers.py", "content": "def double(x):\n    return 2 * x\n"}
    ]})
    .to_string()
}

/// A replay script of one coder answer: `create_module_answer`.
pub fn create_module_replay() -> String {
    replay_script(&[json!({"role": "coder", "content": create_module_answer()})])
}

/// A two-iteration run: a first change that documents `multiply` (the tests still fail), a
/// reflection, then the fix of `add`.
pub fn two_iterations_replay() -> String {
    replay_script(&[
        json!({"role": "coder", "content": "calc.py\n<<<<<<< SEARCH\ndef multiply(a, b):\n=======\ndef multiply(a, b):\n    \"\"\"The product.\"\"\"\n>>>>>>> REPLACE\n"}),
        json!({"role": "reflector", "content": r#"{"task_id": "T1", "passed": false, "report": "add still subtracts", "next_step": "make add return a + b"}"#}),
        json!({"role": "coder", "content": "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"}),
    ])
}

/// A path inside this checkout, wherever it sits (tests never depend on the working directory
/// or on an absolute checkout path).
pub fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Copies the files of `examples/calc` (a Python project whose `add` subtracts) into `dest`.
pub fn copy_example(dest: &Path) {
    for entry in std::fs::read_dir(repo("examples/calc")).unwrap().flatten() {
        std::fs::copy(entry.path(), dest.join(entry.file_name())).unwrap();
    }
}

/// A scratch copy of `examples/calc`.
pub fn example() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp workspace");
    copy_example(dir.path());
    dir
}

pub fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// Client capabilities offering the given position encodings.
pub fn capabilities_with_encodings(encodings: &[&str]) -> Value {
    json!({"general": {"positionEncodings": encodings}})
}

/// A temporary workspace with the given files.
pub fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp workspace");
    for (path, text) in files {
        let full = dir.path().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(full, text).unwrap();
    }
    dir
}

/// Applies LSP text edits (UTF-16 positions) to `text`, as an editor would.
pub fn apply_lsp_edits(text: &str, edits: &[Value]) -> String {
    let offset = |pos: &Value| -> usize {
        let (line, character) = (
            pos["line"].as_u64().unwrap() as usize,
            pos["character"].as_u64().unwrap() as usize,
        );
        let mut at = 0;
        for (i, l) in text.split_inclusive('\n').enumerate() {
            if i == line {
                let mut units = 0;
                for (b, c) in l.char_indices() {
                    if units >= character || c == '\n' {
                        return at + b;
                    }
                    units += c.len_utf16();
                }
                return at + l.trim_end_matches('\n').len();
            }
            at += l.len();
        }
        text.len()
    };
    let mut spans: Vec<(usize, usize, String)> = edits
        .iter()
        .map(|e| {
            (
                offset(&e["range"]["start"]),
                offset(&e["range"]["end"]),
                e["newText"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    spans.sort_by_key(|s| std::cmp::Reverse(s.0));
    let mut out = text.to_string();
    for (a, b, t) in spans {
        out.replace_range(a..b, &t);
    }
    out
}

/// tests/mcp with its node_modules (the official MCP and ACP SDKs, the MCP filesystem
/// server, acpx and the MCP Inspector), or `None` to skip in a plain `cargo test`; scripts/test installs them and sets
/// AGENT_LS_REQUIRE_PROTOCOL_TESTS, so CI always runs these tests.
pub fn protocol_deps() -> Option<PathBuf> {
    let dir = repo("tests/mcp");
    if dir.join("node_modules/@modelcontextprotocol/sdk").is_dir()
        && dir.join("node_modules/@agentclientprotocol/sdk").is_dir()
        && dir.join("node_modules/.bin/acpx").exists()
        && dir.join("node_modules/.bin/mcp-inspector").exists()
    {
        return Some(dir);
    }
    if std::env::var("AGENT_LS_REQUIRE_PROTOCOL_TESTS").is_ok() {
        panic!("tests/mcp/node_modules is missing; scripts/test installs it (npm ci)");
    }
    eprintln!("skipped: tests/mcp/node_modules is not installed (scripts/test installs it)");
    None
}

/// Every line of every run journal under `ws` (`.agent-ls/runs/*.jsonl`), as JSON; a torn last
/// line (a killed run) is skipped.
pub fn journal(ws: &Path) -> Vec<Value> {
    std::fs::read_dir(ws.join(".agent-ls/runs"))
        .expect("the workspace has run journals")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .flat_map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The journal lines of type `kind` under `ws`.
pub fn journaled(ws: &Path, kind: &str) -> Vec<Value> {
    journal(ws)
        .into_iter()
        .filter(|l| l["type"] == kind)
        .collect()
}

/// A home folder whose user config (`agent-ls/config.toml`, as `agent_ls` points
/// XDG_CONFIG_HOME there) is `config`.
pub fn home_with(config: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("a temporary home");
    std::fs::create_dir_all(home.path().join("agent-ls")).expect("its config folder");
    std::fs::write(home.path().join("agent-ls/config.toml"), config).expect("its config");
    home
}
