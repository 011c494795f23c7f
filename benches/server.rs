//! Server figures through stdio, for agent-ls and, beside it in the same run, the framework's
//! floor (an empty tower-lsp-server built from `benches/floor`): 2,000 one-character changes
//! to a 100,000-line document, a 10 MB `didOpen` until the next request is answered, the
//! latency of a change followed by a request, the memory 1,000 open documents take, and the
//! memory a 100 MB document takes at its peak, while open, and after it closed.
//! Run with `cargo bench --bench server`; it prints figures and asserts nothing.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A server under test, spoken to through its stdio as an editor would.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    answers: Receiver<i64>,
    next_id: i64,
    _home: tempfile::TempDir,
}

fn frame(message: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(message).expect("json");
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend(body);
    out
}

impl Peer {
    fn spawn(program: &PathBuf, args: &[&str]) -> Peer {
        let home = tempfile::tempdir().expect("temp home");
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("AGENT_LS_LOG", "agent_ls=warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn server");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, answers) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::with_capacity(1 << 20, stdout);
            loop {
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
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
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
                    continue;
                };
                if msg.get("method").is_none()
                    && let Some(id) = msg["id"].as_i64()
                    && tx.send(id).is_err()
                {
                    return;
                }
            }
        });
        let mut peer = Peer {
            child,
            stdin,
            answers,
            next_id: 1,
            _home: home,
        };
        let root = peer._home.path().join("ws");
        std::fs::create_dir_all(&root).expect("workspace");
        let uri = format!("file://{}", root.display());
        let id = peer.request(
            "initialize",
            json!({"processId": null, "rootUri": uri, "capabilities": {}, "workspaceFolders": [{"uri": uri, "name": "ws"}]}),
        );
        peer.wait(id);
        peer.write(&frame(
            &json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
        ));
        peer
    }

    fn write(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).expect("write to server");
    }

    fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&frame(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        ));
        self.stdin.flush().expect("flush");
        id
    }

    /// A code action on `uri`: agent-ls answers it from its session, so the answer comes
    /// after every notification sent before it has been applied.
    fn code_action(&mut self, uri: &str) -> i64 {
        self.request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "context": {"diagnostics": []}}),
        )
    }

    fn wait(&mut self, id: i64) {
        loop {
            match self.answers.recv_timeout(Duration::from_secs(120)) {
                Ok(got) if got == id => return,
                Ok(_) => {}
                Err(e) => panic!("no answer to request {id}: {e}"),
            }
        }
    }

    fn rss(&self) -> usize {
        self.status_bytes("VmRSS:")
    }

    /// The most resident memory the process has had.
    fn peak(&self) -> usize {
        self.status_bytes("VmHWM:")
    }

    fn status_bytes(&self, field: &str) -> usize {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(field))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<usize>().ok())
            })
            .map_or(0, |kb| kb * 1024)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn open(uri: &str, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {"uri": uri, "languageId": "rust", "version": 1, "text": text}}})
}

fn change(uri: &str, version: i64, line: u32) -> Value {
    json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": {"uri": uri, "version": version},
        "contentChanges": [{"range": {"start": {"line": line, "character": 4}, "end": {"line": line, "character": 4}}, "text": "x"}]}})
}

fn line(i: usize) -> String {
    format!("    let value_{i} = compute(\"ünïcödé\", {i}); // 😀\n")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A 100,000-line document open in the peer, ready for changes.
struct Long {
    uri: &'static str,
    version: i64,
}

fn open_long(peer: &mut Peer) -> Long {
    let uri = "file:///bench/long.rs";
    let text: String = (0..100_000).map(line).collect();
    peer.write(&frame(&open(uri, &text)));
    let id = peer.code_action(uri);
    peer.wait(id);
    Long { uri, version: 1 }
}

/// µs per change over a burst of 2,000 one-character changes, written at once as a client
/// that queued them would, until the request after them is answered.
fn change_burst(peer: &mut Peer, doc: &mut Long) -> f64 {
    let burst: Vec<u8> = (0..2_000)
        .flat_map(|i| {
            doc.version += 1;
            frame(&change(doc.uri, doc.version, (i * 37 % 100_000) as u32))
        })
        .collect();
    let started = Instant::now();
    peer.write(&burst);
    let id = peer.code_action(doc.uri);
    peer.wait(id);
    started.elapsed().as_secs_f64() * 1e6 / 2_000.0
}

/// The time from one change to the answer of the request after it, `n` times.
fn change_latencies(peer: &mut Peer, doc: &mut Long, n: usize, out: &mut Vec<Duration>) {
    for i in 0..n {
        doc.version += 1;
        let f = frame(&change(doc.uri, doc.version, (i * 53 % 100_000) as u32));
        let started = Instant::now();
        peer.write(&f);
        let id = peer.code_action(doc.uri);
        peer.wait(id);
        out.push(started.elapsed());
    }
}

fn big_text() -> String {
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 10 * 1024 * 1024 {
        text.push_str(&line(i));
        i += 1;
    }
    text
}

/// Milliseconds from writing a 10 MB `didOpen` to the answer of the request after it.
fn big_open(peer: &mut Peer, text: &str, round: usize) -> f64 {
    let uri = format!("file:///bench/big{round}.rs");
    let f = frame(&open(&uri, text));
    let started = Instant::now();
    peer.write(&f);
    let id = peer.code_action(&uri);
    peer.wait(id);
    let ms = started.elapsed().as_secs_f64() * 1e3;
    peer.write(&frame(&json!({"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}})));
    ms
}

/// Resident memory added by 1,000 open 1,000-line documents, and the text they hold.
fn memory(peer: &mut Peer) -> (usize, usize) {
    let doc: String = (0..1_000).map(line).collect();
    let id = peer.code_action("file:///bench/none.rs");
    peer.wait(id);
    let before = peer.rss();
    let mut held = 0;
    for i in 0..1_000 {
        let text = format!("// document {i}\n{doc}");
        held += text.len();
        peer.write(&frame(&open(&format!("file:///bench/doc{i}.rs"), &text)));
    }
    let id = peer.code_action("file:///bench/doc999.rs");
    peer.wait(id);
    (peer.rss().saturating_sub(before), held)
}

/// A 100 MB document through a fresh server: the peak while it opens, what stays while it
/// is open, once one character of it changed, and after it closed, each as resident memory
/// over the server's own before it opened, in MB.
fn huge_document(peer: &mut Peer) -> (usize, [f64; 4]) {
    let uri = "file:///bench/huge.rs";
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 100 * 1024 * 1024 {
        text.push_str(&line(i));
        i += 1;
    }
    let held = text.len();
    let id = peer.code_action("file:///bench/none.rs");
    peer.wait(id);
    let before = peer.rss();
    peer.write(&frame(&open(uri, &text)));
    drop(text);
    let id = peer.code_action(uri);
    peer.wait(id);
    let over = |bytes: usize| bytes.saturating_sub(before) as f64 / 1e6;
    let (peak, open) = (over(peer.peak()), over(peer.rss()));
    peer.write(&frame(&change(uri, 2, 7)));
    let id = peer.code_action(uri);
    peer.wait(id);
    let edited = over(peer.rss());
    peer.write(&frame(&json!({"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}})));
    let id = peer.code_action("file:///bench/none.rs");
    peer.wait(id);
    (held, [peak, open, edited, over(peer.rss())])
}

/// Builds the floor server (release) and returns its path.
fn floor_binary() -> PathBuf {
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let out = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--example",
            "lsp-floor",
            "--message-format=json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo build --example lsp-floor");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("the floor's executable")
}

/// A server measured: its name, its program and the arguments that start it.
type Server<'a> = (&'a str, &'a PathBuf, &'a [&'a str]);

fn main() {
    // `cargo bench --bench server -- open` runs only the scenarios named (changes, open,
    // memory, huge) and only for the servers named (agent-ls, floor), when any are.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| {
        let named: Vec<&String> = only
            .iter()
            .filter(|a| ["changes", "open", "memory", "huge"].contains(&a.as_str()))
            .collect();
        named.is_empty() || named.iter().any(|a| a.as_str() == name)
    };
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_agent-ls"));
    let floor = floor_binary();
    let servers: Vec<Server> = [
        ("agent-ls", &ours, &["serve"][..]),
        ("floor", &floor, &[][..]),
    ]
    .into_iter()
    .filter(|(name, _, _)| {
        !only.iter().any(|a| a == "agent-ls" || a == "floor") || only.iter().any(|a| a == name)
    })
    .collect();

    // The machine's speed drifts over seconds, so the servers take turns, round by round,
    // and each figure is the median of its rounds.
    let (per_change, p99) = if wanted("changes") {
        changes(&servers)
    } else {
        (Vec::new(), Vec::new())
    };
    let opens = if wanted("open") {
        opens(&servers)
    } else {
        Vec::new()
    };
    let mut memories = Vec::new();
    for (name, program, args) in servers.iter().filter(|_| wanted("memory")) {
        let mut peer = Peer::spawn(program, args);
        let (grown, held) = memory(&mut peer);
        println!(
            "{name:>8}: 1,000 documents of 1,000 lines ({:.1} MB of text): resident growth {:.1} MB ({:.2}x the text)",
            held as f64 / 1e6,
            grown as f64 / 1e6,
            grown as f64 / held as f64
        );
        memories.push((grown, held));
    }
    for (name, program, args) in servers.iter().filter(|_| wanted("huge")) {
        let mut peer = Peer::spawn(program, args);
        let (held, [peak, open, edited, closed]) = huge_document(&mut peer);
        let text = held as f64 / 1e6;
        println!(
            "{name:>8}: a {text:.0} MB didOpen: peak {peak:.0} MB ({:.2}x the text, target <= 2), open {open:.0} MB, after one change {edited:.0} MB, after didClose {closed:.0} MB (target: given back)",
            peak / text
        );
    }
    if servers.len() == 2 {
        ratios(&per_change, &p99, &opens, memories.first());
    }
}

/// Per server, the median µs of a one-character change in a burst, and the p99 of a change
/// then a request.
fn changes(servers: &[Server]) -> (Vec<f64>, Vec<Duration>) {
    let (mut per_change, mut p99) = (Vec::new(), Vec::new());
    let mut peers: Vec<(Peer, Long)> = servers
        .iter()
        .map(|(_, program, args)| {
            let mut peer = Peer::spawn(program, args);
            let doc = open_long(&mut peer);
            (peer, doc)
        })
        .collect();
    let mut bursts = vec![Vec::new(); peers.len()];
    let mut latencies = vec![Vec::new(); peers.len()];
    for _ in 0..11 {
        for (k, (peer, doc)) in peers.iter_mut().enumerate() {
            bursts[k].push(change_burst(peer, doc));
            change_latencies(peer, doc, 100, &mut latencies[k]);
        }
    }
    for (k, (name, _, _)) in servers.iter().enumerate() {
        let us = median(bursts[k].clone());
        latencies[k].sort();
        let (a, b) = (
            percentile(&latencies[k], 0.5),
            percentile(&latencies[k], 0.99),
        );
        println!(
            "{name:>8}: 2,000 one-character changes to a 100,000-line document: {us:.1} µs per change; a change then a request: p50 {:.0} µs, p99 {:.0} µs",
            a.as_secs_f64() * 1e6,
            b.as_secs_f64() * 1e6
        );
        per_change.push(us);
        p99.push(b);
    }
    (per_change, p99)
}

/// Per server, the median ms of a 10 MB didOpen until the next request is answered.
fn opens(servers: &[Server]) -> Vec<f64> {
    let text = big_text();
    let mut peers: Vec<Peer> = servers
        .iter()
        .map(|(_, program, args)| Peer::spawn(program, args))
        .collect();
    let mut rounds = vec![Vec::new(); peers.len()];
    for round in 0..9 {
        for (k, peer) in peers.iter_mut().enumerate() {
            rounds[k].push(big_open(peer, &text, round));
        }
    }
    let mut opens = Vec::new();
    for (k, (name, _, _)) in servers.iter().enumerate() {
        let ms = median(rounds[k].clone());
        println!("{name:>8}: a 10 MB didOpen until the next request is answered: {ms:.1} ms");
        opens.push(ms);
    }
    opens
}

/// agent-ls's figures over the floor's, against their targets.
fn ratios(per_change: &[f64], p99: &[Duration], opens: &[f64], memory: Option<&(usize, usize)>) {
    println!();
    if per_change.len() == 2 {
        println!(
            "ratios to the floor: changes {:.2}x (target <= 0.5), p99 of a change then a request {:.2}x (target <= 1)",
            per_change[0] / per_change[1],
            p99[0].as_secs_f64() / p99[1].as_secs_f64()
        );
    }
    if opens.len() == 2 {
        println!(
            "ratio to the floor: 10 MB open {:.2}x (target <= 0.6)",
            opens[0] / opens[1]
        );
    }
    if let Some((grown, held)) = memory {
        println!(
            "agent-ls holds its text at {:.2}x resident per byte (target <= 1.15)",
            *grown as f64 / *held as f64
        );
    }
}
