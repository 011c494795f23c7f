//! Big-repository figures (issue 39, docs/bigrepo.md): a synthetic monorepo made of copies of
//! this repository's own Rust crates and its Python/Go/Node fixture projects, committed to
//! git, and `agent-ls run "<question>" --json` against a model server on 127.0.0.1 that
//! answers at once (cache and reviewer off), so every second is agent-ls's own. Prints, cold
//! (no `.agent-ls/`), the run after it, `agent-ls map` (the whole map built) and then warm
//! (three runs): the time to the first model request, from the
//! last answer to the end of the run, the whole run, the map cache's size, and the phases the
//! run's journal recorded; beside the same on the 280-file fixture the tests use. Then the
//! editor's path: `agent-ls serve`, a run from the palette right after `initialize` and one
//! `BIGREPO_SERVE_WAIT_SECS` (30) later (the map the server keeps), each from the command to
//! the first model request.
//!
//! `cargo bench --bench bigrepo` (20,000 files); `BIGREPO_FILES=100000` for the larger size
//! (a comma-separated list runs several). `AGENT_LS_BIN` runs another build of agent-ls.
//! It prints figures and asserts nothing.

#[path = "../tests/support/model_server.rs"]
mod model_server;

#[path = "../tests/support/deep.rs"]
mod deep;

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use model_server::{ModelServer, openai_text};

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=B", "-c", "user.email=b@example.com"])
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("git")
        .success();
    assert!(ok, "git {args:?}");
}

/// The files of this repository the monorepo is made of: its crates' Rust and the fixture
/// projects (Python, Rust, Go, Node), as (path, text).
fn seed() -> Vec<(String, Vec<u8>)> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed = Command::new("git")
        .current_dir(here)
        .args(["ls-files", "crates", "tests/fixtures/projects"])
        .output()
        .expect("git ls-files");
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|rel| Some((rel.to_string(), std::fs::read(here.join(rel)).ok()?)))
        .collect()
}

/// A git repository of at least `files` files: copies `c0000/`, `c0001/`... of the seed,
/// each source file ending in a comment that names its copy. The copies' texts differ, as a
/// real monorepo's files do (a cache that shared alike texts' rows would look smaller here
/// than on a real repository). Their names are the same, which a real monorepo's mostly are.
fn monorepo(files: usize) -> tempfile::TempDir {
    let seed = seed();
    let dir = tempfile::tempdir().expect("a temp folder");
    let copies = files.div_ceil(seed.len());
    for c in 0..copies {
        for (rel, text) in &seed {
            let p = dir.path().join(format!("c{c:04}")).join(rel);
            std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
            let mut text = text.clone();
            let ext = rel.rsplit('.').next().unwrap_or("");
            match ext {
                "py" => text.extend_from_slice(format!("\n# copy {c}\n").as_bytes()),
                "rs" | "go" | "js" | "ts" | "mjs" => {
                    text.extend_from_slice(format!("\n// copy {c}\n").as_bytes())
                }
                _ => {}
            }
            std::fs::write(p, text).expect("write");
        }
    }
    commit(dir.path());
    dir
}

fn commit(root: &Path) {
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "monorepo"]);
}

/// When the model server was asked first and last.
#[derive(Default)]
struct Seen {
    first: Option<Instant>,
    last: Option<Instant>,
}

struct Figures {
    first_request: Duration,
    after_answer: Duration,
    whole: Duration,
    cache_bytes: u64,
    phases: String,
}

fn bin() -> PathBuf {
    std::env::var_os("AGENT_LS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_agent-ls")))
}

/// One `agent-ls run QUESTION --json` in `root`.
fn run(root: &Path, question: &str, home: &Path) -> Figures {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let server = ModelServer::answering(move |_| {
        let now = Instant::now();
        let mut s = s.lock().expect("seen");
        s.first.get_or_insert(now);
        s.last = Some(now);
        openai_text(&["It reads the cache first, then parses what changed."])
    });
    let started = Instant::now();
    let out = Command::new(bin())
        .args(["run", question, "--json", "--yes", "--workspace"])
        .arg(root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "bench-key")
        .env("AGENT_LS_AGENT__EVALUATE", "false")
        .env("AGENT_LS_AGENT__REVIEW", "off")
        .env("AGENT_LS_CACHE__ENABLED", "false")
        .stdin(Stdio::null())
        .output()
        .expect("agent-ls runs");
    let ended = Instant::now();
    if !out.status.success() {
        eprintln!("agent-ls run: {}", String::from_utf8_lossy(&out.stderr));
    }
    let s = seen.lock().expect("seen");
    let (first, last) = (s.first.unwrap_or(ended), s.last.unwrap_or(ended));
    Figures {
        first_request: first - started,
        after_answer: ended.saturating_duration_since(last),
        whole: ended - started,
        cache_bytes: cache_bytes(root),
        phases: phases(root),
    }
}

/// The map cache's size: `.agent-ls/repomap.sqlite` (or the `repomap.json` of before).
fn cache_bytes(root: &Path) -> u64 {
    let state = root.join(".agent-ls");
    ["repomap.json", "repomap.sqlite", "repomap.sqlite-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(state.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// The newest journal's `phases` line, as `name ms` pairs.
fn phases(root: &Path) -> String {
    let Ok(entries) = std::fs::read_dir(root.join(".agent-ls/runs")) else {
        return "-".into();
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    let Some(text) = paths.last().and_then(|p| std::fs::read_to_string(p).ok()) else {
        return "-".into();
    };
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["type"] == "phases")
        .and_then(|l| l["data"].as_object().cloned())
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|| "-".into())
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn print(name: &str, how: &str, f: &Figures) {
    println!(
        "{name}, {how}: first model request {}, last answer to end {}, whole run {}, map cache {:.2} MB\n    phases (ms): {}",
        secs(f.first_request),
        secs(f.after_answer),
        secs(f.whole),
        f.cache_bytes as f64 / 1e6,
        f.phases
    );
}

fn measure(name: &str, root: &Path, question: &str) {
    let home = tempfile::tempdir().expect("home");
    let cold = run(root, question, home.path());
    print(name, "cold", &cold);
    // A map not built within a run's budget is finished by the runs after it, so the next
    // run shows how far one run warms the cache.
    let warming = run(root, question, home.path());
    print(name, "the next run", &warming);
    // `agent-ls map` builds the whole map, as a user warms a big repository once; the runs
    // after it are warm.
    map(name, root, question, home.path());
    for n in 1..=3 {
        let warm = run(root, question, home.path());
        print(name, &format!("warm #{n}"), &warm);
    }
    serve(name, root, question, home.path());
}

/// `agent-ls map QUESTION --json` in `root`: the whole map built, its cache filled.
fn map(name: &str, root: &Path, question: &str, home: &Path) {
    let started = Instant::now();
    let out = Command::new(bin())
        .args(["map", question, "--json", "--workspace"])
        .arg(root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .stdin(Stdio::null())
        .output()
        .expect("agent-ls map runs");
    let took = started.elapsed();
    let o: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    println!(
        "{name}, agent-ls map: {} in all ({} files, {} parsed, {} from the cache; phases (ms): {}), map cache {:.2} MB",
        secs(took),
        o["files"],
        o["parsed"],
        o["cached"],
        o["timings"],
        cache_bytes(root) as f64 / 1e6
    );
}

/// One LSP message on `to`.
fn send(to: &mut impl Write, msg: serde_json::Value) {
    let body = msg.to_string();
    write!(to, "Content-Length: {}\r\n\r\n{body}", body.len()).expect("write to serve");
    to.flush().expect("flush");
}

/// The method of each message `agent-ls serve` writes, as it comes.
fn methods(from: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut from = std::io::BufReader::new(from);
        loop {
            let mut len = 0;
            let mut line = String::new();
            while from.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if let Some(v) = line.strip_prefix("Content-Length: ") {
                    len = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; len];
            if len == 0 || from.read_exact(&mut body).is_err() {
                return;
            }
            let msg: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let _ = tx.send(msg["method"].as_str().unwrap_or("").to_string());
        }
    });
    rx
}

/// The editor's path: `agent-ls serve`, `initialize`, then a run from the palette at once
/// (the map still being built in the background) and a second a while later (the map the
/// server kept): the time from the command to the first model request, each.
fn serve(name: &str, root: &Path, question: &str, home: &Path) {
    let seen = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let s = seen.clone();
    let server = ModelServer::answering(move |_| {
        s.lock().expect("seen").push(Instant::now());
        openai_text(&["It reads the cache first, then parses what changed."])
    });
    let mut child = Command::new(bin())
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "bench-key")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent-ls serve");
    let mut to = child.stdin.take().expect("stdin");
    let from = methods(child.stdout.take().expect("stdout"));
    let uri = format!("file://{}", root.display());
    let settings = serde_json::json!({"agent": {"evaluate": false, "review": "off"}, "cache": {"enabled": false}});
    send(
        &mut to,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"processId": null, "rootUri": uri, "capabilities": {}, "initializationOptions": settings,
            "workspaceFolders": [{"uri": uri, "name": "bench"}]}}),
    );
    send(
        &mut to,
        serde_json::json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
    );
    // The second run comes after the user has had the folder open a while (the map's
    // background build is given this long): `BIGREPO_SERVE_WAIT_SECS`, 30 by default.
    let wait: u64 = std::env::var("BIGREPO_SERVE_WAIT_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let later = format!("a run {wait} s after the first");
    for (n, how) in ["a run at once", later.as_str()].iter().enumerate() {
        if n == 1 {
            std::thread::sleep(Duration::from_secs(wait));
        }
        let asked = Instant::now();
        send(
            &mut to,
            serde_json::json!({"jsonrpc": "2.0", "id": 2 + n, "method": "workspace/executeCommand",
            "params": {"command": "agent-ls.run", "arguments": [{"goal": question}]}}),
        );
        let finished = from.iter().any(|m| m == "agent-ls/runFinished");
        let first = seen.lock().expect("seen").get(n).copied();
        match (finished, first) {
            (true, Some(t)) => println!(
                "{name}, agent-ls serve, {how}: command to first model request {}\n    phases (ms): {}",
                secs(t - asked),
                phases(root)
            ),
            _ => println!("{name}, agent-ls serve, {how}: the run did not reach the model"),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn main() {
    let fixture = deep::project("");
    commit(fixture.path());
    measure(
        "the 280-file fixture",
        fixture.path(),
        "explain how app/m29/pricing.py decides the net price",
    );
    let sizes = std::env::var("BIGREPO_FILES").unwrap_or_else(|_| "20000".into());
    for n in sizes
        .split(',')
        .filter_map(|s| s.trim().parse::<usize>().ok())
    {
        let started = Instant::now();
        let repo = monorepo(n);
        let files = Command::new("git")
            .current_dir(repo.path())
            .args(["ls-files"])
            .output()
            .map(|o| o.stdout.iter().filter(|b| **b == b'\n').count())
            .unwrap_or(0);
        println!(
            "monorepo of {files} files made and committed in {}",
            secs(started.elapsed())
        );
        measure(
            &format!("monorepo, {files} files"),
            repo.path(),
            "explain how c0000/crates/runtime/src/repomap.rs decides which files to parse again",
        );
    }
}
