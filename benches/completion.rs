//! Inline completion figures (issue 53, docs/completion.md), for agent-ls's
//! `textDocument/inlineCompletion` and, beside it in the same run, llm-ls's
//! `llm-ls/getCompletions` (huggingface/llm-ls, the Rust server this feature is measured
//! against), both spoken to through stdio as an editor would and asking the same stub
//! fill-in-the-middle model on 127.0.0.1:
//!
//! - the server's own time per completion (answer time minus the time the stub model took),
//!   p50 and p99, typing in the middle of a 100,000-line document;
//! - the model requests per 100 keystrokes typed 80 ms apart, each keystroke a `didChange`
//!   and a request that cancels the one before (as VS Code and Neovim do), the stub taking
//!   50 ms (faster than the typing) or 150 ms (slower) and completing the line the user is
//!   typing;
//! - agent-ls's `didChange` cost with completion off, on, and on with the next-edit
//!   suggestion (2,000 one-character changes to the same document, then a code action);
//! - the end-to-end latency with the suite's real local model (SmolLM2-135M through
//!   tests/model-server and node-llama-cpp), when it is installed.
//!
//! llm-ls: `LLM_LS` names a built binary; else `LLM_LS_SRC`, a checkout of
//! huggingface/llm-ls (GitHub, not reachable from CI's machines; it is not on crates.io), is
//! built with cargo into `LLM_LS_TARGET` (default: target/llm-ls), in the profile this bench
//! runs in. Without either, or when the build fails, the output says so and agent-ls's
//! figures are printed alone. The real model:
//! `AGENT_LS_MODEL` (default: models/SmolLM2-135M-Instruct.Q4_1.gguf) with
//! tests/model-server's node_modules installed (scripts/test installs both).
//!
//! `cargo bench --bench completion`. It prints figures and asserts nothing.

#[path = "../tests/support/model_server.rs"]
mod model_server;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use model_server::{ModelServer, Reply};
use serde_json::{Value, json};

/// Lines of the big document, and of a typical file for comparison.
const LINES: usize = 100_000;
const SMALL: usize = 1_000;
/// Keystrokes timed for the server's own time.
const TIMED: usize = 300;
/// What the user types in the request-count figure, a line at a time.
const TYPED: [&str; 4] = [
    "result = compute(a, b)",
    "values.append(result)",
    "print(result, total)",
    "return sorted(values)",
];

/// A language server spoken to through its stdio.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<(Value, Instant)>,
    /// Answers read while draining, kept for `wait`.
    answered: HashMap<i64, (Value, Instant)>,
    next_id: i64,
    _home: tempfile::TempDir,
}

impl Peer {
    /// Starts `program` with a home of its own holding agent-ls's user configuration `config`.
    fn spawn(program: &Path, args: &[&str], config: &str) -> Peer {
        let home = tempfile::tempdir().expect("temp home");
        let dir = home.path().join("config/agent-ls");
        std::fs::create_dir_all(&dir).expect("config folder");
        std::fs::write(dir.join("config.toml"), config).expect("config");
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("XDG_CACHE_HOME", home.path().join("cache"))
            .env("AGENT_LS_LOG", "agent_ls=warn")
            .env("LLM_LOG_LEVEL", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, messages) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::with_capacity(1 << 20, stdout);
            while let Some(msg) = read_message(&mut reader) {
                if tx.send((msg, Instant::now())).is_err() {
                    return;
                }
            }
        });
        Peer {
            child,
            stdin,
            messages,
            answered: HashMap::new(),
            next_id: 0,
            _home: home,
        }
    }

    fn send(&mut self, message: &Value) {
        let body = serde_json::to_vec(message).expect("json");
        let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        out.extend(body);
        self.stdin.write_all(&out).expect("server stdin");
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn request(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The answer to request `id` and when it came; the server's own requests are answered
    /// with null meanwhile.
    fn wait(&mut self, id: i64) -> (Value, Instant) {
        self.wait_up_to(id, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("no answer to request {id} in 60 s"))
    }

    /// The answer to request `id`, or `None` when none came within `limit`.
    fn wait_up_to(&mut self, id: i64, limit: Duration) -> Option<(Value, Instant)> {
        if let Some(kept) = self.answered.remove(&id) {
            return Some(kept);
        }
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (msg, at) = match self.messages.recv_timeout(left) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => panic!("the server exited"),
            };
            if msg.get("method").is_some() {
                if let Some(req) = msg.get("id") {
                    self.send(&json!({"jsonrpc": "2.0", "id": req, "result": null}));
                }
                continue;
            }
            if msg["id"].as_i64() == Some(id) {
                return Some((msg, at));
            }
        }
    }

    /// Reads what came so far: answers the server's requests, keeps the answers.
    fn drain(&mut self) {
        while let Ok((msg, at)) = self.messages.try_recv() {
            if msg.get("method").is_some() {
                if let Some(req) = msg.get("id") {
                    self.send(&json!({"jsonrpc": "2.0", "id": req, "result": null}));
                }
            } else if let Some(id) = msg["id"].as_i64() {
                self.answered.insert(id, (msg, at));
            }
        }
    }

    fn initialize(&mut self, root: &Path) {
        let uri = file_uri(root);
        let id = self.request(
            "initialize",
            json!({"processId": null, "rootUri": uri, "capabilities": {},
                   "workspaceFolders": [{"uri": uri, "name": "ws"}]}),
        );
        self.wait(id);
        self.notify("initialized", json!({}));
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_message(reader: &mut impl BufRead) -> Option<Value> {
    loop {
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("Content-Length: ") {
                length = v.parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        if let Ok(msg) = serde_json::from_slice(&body) {
            return Some(msg);
        }
    }
}

fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// The servers measured: how each is started and asked.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    AgentLs,
    LlmLs,
}

struct Server {
    name: &'static str,
    kind: Kind,
    program: PathBuf,
}

impl Server {
    /// Started on a workspace holding `main.py` (`text`), asking the model at `url`.
    fn start(&self, url: &str, extra: &str, text: &str) -> (tempfile::TempDir, Peer, String) {
        let ws = tempfile::tempdir().expect("workspace");
        std::fs::create_dir(ws.path().join(".agent-ls")).expect("state folder");
        let main = ws.path().join("main.py");
        std::fs::write(&main, text).expect("main.py");
        let (args, config): (&[&str], String) = match self.kind {
            Kind::AgentLs if url.is_empty() => (&["serve"], String::new()),
            Kind::AgentLs => (
                &["serve"],
                format!(
                    "[completion]\nprovider = \"openai\"\nbase_url = \"{url}\"\nmodel = \"fim\"\ntimeout_ms = 10000\n{extra}"
                ),
            ),
            Kind::LlmLs => (&[], String::new()),
        };
        let mut peer = Peer::spawn(&self.program, args, &config);
        peer.initialize(ws.path());
        let uri = file_uri(&main);
        peer.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}),
        );
        (ws, peer, uri)
    }

    /// Sends this server's completion request at (line, character).
    fn ask(&self, peer: &mut Peer, uri: &str, url: &str, line: usize, character: usize) -> i64 {
        let at = json!({"line": line, "character": character});
        match self.kind {
            Kind::AgentLs => peer.request(
                "textDocument/inlineCompletion",
                json!({"textDocument": {"uri": uri}, "position": at, "context": {"triggerKind": 2}}),
            ),
            // llm-ls's own client (llm.nvim) sends these; the context window is in characters
            // without a tokenizer, sized like agent-ls's default 6000 bytes.
            Kind::LlmLs => peer.request(
                "llm-ls/getCompletions",
                json!({"textDocument": {"uri": uri}, "position": at, "ide": "neovim",
                       "fim": {"enabled": true, "prefix": "<fim_prefix>", "middle": "<fim_middle>",
                               "suffix": "<fim_suffix>"},
                       "model": "fim", "backend": "openai", "url": url, "tokensToClear": [],
                       "tokenizerConfig": null, "contextWindow": 6000,
                       "tlsSkipVerifyInsecure": false, "requestBody": {"max_tokens": 128},
                       "apiToken": null}),
            ),
        }
    }
}

/// A Python document of `lines` lines with an empty function body in its middle: the text, and
/// the line whose indentation the user types after.
fn big_document(lines: usize) -> (String, usize) {
    let mut text = String::with_capacity(lines * 24);
    let mut line = 0;
    let mut target = 0;
    while line < lines - 3 {
        if line >= lines / 2 && target == 0 {
            text.push_str("def target(a, b):\n    \n\n");
            target = line + 1;
        } else {
            text.push_str(&format!("def f{line}(x):\n    return x + {line}\n\n"));
        }
        line += 3;
    }
    (text, target)
}

fn change(uri: &str, version: i64, line: usize, character: usize, text: &str) -> Value {
    let at = json!({"line": line, "character": character});
    json!({"textDocument": {"uri": uri, "version": version},
           "contentChanges": [{"range": {"start": at, "end": at}, "text": text}]})
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// A stub model that sleeps `delay` and answers `answer(prompt)`, recording how long each
/// of its answers took (the model's share of a completion).
fn stub(
    delay: Duration,
    answer: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (ModelServer, Arc<Mutex<Vec<Duration>>>) {
    let took = Arc::new(Mutex::new(Vec::new()));
    let t = took.clone();
    let server = ModelServer::answering(move |body| {
        let started = Instant::now();
        std::thread::sleep(delay);
        let text = answer(body["prompt"].as_str().unwrap_or_default());
        let reply = Reply::json(json!({"choices": [{"text": text}]}));
        t.lock().unwrap().push(started.elapsed());
        reply
    });
    (server, took)
}

/// The server's own time per completion while typing in the middle of a `lines`-line
/// document: p50, p99, and the model requests it made.
fn own_time(server: &Server, lines: usize) -> (Duration, Duration, usize) {
    let (model, took) = stub(Duration::from_millis(10), |_| {
        "total = compute(a, b)".into()
    });
    let (text, line) = big_document(lines);
    let (_ws, mut peer, uri) = server.start(&model.url, "", &text);
    let mut own = Vec::with_capacity(TIMED);
    let typed = b"qzxv";
    for i in 0..TIMED {
        let col = 4 + i;
        let ch = (typed[i % typed.len()] as char).to_string();
        peer.notify(
            "textDocument/didChange",
            change(&uri, i as i64 + 2, line, col, &ch),
        );
        let asked = Instant::now();
        let before = took.lock().unwrap().len();
        let id = server.ask(&mut peer, &uri, &model.url, line, col + 1);
        let (_, answered) = peer.wait(id);
        let model_time: Duration = took.lock().unwrap()[before..].iter().sum();
        own.push((answered - asked).saturating_sub(model_time));
    }
    own.sort();
    (percentile(&own, 0.5), percentile(&own, 0.99), model.count())
}

/// The rest of the line the prompt ends in, as the user will type it (`TYPED`).
fn rest_of_line(prompt: &str) -> String {
    let before = prompt.split("<fim_suffix>").next().unwrap_or_default();
    let typed = before.rsplit('\n').next().unwrap_or_default().trim_start();
    let typed = typed.strip_prefix("<fim_prefix>").unwrap_or(typed);
    TYPED
        .iter()
        .find_map(|l| l.strip_prefix(typed).filter(|_| !typed.is_empty()))
        .unwrap_or_default()
        .to_string()
}

/// Model requests while 100 keystrokes are typed 80 ms apart (counted when the last
/// keystroke's answer came), and what that answer was and when.
fn requests_per_100(server: &Server, lines: usize, model_ms: u64) -> (usize, String) {
    let (model, _) = stub(Duration::from_millis(model_ms), rest_of_line);
    let (text, target) = big_document(lines);
    let (_ws, mut peer, uri) = server.start(&model.url, "", &text);
    let keys: Vec<char> = TYPED
        .iter()
        .cycle()
        .flat_map(|l| l.chars().chain(['\n']))
        .take(100)
        .collect();
    let (mut line, mut col) = (target + 1, 0);
    peer.notify("textDocument/didChange", change(&uri, 2, target, 4, "\n"));
    let mut pending: Vec<i64> = Vec::new();
    let mut typed_at = Instant::now();
    for (i, key) in keys.iter().enumerate() {
        peer.notify(
            "textDocument/didChange",
            change(&uri, i as i64 + 3, line, col, &key.to_string()),
        );
        (line, col) = if *key == '\n' {
            (line + 1, 0)
        } else {
            (line, col + 1)
        };
        if let Some(&older) = pending.last() {
            peer.notify("$/cancelRequest", json!({"id": older}));
        }
        pending.push(server.ask(&mut peer, &uri, &model.url, line, col));
        typed_at = Instant::now();
        std::thread::sleep(Duration::from_millis(80));
        peer.drain();
    }
    // A server that cannot keep up answers the last keystroke late, or not within the limit.
    let last = *pending.last().expect("requests");
    let answer = peer.wait_up_to(last, Duration::from_secs(30));
    let count = model.count();
    let last = match answer {
        None => "none within 30 s".to_string(),
        Some((answer, at)) => {
            let shown = answer.to_string().contains("\"insertText\":\"")
                || answer["result"]["completions"]
                    .as_array()
                    .is_some_and(|c| !c.is_empty());
            let what = if shown { "a suggestion" } else { "nothing" };
            format!(
                "{what}, {} after the last keystroke",
                ms(at.saturating_duration_since(typed_at))
            )
        }
    };
    (count, last)
}

/// agent-ls's time per `didChange` (2,000 one-character changes, then a code action
/// answered), with `config` as its completion settings.
fn change_cost(server: &Server, url: &str, extra: &str) -> Duration {
    let (text, line) = big_document(LINES);
    let (_ws, mut peer, uri) = server.start(url, extra, &text);
    // The open is processed before the clock starts.
    let warm = code_action(&mut peer, &uri);
    peer.wait(warm);
    let started = Instant::now();
    for i in 0..2000 {
        peer.notify(
            "textDocument/didChange",
            change(&uri, i + 2, line, 4 + i as usize, "q"),
        );
    }
    let id = code_action(&mut peer, &uri);
    peer.wait(id);
    started.elapsed() / 2000
}

fn code_action(peer: &mut Peer, uri: &str) -> i64 {
    peer.request(
        "textDocument/codeAction",
        json!({"textDocument": {"uri": uri},
               "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
               "context": {"diagnostics": []}}),
    )
}

/// llm-ls's binary: `LLM_LS`, or `LLM_LS_SRC` built now; why not, when neither works.
fn llm_ls() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("LLM_LS") {
        return Ok(bin.into());
    }
    let Some(src) = std::env::var_os("LLM_LS_SRC") else {
        return Err(
            "neither LLM_LS (a built binary) nor LLM_LS_SRC (a checkout of \
                    huggingface/llm-ls) is set; its repository is not reachable from here"
                .into(),
        );
    };
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("LLM_LS_TARGET")
        .map(PathBuf::from)
        .unwrap_or_else(|| here.join("target/llm-ls"));
    let release = !cfg!(debug_assertions);
    let mut build = Command::new("cargo");
    build
        .current_dir(&src)
        .args(["build", "--locked", "-p", "llm-ls"])
        .env("CARGO_TARGET_DIR", &target);
    if release {
        build.arg("--release");
    }
    let started = Instant::now();
    let out = build
        .output()
        .map_err(|e| format!("cargo did not run: {e}"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = said.lines().rev().take(5).collect();
        return Err(format!("its build failed: {}", tail.join(" | ")));
    }
    println!(
        "llm-ls built from {} in {:.0} s",
        Path::new(&src).display(),
        started.elapsed().as_secs_f64()
    );
    Ok(target
        .join(if release { "release" } else { "debug" })
        .join("llm-ls"))
}

/// The suite's real local model served by tests/model-server on 127.0.0.1: its base URL and
/// process, or why not.
fn real_model() -> Result<(String, Child), String> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = std::env::var_os("AGENT_LS_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| here.join("models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    let server = here.join("tests/model-server");
    if !model.exists() || !server.join("node_modules/node-llama-cpp").exists() {
        return Err(format!(
            "no {} or no tests/model-server/node_modules (scripts/test installs both)",
            model.display()
        ));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let child = Command::new("node")
        .arg(server.join("server.mjs"))
        .args(["--model", &model.to_string_lossy(), "--alias", "smol"])
        .args(["--port", &port.to_string(), "--threads", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("node did not start: {e}"))?;
    // It listens once the model is loaded.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("the model server did not listen within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok((format!("http://127.0.0.1:{port}"), child))
}

/// End-to-end latencies with the real model: a new function's body asked for ten times, each
/// after a `didChange` that adds it (so none is answered from the cache); with a sample.
fn real_latency(server: &Server, url: &str) -> (Vec<Duration>, String) {
    let text = "import math\n\n\ndef area(r):\n    return math.pi * r * r\n";
    let (_ws, mut peer, uri) = server.start(url, "max_tokens = 32\n", text);
    let names = [
        "add", "mul", "sub", "norm", "mean", "dist", "half", "sq", "cube", "inv",
    ];
    let mut line = 5;
    let mut took = Vec::new();
    let mut sample = String::new();
    for (i, name) in names.iter().enumerate() {
        let added = format!("\n\ndef {name}(a, b):\n    ");
        peer.notify(
            "textDocument/didChange",
            change(&uri, i as i64 + 2, line, 0, &added),
        );
        line += 3;
        let asked = Instant::now();
        let id = server.ask(&mut peer, &uri, url, line, 4);
        let (answer, at) = peer.wait(id);
        took.push(at - asked);
        if sample.is_empty() {
            sample = answer["result"][0]["insertText"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        // The next function goes after this one's body line.
        line += 1;
    }
    took.sort();
    (took, sample)
}

fn main() {
    let profile = if cfg!(debug_assertions) {
        "debug (an upper bound: `cargo bench` builds optimised)"
    } else {
        "release"
    };
    println!("inline completion figures; agent-ls built {profile}");
    let mut servers = vec![Server {
        name: "agent-ls",
        kind: Kind::AgentLs,
        program: PathBuf::from(env!("CARGO_BIN_EXE_agent-ls")),
    }];
    match llm_ls() {
        Ok(program) => {
            println!("llm-ls: {}", program.display());
            servers.push(Server {
                name: "llm-ls",
                kind: Kind::LlmLs,
                program,
            })
        }
        Err(why) => println!("llm-ls: not measured: {why}"),
    }
    for lines in [LINES, SMALL] {
        println!(
            "\n== the server's own time per completion (answer minus the stub model's 10 ms), typing in the middle of a {lines}-line document; {TIMED} keystrokes"
        );
        for s in &servers {
            let (p50, p99, asked) = own_time(s, lines);
            println!(
                "{:>9}: p50 {}, p99 {} ({asked} model requests)",
                s.name,
                ms(p50),
                ms(p99)
            );
        }
    }
    for lines in [LINES, SMALL] {
        println!(
            "\n== model requests per 100 keystrokes typed 80 ms apart in a {lines}-line document (the stub model completes the line being typed)"
        );
        for model_ms in [50, 150] {
            for s in &servers {
                let (count, last) = requests_per_100(s, lines, model_ms);
                println!(
                    "{:>9}, model {model_ms} ms: {count} model requests; the last keystroke's answer: {last}",
                    s.name
                );
            }
        }
    }
    change_costs(&servers[0]);
    real_model_latency(&servers[0]);
}

fn change_costs(ours: &Server) {
    println!(
        "\n== agent-ls's didChange cost (2,000 one-character changes to the {LINES}-line document)"
    );
    let (model, _) = stub(Duration::ZERO, |_| String::new());
    for (label, url, extra) in [
        ("completion off", "", ""),
        ("completion on", model.url.as_str(), ""),
        (
            "on, with next_edit",
            model.url.as_str(),
            "next_edit = true\n",
        ),
    ] {
        println!(
            "{label:>20}: {:.1} µs per change",
            change_cost(ours, url, extra).as_secs_f64() * 1e6
        );
    }
}

fn real_model_latency(ours: &Server) {
    println!(
        "\n== end to end with the real local model (SmolLM2-135M-Instruct Q4_1, llama.cpp through node-llama-cpp, 1 thread, max_tokens 32)"
    );
    match real_model() {
        Ok((url, mut child)) => {
            let (took, sample) = real_latency(ours, &url);
            println!(
                "agent-ls: p50 {}, max {} over {} completions; first suggestion {sample:?}",
                ms(percentile(&took, 0.5)),
                ms(*took.last().unwrap_or(&Duration::ZERO)),
                took.len()
            );
            let _ = child.kill();
            let _ = child.wait();
        }
        Err(why) => println!("not measured: {why}"),
    }
}
