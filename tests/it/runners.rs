//! Test runs for real: process control (a hang, a grandchild holding the pipe, a flood of
//! output, a refused command, cancellation) and the real tools (cargo, pytest, unittest,
//! node's test runner, go) on the fixture projects, parsed into failures.

use crate::support;

/// The sandbox the server and `agent-ls run` use, with this build's binary as its helper.
fn sandbox() -> agent_ls_runtime::trust::sandbox::Sandbox {
    agent_ls_runtime::trust::sandbox::Sandbox::with_helper(
        &agent_ls_runtime::config::SandboxConfig::default(),
        std::path::PathBuf::from(env!("CARGO_BIN_EXE_agent-ls")),
    )
}

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_ls_runtime::config::TestConfig;
use agent_ls_runtime::tests_run::{self, Location, RunEnd, RunError, RunResult};
use tokio_util::sync::CancellationToken;

fn config(argv: &[&str]) -> TestConfig {
    TestConfig {
        command: argv.iter().map(|s| s.to_string()).collect(),
        allowlist: vec![
            "sh -c".into(),
            "cargo".into(),
            "npm".into(),
            "go".into(),
            "python3".into(),
        ]
        .into_iter()
        .chain(std::env::var("AGENT_LS_TEST_PYTHON").ok())
        .collect(),
        timeout_secs: 60,
        grace_ms: 500,
        ..TestConfig::default()
    }
}

fn run(root: &Path, cfg: &TestConfig) -> Result<RunResult, RunError> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(tests_run::run(
        root,
        cfg,
        &sandbox(),
        &CancellationToken::new(),
    ))
}

#[test]
fn a_hanging_test_is_stopped_at_the_timeout_with_its_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&[
        "sh",
        "-c",
        "sleep 1000 & echo $! > child.pid; trap '' TERM; echo started; sleep 1000",
    ]);
    cfg.timeout_secs = 1;
    let started = Instant::now();
    let result = run(dir.path(), &cfg).unwrap();
    let took = started.elapsed();
    assert_eq!(result.end, RunEnd::TimedOut);
    assert!(
        took < Duration::from_millis(1_000 + 500 + 1_500),
        "took {took:?}"
    );
    assert!(result.report.contains("started"));
    assert!(result.report.contains("stopped after 1 s"));
    let pid = std::fs::read_to_string(dir.path().join("child.pid")).unwrap();
    assert!(!support::alive(&pid), "the background child {pid} survived");
}

#[test]
fn a_grandchild_holding_stdout_does_not_hang_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&["sh", "-c", "sleep 1000 & echo $! > child.pid; echo done"]);
    let started = Instant::now();
    let result = run(dir.path(), &cfg).unwrap();
    assert_eq!(result.end, RunEnd::Exited { code: 0 });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let pid = std::fs::read_to_string(dir.path().join("child.pid")).unwrap();
    assert!(!support::alive(&pid), "the background child {pid} survived");
}

#[test]
fn two_hundred_megabytes_without_newlines_are_capped_and_drained() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&[
        "sh",
        "-c",
        "head -c 200000000 /dev/zero | tr '\\0' x; echo; echo tail-marker",
    ]);
    cfg.output_cap_bytes = 64 * 1024;
    let result = run(dir.path(), &cfg).unwrap();
    assert_eq!(result.end, RunEnd::Exited { code: 0 });
    assert!(result.report.contains("tail-marker"));
    assert!(result.report.chars().count() < 4_000, "the report is cut");
}

#[test]
fn a_command_off_the_allowlist_is_refused_and_never_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "x").unwrap();
    let cfg = TestConfig {
        command: vec!["rm".into(), "keep.txt".into()],
        ..TestConfig::default()
    };
    match run(dir.path(), &cfg) {
        Err(RunError::Refused(msg)) => assert!(msg.contains("not on the allowlist"), "{msg}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(dir.path().join("keep.txt").exists());
}

#[test]
fn cancelling_stops_the_run_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&["sh", "-c", "echo $$ > leader.pid; sleep 1000"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let result = rt.block_on(async {
        // Cancelled once the command is running: its pid file is the sign.
        let (c, pid_file) = (cancel.clone(), dir.path().join("leader.pid"));
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            // The shell makes the file before `echo` writes it: waited until it holds the pid
            // (a cancel in between left an empty file, read as no pid at all).
            let written = |p: &std::path::Path| {
                std::fs::read_to_string(p).is_ok_and(|t| !t.trim().is_empty())
            };
            while !written(&pid_file) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            c.cancel();
        });
        tests_run::run(dir.path(), &cfg, &sandbox(), &cancel).await
    });
    let result = result.unwrap();
    assert_eq!(result.end, RunEnd::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(3));
    let pid = std::fs::read_to_string(dir.path().join("leader.pid")).unwrap();
    // SIGKILL is delivered, not waited for: under load the process may take a moment to go.
    let killed = Instant::now();
    while support::alive(&pid) {
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "{pid} outlived the cancel"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn secrets_do_not_reach_the_test_process() {
    const SECRET: &str = "sk-should-not-leak";
    // The key must be in this process's environment, for the runner to inherit it. Setting it
    // here would set it for every test of this binary, read by other threads while written:
    // this test runs again instead, alone, in a child that has the key from its start.
    if std::env::var("AGENT_LS_FAKE_API_KEY").as_deref() != Ok(SECRET) {
        let name = format!(
            "{}::secrets_do_not_reach_the_test_process",
            module_path!().split_once("::").map_or("", |(_, m)| m)
        );
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name.as_str(), "--exact", "--test-threads=1"])
            .env("AGENT_LS_FAKE_API_KEY", SECRET)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{name} in a child with the key:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&["sh", "-c", "env"]);
    let result = run(dir.path(), &cfg).unwrap();
    assert!(!result.report.contains(SECRET));
    assert!(result.report.contains("PATH="));
}

/// A fresh copy of a fixture project, so runs leave nothing in the repository.
fn project(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/projects")
        .join(name);
    copy_dir(&src, dir.path());
    let root = dir.path().canonicalize().unwrap();
    (dir, root)
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Whether a tool these tests drive is here. scripts/test installs them all and requires them
/// (AGENT_LS_REQUIRE_REAL_MODEL); a plain `cargo test` without them skips, saying so.
fn have(tool: &str, present: bool) -> bool {
    if present {
        return true;
    }
    if std::env::var("AGENT_LS_REQUIRE_REAL_MODEL").is_ok() {
        panic!("{tool} is missing; scripts/test installs it");
    }
    eprintln!("skipped: {tool} is not installed (scripts/test installs it)");
    false
}

fn pytest_available() -> bool {
    std::process::Command::new(support::python())
        .args(["-m", "pytest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn at(file: &str, line: u32) -> (String, u32) {
    (file.to_string(), line)
}

fn places(r: &RunResult) -> Vec<(String, u32)> {
    r.failures
        .iter()
        .map(|f| {
            f.location
                .as_ref()
                .map(|l: &Location| (l.file.clone(), l.line))
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn real_cargo_test() {
    let (_dir, root) = project("rust");
    let result = run(&root, &config(&[])).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(result.command.argv[..2], ["cargo", "test"]);
    // libtest runs tests in parallel, so the order of the two failures varies between runs.
    let mut got = places(&result);
    got.sort();
    assert_eq!(
        got,
        [at("src/lib.rs", 15), at("src/lib.rs", 27)],
        "{}",
        result.report
    );
    assert!(
        result
            .failures
            .iter()
            .any(|f| f.message.contains("right: 4"))
    );
    assert_eq!((result.passed, result.failed), (Some(1), Some(2)));
}

#[test]
fn real_pytest_with_assertion_rewriting_and_a_collection_error() {
    if !have("pytest", pytest_available()) {
        return;
    }
    let (_dir, root) = project("python");
    let py = support::python();
    let result = run(&root, &config(&[&py, "-m", "pytest"])).unwrap();
    assert_eq!(
        places(&result),
        [
            at("tests/test_calc.py", 5),
            at("tests/test_calc.py", 13),
            at("tests/test_calc.py", 17)
        ],
        "{}",
        result.report
    );
    assert!(result.failures[0].message.contains("assert 0 == 4"));
    assert_eq!(result.failures[1].frames[0].file, "calc.py");
    let short = run(&root, &config(&[&py, "-m", "pytest", "--tb=short"])).unwrap();
    assert_eq!(places(&short), places(&result));

    let (_dir, root) = project("python_broken");
    let result = run(&root, &config(&[&py, "-m", "pytest"])).unwrap();
    assert_eq!(
        places(&result),
        [at("tests/test_broken.py", 1)],
        "{}",
        result.report
    );
    assert!(result.failures[0].message.contains("SyntaxError"));
}

#[test]
fn real_python_unittest() {
    let (_dir, root) = project("python_unittest");
    let result = run(&root, &config(&["python3", "-m", "unittest"])).unwrap();
    let mut got = places(&result);
    got.sort();
    assert_eq!(
        got,
        [at("test_shapes.py", 10), at("test_shapes.py", 13)],
        "{}",
        result.report
    );
    assert_eq!((result.passed, result.failed), (Some(1), Some(2)));
}

#[test]
fn real_node_test_runner() {
    let (_dir, root) = project("node");
    let result = run(&root, &config(&[])).unwrap();
    assert_eq!(result.command.argv, ["npm", "test"]);
    assert_eq!(
        places(&result),
        [at("math.test.js", 6)],
        "{}",
        result.report
    );
    assert!(result.failures[0].message.contains("0 !== 4"));
}

#[test]
fn real_go_test() {
    if !have("go", agent_ls_runtime::tests_run::command::on_path("go")) {
        return;
    }
    let (_dir, root) = project("go");
    let result = run(&root, &config(&[])).unwrap();
    assert_eq!(result.command.argv, ["go", "test", "./..."]);
    assert_eq!(places(&result), [at("add_test.go", 7)], "{}", result.report);
    assert!(result.failures[0].message.contains("want 4"));
}
