//! What a new user meets first on the command line (issue 37): `scripts/demo` telling the whole
//! story without a log line or an unavailable review, `review` saying its verdict once,
//! agent-ls's own state kept out of git, `pytest -q`'s summary read, the runs of
//! `run --isolated` found by a plain `diff`, `rollback` and `commit`, and no misleading hint.
//! The real binary, real git and the replay provider as the model.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use support::git::git;

/// The PATH of a new user's shell, with the tests' Python (and its pytest) first.
fn path_with_python() -> String {
    let python = PathBuf::from(support::python());
    let dir = python
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| format!("{}:", d.display()));
    format!(
        "{}{}",
        dir.unwrap_or_default(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Stdout and stderr of a finished command, as the user's terminal shows them.
fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A copy of the example as a repository of its own, committed, with no `.gitignore` of
/// ours: what agent-ls keeps out of git, it must keep out itself.
fn bare_repository() -> tempfile::TempDir {
    let ws = support::example();
    let p = ws.path();
    git(p, &["init", "-q", "-b", "main"]);
    git(p, &["config", "user.name", "A User"]);
    git(p, &["config", "user.email", "user@example.com"]);
    git(p, &["add", "-A"]);
    git(p, &["commit", "-qm", "start"]);
    ws
}

/// `agent-ls ARGS --workspace WS` with the model's answers from `lines` and `home` as HOME.
fn agent(ws: &Path, home: &Path, args: &[&str], lines: &[Value]) -> Output {
    let script = home.join("replay.jsonl");
    std::fs::write(&script, support::replay_script(lines)).unwrap();
    support::in_workspace(args, ws, home)
        .env("PATH", path_with_python())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("AGENT_LS_MODEL__PROVIDER", "replay")
        .env("AGENT_LS_MODEL__REPLAY_FILE", &script)
        .output()
        .unwrap()
}

fn coder(answer: &str) -> Value {
    json!({"role": "coder", "content": answer})
}

fn correct() -> Value {
    json!({"role": "reviewer", "content": r#"{"findings": [], "verdict": "correct", "explanation": "add adds", "confidence": 0.9}"#})
}

/// `run "fix the failing tests" --yes --json` with the fix and a correct review: its
/// outcome, done, and its output.
fn fixed(ws: &Path, home: &Path) -> (Value, Output) {
    let out = agent(
        ws,
        home,
        &["run", "fix the failing tests", "--yes", "--json"],
        &[coder(FIX), correct()],
    );
    let o: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", said(&out)));
    assert_eq!(o["status"], "done", "{}", said(&out));
    (o, out)
}

const FIX: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";

#[test]
fn the_demo_tells_the_whole_story_without_a_log_line_or_an_unavailable_review() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(support::repo("scripts/demo"))
        .env_clear()
        .env("PATH", path_with_python())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .env("TMPDIR", home.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("AGENT_LS_DEMO_BIN", support::binary())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    for part in [
        "working in the scratch repository",
        "the reflector finds T1 not done",
        "review: the patch is correct",
        "tests 3 passed / 0 failed",
        "git checkpoint ",
        "agent-ls diff ",
        "agent-ls rollback ",
        "agent-ls commit ",
    ] {
        assert!(text.contains(part), "`{part}` missing from:\n{text}");
    }
    for never in [
        "WARN",
        "unavailable",
        "git switch -",
        "not a git repository",
    ] {
        assert!(!text.contains(never), "`{never}` in:\n{text}");
    }
    // The scratch repository holds the fix, not committed, and nothing of agent-ls's.
    let work = text
        .split("working in the scratch repository ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .map(PathBuf::from)
        .expect("the scratch repository");
    let status = git(&work, &["status", "--porcelain"]);
    assert_eq!(status.trim(), "M calc.py", "{status}");
}

#[test]
fn agent_ls_state_is_never_staged_nor_in_a_checkpoint() {
    let ws = bare_repository();
    let p = ws.path();
    let home = tempfile::tempdir().unwrap();
    let (o, out) = fixed(p, home.path());
    assert!(p.join(".agent-ls/store.sqlite").exists());
    let status = git(p, &["status", "--porcelain", "--untracked-files=all"]);
    assert!(!status.contains(".agent-ls"), "{status}");
    git(p, &["add", "-A"]);
    let staged = git(p, &["diff", "--cached", "--name-only"]);
    assert!(!staged.contains(".agent-ls"), "{staged}");
    let checkpoint = o["checkpoint"].as_str().expect("a checkpoint");
    let tree = git(p, &["ls-tree", "-r", "--name-only", checkpoint]);
    assert!(!tree.contains(".agent-ls"), "{tree}");
    // A plain run switched no branch, so it says nothing of `git switch -`.
    assert!(!said(&out).contains("git switch"), "{}", said(&out));
}

#[test]
fn review_says_its_verdict_once_and_logs_nothing_in_between() {
    let ws = bare_repository();
    let p = ws.path();
    std::fs::write(
        p.join("calc.py"),
        std::fs::read_to_string(p.join("calc.py"))
            .unwrap()
            .replace("a - b", "a + b"),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = agent(p, home.path(), &["review"], &[correct()]);
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("the patch is correct").count(), 1, "{text}");
    // No reviewer answer left: the review is unavailable, said once, with no log line.
    let out = agent(p, home.path(), &["review"], &[]);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert_eq!(text.matches("unavailable").count(), 1, "{text}");
    assert!(!text.contains("WARN"), "{text}");
    // `run` the same: the failed reviewer call is said in the run's own words only.
    let ws = bare_repository();
    let out = agent(
        ws.path(),
        home.path(),
        &["run", "fix the failing tests", "--yes"],
        &[coder(FIX)],
    );
    let text = said(&out);
    assert!(text.contains("review unavailable"), "{text}");
    assert!(!text.contains("WARN"), "{text}");
}

#[test]
fn the_summary_of_pytest_q_is_read() {
    let ws = bare_repository();
    let p = ws.path();
    std::fs::write(
        p.join("pyproject.toml"),
        "[project]\nname = \"calc\"\nversion = \"0\"\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n",
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let (o, _) = fixed(p, home.path());
    assert_eq!(o["tests"]["passed"], 3, "{o}");
    assert!(!o["answer"].as_str().unwrap().contains("0 passed"), "{o}");
}

#[test]
fn after_an_isolated_run_diff_rollback_and_commit_act_on_it() {
    let ws = bare_repository();
    let p = ws.path().canonicalize().unwrap();
    let home = tempfile::tempdir().unwrap();
    let trusted = support::agent_ls(&["trust", p.to_str().unwrap()], home.path())
        .output()
        .unwrap();
    assert!(trusted.status.success(), "{}", said(&trusted));
    // A first run in the checkout, then an isolated one that also creates notes.py.
    let first = agent(
        &p,
        home.path(),
        &["run", "fix add", "--yes"],
        &[coder(FIX), correct()],
    );
    assert!(first.status.success(), "{}", said(&first));
    let out = agent(
        &p,
        home.path(),
        &[
            "run",
            "fix the failing tests",
            "--yes",
            "--json",
            "--isolated",
        ],
        &[coder(support::git::FIX_AND_CREATE), correct()],
    );
    let o: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", said(&out)));
    assert_eq!(o["status"], "done", "{}", said(&out));
    let wt = PathBuf::from(o["worktree"].as_str().expect("the worktree"));
    let diff = agent(&p, home.path(), &["diff"], &[]);
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(text.contains("b/notes.py"), "{text}\n{}", said(&diff));
    let commit = agent(&wt, home.path(), &["commit", "-m", "fix add"], &[]);
    assert!(commit.status.success(), "{}", said(&commit));
    assert!(said(&commit).contains("committed run"), "{}", said(&commit));
    let rollback = agent(&p, home.path(), &["rollback"], &[]);
    assert!(rollback.status.success(), "{}", said(&rollback));
    assert!(!wt.join("notes.py").exists(), "{}", said(&rollback));
    // The first run's fix in the checkout stays.
    let calc = std::fs::read_to_string(p.join("calc.py")).unwrap();
    assert!(calc.contains("return a + b"), "{calc}");
}

#[test]
fn a_project_with_no_tests_yet_is_neither_a_pass_a_failure_nor_a_configuration_error() {
    let ws = support::workspace(&[
        ("calc.py", "def add(a, b):\n    return a - b\n"),
        (
            "pyproject.toml",
            "[project]\nname = \"calc\"\nversion = \"0\"\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n",
        ),
    ]);
    let p = ws.path();
    let home = tempfile::tempdir().unwrap();
    let out = agent(p, home.path(), &["run", "run the tests", "--json"], &[]);
    let o: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", said(&out)));
    assert_eq!(o["status"], "done", "{o}");
    let answer = o["answer"].as_str().unwrap();
    assert!(answer.starts_with("no tests yet"), "{o}");
    assert_eq!(o["tests"]["failed"], 0, "{o}");
    // A fix (and --reproduce) starts with the tester writing the first test.
    for args in [
        &["run", "fix the bug: add subtracts", "--yes", "--json"][..],
        &[
            "run",
            "fix the bug: add subtracts",
            "--yes",
            "--json",
            "--reproduce",
        ][..],
    ] {
        let out = agent(p, home.path(), args, &[]);
        let o: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", said(&out)));
        assert_ne!(o["failure_kind"], "config", "{o}\n{}", said(&out));
        assert!(said(&out).contains("the tester writes"), "{}", said(&out));
    }
}

#[test]
fn doctor_does_not_tell_you_to_run_doctor() {
    let ws = support::workspace(&[]);
    let home = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = support::in_workspace(&["doctor"], ws.path(), home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "ollama")
        .env(
            "AGENT_LS_MODEL__BASE_URL",
            format!("http://127.0.0.1:{port}/v1"),
        )
        .output()
        .unwrap();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("start Ollama"), "{text}");
    assert!(!text.contains("`agent-ls doctor`"), "{text}");
}

#[test]
fn a_missing_goal_is_a_usage_error_and_an_unknown_run_is_named_as_such() {
    let home = tempfile::tempdir().unwrap();
    let out = support::agent_ls(&["run"], home.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    assert!(said(&out).contains("GOAL"), "{}", said(&out));
    let help = support::agent_ls(&["run", "--help"], home.path())
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0), "{}", said(&help));
    // A repository with one run: an id it never had is unknown, not "without a checkpoint".
    let ws = bare_repository();
    let p = ws.path();
    let run = agent(
        p,
        home.path(),
        &["run", "fix add", "--yes"],
        &[coder(FIX), correct()],
    );
    assert!(run.status.success(), "{}", said(&run));
    for cmd in ["diff", "rollback", "commit"] {
        let out = agent(p, home.path(), &[cmd, "run_nosuch"], &[]);
        let text = said(&out);
        assert!(!out.status.success(), "{text}");
        assert!(
            text.contains("there is no run run_nosuch here"),
            "{cmd}: {text}"
        );
    }
    // Outside git, `commit` says why as `diff` does.
    let plain = support::example();
    let diff = agent(plain.path(), home.path(), &["diff"], &[]);
    let commit = agent(plain.path(), home.path(), &["commit"], &[]);
    assert!(
        said(&diff).contains("not inside a git repository"),
        "{}",
        said(&diff)
    );
    assert!(
        said(&commit).contains("not inside a git repository"),
        "{}",
        said(&commit)
    );
}

#[test]
fn stats_count_a_review_alone_with_the_reviews_not_the_runs() {
    let ws = bare_repository();
    let p = ws.path();
    let fixed = std::fs::read_to_string(p.join("calc.py"))
        .unwrap()
        .replace("a - b", "a + b");
    std::fs::write(p.join("calc.py"), fixed).unwrap();
    let home = tempfile::tempdir().unwrap();
    let review = agent(p, home.path(), &["review"], &[correct()]);
    assert!(review.status.success(), "{}", said(&review));
    let stats = agent(p, home.path(), &["stats", "--json"], &[]);
    let s: Value =
        serde_json::from_slice(&stats.stdout).unwrap_or_else(|e| panic!("{e}: {}", said(&stats)));
    assert_eq!(s["total"]["runs"], 0, "{s}");
    assert!(s["total"]["pass_rate"].is_null(), "{s}");
    assert_eq!(s["total"]["review"]["reviews"], 1, "{s}");
}

#[test]
fn an_answer_cut_at_its_cap_is_not_first_streamed_whole_to_stderr() {
    use support::model_server::{ModelServer, openai_text};
    let piece = "x".repeat(4096);
    let pieces: Vec<&str> = std::iter::repeat_n(piece.as_str(), 1024).collect();
    // Every attempt gets the same 4 MiB answer, over the 2 MiB cap.
    let model = ModelServer::start(vec![openai_text(&pieces); 4]);
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    let out = support::in_workspace(
        &["run", "add a docstring to add", "--yes"],
        ws.path(),
        home.path(),
    )
    .env("PATH", path_with_python())
    .env("AGENT_LS_MODEL__PROVIDER", "openai")
    .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", model.url))
    .env("AGENT_LS_MODEL__NAME", "m")
    .env("AGENT_LS_MODEL__API_KEY", "k")
    .env("AGENT_LS_MODEL__MAX_TOKENS", "2048")
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.len() < 200 * 1024,
        "{} bytes on stderr",
        stderr.len()
    );
    assert!(
        stderr.contains("stderr shows only their first"),
        "{}",
        &stderr[stderr.len().saturating_sub(2000)..]
    );
}

#[test]
fn a_memory_search_that_finds_nothing_says_so() {
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    let out = support::in_workspace(&["memory", "search", "zebra"], ws.path(), home.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no record matches `zebra`"),
        "{}",
        said(&out)
    );
}

/// A test run's output as the user reads it keeps its timings and temporary paths as the tool
/// wrote them (issue 37): only the model's copy, which the response cache's key and the
/// failure's identity are made of, reads `<time>` and `<tmp>`.
#[test]
fn a_test_runs_durations_and_temporary_paths_are_shown_as_written() {
    let ws = support::example();
    std::fs::write(
        ws.path().join("test_paths.py"),
        "def test_reads_its_file():\n    assert False, \"took 0.25s to read /tmp/agent-ls-data/input.txt\"\n",
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = support::in_workspace(
        &["run", "run `python3 -m pytest -q test_paths.py`"],
        ws.path(),
        home.path(),
    )
    .env("PATH", path_with_python())
    .env("PYTHONDONTWRITEBYTECODE", "1")
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("took 0.25s to read /tmp/agent-ls-data/input.txt"),
        "{}",
        said(&out)
    );
    assert!(
        !stdout.contains("<time>") && !stdout.contains("<tmp>"),
        "{}",
        said(&out)
    );
}
