//! The memory of one worker, for sizing a Kubernetes pod (docs/scale.md, Sizing): the peak
//! resident memory of `agent-ls run` on the example project with a model server on
//! 127.0.0.1, of the test processes it starts, and of `agent-ls batch --workers 1` (a parent
//! and its runs, as a worker is) over several tasks, read from /proc every 2 ms.
//! Run with `cargo bench --bench worker_memory`; it prints figures and asserts nothing.

#[path = "../tests/support/model_server.rs"]
mod model_server;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use model_server::{ModelServer, openai_text};

/// The coder's answer: fix `add` in calc.py and create notes.py.
const FIX: &str = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n\nnotes.py\n<<<<<<< SEARCH\n=======\nNOTE = 1\n>>>>>>> REPLACE\n";

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=B", "-c", "user.email=b@example.com"])
        .args(args)
        .output()
        .expect("git")
        .status
        .success();
    assert!(ok, "git {args:?}");
}

/// A committed copy of examples/calc.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/calc");
    for entry in std::fs::read_dir(example).expect("examples/calc").flatten() {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).expect("copy");
    }
    std::fs::write(dir.path().join(".gitignore"), ".agent-ls/\n__pycache__/\n").expect("write");
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "start"]);
    dir
}

/// A process's figure from /proc/PID/status, in KiB.
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Every process under `root` (itself included), with its command name.
fn tree(root: u32) -> Vec<(u32, String)> {
    let mut parent_of = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": the name may hold spaces, so split at the last ')'.
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head
            .split_once('(')
            .map(|(_, c)| c.to_string())
            .unwrap_or_default();
        let ppid: u32 = tail
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        parent_of.insert(pid, (ppid, comm));
    }
    let mut out = vec![(
        root,
        parent_of
            .get(&root)
            .map(|p| p.1.clone())
            .unwrap_or_default(),
    )];
    let mut i = 0;
    while i < out.len() {
        let (pid, _) = out[i];
        for (child, (ppid, comm)) in &parent_of {
            if *ppid == pid {
                out.push((*child, comm.clone()));
            }
        }
        i += 1;
    }
    out
}

/// Peaks seen while a command ran: the root process's own high-water mark, the largest sum
/// of resident memory over its whole tree, and the high-water mark of each command name.
#[derive(Default, Debug)]
struct Peaks {
    root_hwm: u64,
    tree_rss: u64,
    by_name: BTreeMap<String, u64>,
    seconds: f64,
}

fn watch(mut cmd: Command) -> Peaks {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let root = child.id();
    let mut peaks = Peaks::default();
    loop {
        let procs = tree(root);
        let mut sum = 0;
        for (pid, name) in &procs {
            sum += status_kib(*pid, "VmRSS:").unwrap_or(0);
            let hwm = status_kib(*pid, "VmHWM:").unwrap_or(0);
            let best = peaks.by_name.entry(name.clone()).or_default();
            *best = (*best).max(hwm);
            if *pid == root {
                peaks.root_hwm = peaks.root_hwm.max(hwm);
            }
        }
        peaks.tree_rss = peaks.tree_rss.max(sum);
        if let Ok(Some(status)) = child.try_wait() {
            assert!(status.success(), "the command failed: {status}");
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    peaks.seconds = start.elapsed().as_secs_f64();
    peaks
}

fn agent_ls(args: &[&str], home: &Path, model: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agent-ls"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{model}/v1"))
        .env("OPENAI_API_KEY", "bench-key")
        .env("AGENT_LS_AGENT__EVALUATE", "false")
        .env("AGENT_LS_AGENT__REVIEW", "off")
        .stdin(Stdio::null());
    cmd
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn print(what: &str, p: &Peaks) {
    let names: Vec<String> = p
        .by_name
        .iter()
        .map(|(n, k)| format!("{n} {}", mib(*k)))
        .collect();
    println!(
        "{what}: agent-ls peak {}, whole tree peak {}, {:.2} s; per process: {}",
        mib(p.root_hwm),
        mib(p.tree_rss),
        p.seconds,
        names.join(", ")
    );
}

fn main() {
    let server = ModelServer::answering(|_| openai_text(&[FIX]));
    let home = tempfile::tempdir().expect("home");
    for n in 1..=3 {
        let ws = project();
        let ws_path = ws.path().to_string_lossy().into_owned();
        let args = [
            "run",
            "fix the failing tests",
            "--yes",
            "--json",
            "--workspace",
            &ws_path,
        ];
        print(
            &format!("agent-ls run #{n}"),
            &watch(agent_ls(&args, home.path(), &server.url)),
        );
    }
    let ws = project();
    let dir = tempfile::tempdir().expect("temp");
    let tasks: String = (1..=4)
        .map(|n| {
            format!(
                "{}\n",
                serde_json::json!({"id": format!("t{n}"), "repo": ws.path(), "goal": "fix the failing tests"})
            )
        })
        .collect();
    let file = dir.path().join("tasks.jsonl");
    std::fs::write(&file, tasks).expect("tasks");
    let out = dir.path().join("out");
    let (file, out) = (file.to_string_lossy(), out.to_string_lossy());
    let args = ["batch", &file, "--workers", "1", "--out", &out];
    print(
        "agent-ls batch, 4 tasks, --workers 1",
        &watch(agent_ls(&args, home.path(), &server.url)),
    );
}
