//! Recovery from real models' mistakes (issue 40), through the real binary: for each class of
//! mistake and each fixture bug, a scripted model on 127.0.0.1 makes the mistake once and
//! then answers well. A run is recovered when it ends done, the tests pass and the file is
//! exactly the fixed file (nothing lost, nothing gained). Prints, per class, recovered/total
//! and the model calls the recovery cost beyond a clean run's one. Run with
//! `cargo bench --bench mistakes`.

#[path = "../tests/support/model_server.rs"]
mod model_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use model_server::{ModelServer, Reply, openai_cut_off_call, openai_text, openai_text_with_bytes};
use serde_json::{Value, json};

/// A bug in a small Python module, with its tests.
struct Bug {
    module: &'static str,
    broken: &'static str,
    tests: &'static str,
    /// The wrong line and its fix.
    wrong: &'static str,
    right: &'static str,
    /// The last function's lines (an edit that breaks it makes things worse).
    tail: &'static str,
    tail_broken: &'static str,
}

const BUGS: [Bug; 2] = [
    Bug {
        module: "calc.py",
        broken: "\"\"\"A tiny calculator.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n",
        tests: "import unittest\n\nfrom calc import add, multiply\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n    def test_multiply(self):\n        self.assertEqual(multiply(2, 3), 6)\n",
        wrong: "    return a - b",
        right: "    return a + b",
        tail: "    return a * b",
        tail_broken: "    return a ** b",
    },
    Bug {
        module: "words.py",
        broken: "\"\"\"Word helpers.\"\"\"\n\n\ndef shout(s):\n    return s.lower() + \"!\"\n\n\ndef whisper(s):\n    return s.lower()\n",
        tests: "import unittest\n\nfrom words import shout, whisper\n\n\nclass T(unittest.TestCase):\n    def test_shout(self):\n        self.assertEqual(shout(\"hi\"), \"HI!\")\n\n    def test_whisper(self):\n        self.assertEqual(whisper(\"HI\"), \"hi\")\n",
        wrong: "    return s.lower() + \"!\"",
        right: "    return s.upper() + \"!\"",
        tail: "    return s.lower()",
        tail_broken: "    return s.upper()",
    },
];

impl Bug {
    fn fixed(&self) -> String {
        self.broken.replacen(self.wrong, self.right, 1)
    }

    fn block(&self, path: &str, search: &str, replace: &str) -> String {
        format!("{path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n")
    }

    /// The good answer: the fix as one small SEARCH/REPLACE.
    fn good(&self) -> String {
        self.block(self.module, self.wrong, self.right)
    }

    /// The text from the first `def` on, broken and fixed.
    fn defs(&self) -> (String, String) {
        let at = self.broken.find("def ").unwrap_or(0);
        (
            self.broken[at..].trim_end().to_string(),
            self.fixed()[at..].trim_end().to_string(),
        )
    }
}

/// One class of mistake: the first reply (the mistake), what the workspace needs, and the
/// model settings it runs with.
struct Mistake {
    class: &'static str,
    first: fn(&Bug) -> Reply,
    setup: fn(&Bug, &Path),
    env: &'static [(&'static str, &'static str)],
    /// The good answer after the mistake, and the file a recovered run leaves.
    again: fn(&Bug) -> String,
    wanted: fn(&Bug) -> String,
}

fn nothing(_: &Bug, _: &Path) {}

fn elided_replacement(b: &Bug) -> Reply {
    let (search, fixed) = defs_first(b);
    let replace = format!("{fixed}\n\n\n# ... existing code ...");
    openai_text(&[&b.block(b.module, &search, &replace)])
}

/// The whole text from the first `def`, and the first function fixed alone.
fn defs_first(b: &Bug) -> (String, String) {
    let (search, fixed) = b.defs();
    let first = fixed.split("\n\n\n").next().unwrap_or(&fixed).to_string();
    (search, first)
}

fn elided_whole_file(b: &Bug) -> Reply {
    let fixed = b.fixed();
    let cut = fixed.rfind("\n\n\ndef ").unwrap_or(fixed.len());
    let content = format!(
        "{}\n\n\n# ... rest of the file unchanged ...\n",
        &fixed[..cut]
    );
    openai_text(&[&json!({"path": b.module, "content": content}).to_string()])
}

fn indented_deeper(b: &Bug) -> Reply {
    let (search, _) = defs_first(b);
    let first = search.split("\n\n\n").next().unwrap_or(&search);
    let deeper: Vec<String> = first.lines().map(|l| format!("  {l}")).collect();
    let fixed = first.replacen(b.wrong, b.right, 1);
    openai_text(&[&b.block(b.module, &deeper.join("\n"), &fixed)])
}

fn cut_off_call(b: &Bug) -> Reply {
    let args = json!({"path": b.module, "search": b.wrong, "replace": b.right}).to_string();
    openai_cut_off_call("edit_file", &args[..args.len() - 12])
}

fn cut_off_text(b: &Bug) -> Reply {
    let good = b.good();
    let piece = json!({"choices": [{"index": 0, "delta": {"content": &good[..good.len() / 2]}, "finish_reason": null}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]});
    Reply::Sse {
        events: vec![piece.to_string(), end.to_string(), "[DONE]".into()],
        stall_after: None,
    }
}

fn prose_around_json(b: &Bug) -> Reply {
    let edit = json!({"path": b.module, "search": b.wrong, "replace": b.right});
    openai_text(&[&format!("Here is the fix.\n{edit}\nThat should do it.")])
}

fn invalid_utf8(b: &Bug) -> Reply {
    let text = b.block(b.module, b.wrong, &format!("{}  # fixed @BAD@", b.right));
    openai_text_with_bytes(&text, b"\xff\xfe")
}

fn worse(b: &Bug) -> Reply {
    openai_text(&[&b.block(b.module, b.tail, b.tail_broken)])
}

/// An edit through the module's real name that puts a comment above its first function.
fn comment(b: &Bug) -> String {
    let (search, _) = b.defs();
    let head = search.lines().next().unwrap_or_default();
    b.block(b.module, head, &format!("# The first helper.\n{head}"))
}

/// The module with the fix and the comment.
fn fixed_with_comment(b: &Bug) -> String {
    let (search, _) = b.defs();
    let head = search.lines().next().unwrap_or_default();
    b.fixed()
        .replacen(head, &format!("# The first helper.\n{head}"), 1)
}

/// One file under two names: the comment through the real name, the fix through a symlink;
/// each name's change is computed on the same text, so the second write takes back the first.
fn two_names(b: &Bug) -> Reply {
    openai_text(&[&format!(
        "{}\n{}",
        comment(b),
        b.block("alias.py", b.wrong, b.right)
    )])
}

fn alias(b: &Bug, ws: &Path) {
    std::os::unix::fs::symlink(b.module, ws.join("alias.py")).expect("a symlink");
}

/// A mistake answered by the good fix, leaving the fixed file.
const fn fixed_by_the_fix(
    class: &'static str,
    first: fn(&Bug) -> Reply,
    env: &'static [(&'static str, &'static str)],
) -> Mistake {
    Mistake {
        class,
        first,
        setup: nothing,
        env,
        again: Bug::good,
        wanted: Bug::fixed,
    }
}

const MISTAKES: [Mistake; 9] = [
    fixed_by_the_fix("elided replacement", elided_replacement, &[]),
    fixed_by_the_fix("elided whole file", elided_whole_file, &[]),
    fixed_by_the_fix("SEARCH indented deeper", indented_deeper, &[]),
    fixed_by_the_fix("cut-off tool call", cut_off_call, &[]),
    fixed_by_the_fix(
        "cut-off answer, larger max_tokens",
        cut_off_text,
        &[("AGENT_LS_MODEL__RETRY_MAX_TOKENS", "8192")],
    ),
    fixed_by_the_fix("prose around JSON", prose_around_json, &[]),
    fixed_by_the_fix("invalid UTF-8", invalid_utf8, &[]),
    fixed_by_the_fix("edit that made things worse", worse, &[]),
    Mistake {
        class: "file damaged after the write",
        first: two_names,
        setup: alias,
        env: &[],
        again: comment,
        wanted: fixed_with_comment,
    },
];

fn binary() -> PathBuf {
    std::env::var_os("AGENT_LS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_agent-ls")))
}

/// One run of `bug` with `mistake`: whether it recovered, and the model calls it made.
fn run(bug: &Bug, mistake: &Mistake) -> (bool, usize) {
    let ws = tempfile::tempdir().expect("a workspace");
    let home = tempfile::tempdir().expect("a home");
    let test_file = format!("test_{}", bug.module);
    std::fs::write(ws.path().join(bug.module), bug.broken).expect("the module");
    std::fs::write(ws.path().join(test_file), bug.tests).expect("the tests");
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\nreview = \"off\"\n",
    )
    .expect("the settings");
    (mistake.setup)(bug, ws.path());
    let again = (mistake.again)(bug);
    let server = ModelServer::start(vec![(mistake.first)(bug), openai_text(&[&again])]);
    let python = std::env::var("AGENT_LS_TEST_PYTHON").ok();
    let mut cmd = Command::new(binary());
    cmd.args([
        "run",
        "fix the failing tests",
        "--yes",
        "--json",
        "--workspace",
    ])
    .arg(ws.path())
    .env_clear()
    .env("PATH", path_with(python.as_deref()))
    .env("HOME", home.path())
    .env("XDG_CONFIG_HOME", home.path())
    .env("AGENT_LS_MODEL__PROVIDER", "openai")
    .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
    .env("OPENAI_API_KEY", "bench-key")
    .envs(mistake.env.iter().copied())
    .stdin(Stdio::null());
    let out = cmd.output().expect("agent-ls runs");
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let file = std::fs::read_to_string(ws.path().join(bug.module)).unwrap_or_default();
    let recovered = o["status"] == "done"
        && o["tests"]["failed"] == 0
        && o["tests"]["passed"].as_u64().unwrap_or(0) > 0
        && file == (mistake.wanted)(bug);
    (recovered, server.requests().len())
}

/// PATH with the test Python's folder first, when one is named.
fn path_with(python: Option<&str>) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    match python.and_then(|p| Path::new(p).parent()) {
        Some(dir) => format!("{}:{path}", dir.display()),
        None => path,
    }
}

fn main() {
    println!(
        "{:<36} {:>10} {:>24}",
        "class", "recovered", "extra model calls (mean)"
    );
    for mistake in &MISTAKES {
        let (mut recovered, mut extra) = (0, 0);
        for bug in &BUGS {
            let (ok, calls) = run(bug, mistake);
            if ok {
                recovered += 1;
                // A clean run makes one coder call.
                extra += calls.saturating_sub(1);
            }
        }
        let mean = if recovered == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", extra as f64 / recovered as f64)
        };
        println!(
            "{:<36} {:>10} {:>24}",
            mistake.class,
            format!("{recovered}/{}", BUGS.len()),
            mean
        );
    }
}
