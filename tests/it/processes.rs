//! The processes agent-ls starts for a test run begin clean and end with it: an empty signal
//! mask and default dispositions (so `terminate()` works inside a test) under `run`, `serve`
//! and MCP, and no process of the run left behind when `run`, `serve`, `acp` or `mcp` is
//! ended by SIGTERM, SIGINT, SIGKILL or its stdin closing, or when an MCP client cancels the
//! call.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

/// A unittest that checks the signal state it was started with, and that a child it starts
/// dies of `terminate()`: both fail when SIGTERM is blocked or ignored.
const SIGNALS_TEST: &str = r#"import signal, subprocess, unittest


def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1], 16)


class Signals(unittest.TestCase):
    def test_nothing_blocked(self):
        self.assertEqual(status("SigBlk"), 0)

    def test_sigterm_and_sigint_at_their_defaults(self):
        ignored = status("SigIgn")
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            self.assertEqual(ignored & (1 << (s - 1)), 0, s)

    def test_terminate_ends_a_child(self):
        child = subprocess.Popen(["sleep", "30"])
        child.terminate()
        self.assertEqual(child.wait(timeout=5), -signal.SIGTERM)
"#;

/// A unittest that writes its process id, then runs far longer than any test here waits.
const HANGING_TEST: &str = r#"import os, time, unittest


class Hang(unittest.TestCase):
    def test_hang(self):
        with open("test.pid.tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename("test.pid.tmp", "test.pid")
        time.sleep(300)
"#;

/// `agent-ls run "run `python3 -m unittest`"` in `ws`, as `support::cli` runs it.
fn unittest_run(ws: &Path, home: &Path) -> std::process::Command {
    support::cli(&["run", "run `python3 -m unittest`"], ws, home)
}

#[test]
fn a_test_run_starts_with_an_empty_signal_mask_and_default_dispositions() {
    let ws = support::workspace(&[("test_signals.py", SIGNALS_TEST)]);
    let home = tempfile::tempdir().unwrap();
    let out = unittest_run(ws.path(), home.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the signal tests failed under agent-ls run:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("\"passed\":3") || stdout.contains("3 passed"),
        "{stdout}"
    );
}

#[test]
fn a_test_run_ends_when_agent_ls_is_killed_with_sigkill() {
    let ws = support::workspace(&[("test_hang.py", HANGING_TEST)]);
    let home = tempfile::tempdir().unwrap();
    let mut agent = unittest_run(ws.path(), home.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = ws.path().join("test.pid");
    let started = Instant::now();
    while !pid_file.exists() {
        assert!(
            started.elapsed() < support::DEADLINE,
            "the test never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let test_pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(support::alive(test_pid), "the test runs before the kill");
    agent.kill().unwrap();
    agent.wait().unwrap();
    let killed = Instant::now();
    while support::alive(test_pid) {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the test process {test_pid} outlived agent-ls's SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for the hanging test to write its pid, and returns it.
fn hanging_test_pid(ws: &Path) -> i32 {
    let pid_file = ws.join("test.pid");
    let started = Instant::now();
    while !pid_file.exists() {
        assert!(
            started.elapsed() < support::DEADLINE,
            "the test never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Waits until process `pid` has ended, failing after `within`.
fn ends_within(pid: i32, within: Duration, what: &str) {
    let since = Instant::now();
    while support::alive(pid) {
        assert!(since.elapsed() < within, "process {pid} outlived {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `agent-ls mcp` on `ws`, initialised, with a `run_tests` call (id 2) in flight.
fn mcp_running_tests(ws: &Path, home: &Path) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut mcp = support::in_workspace(&["mcp"], ws, home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = mcp.stdin.take().unwrap();
    let mut stdout = BufReader::new(mcp.stdout.take().unwrap());
    let mut send = |m: serde_json::Value| writeln!(stdin, "{m}").unwrap();
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "processes-test", "version": "0"}}}),
    );
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"id\":1"), "{line}");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_tests", "arguments": {}}}),
    );
    (mcp, stdin, stdout)
}

#[test]
fn closing_the_mcp_servers_stdin_ends_its_test_run_and_the_server_at_once() {
    let ws = support::workspace(&[("test_hang.py", HANGING_TEST)]);
    let home = tempfile::tempdir().unwrap();
    let (mut mcp, stdin, _stdout) = mcp_running_tests(ws.path(), home.path());
    let test_pid = hanging_test_pid(ws.path());
    drop(stdin);
    let closed = Instant::now();
    // rmcp alone would wait 5 s for the call to answer; the run hears of the end instead.
    loop {
        if mcp.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            closed.elapsed() < Duration::from_secs(3),
            "agent-ls mcp still runs after its stdin closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ends_within(test_pid, Duration::from_secs(3), "agent-ls mcp's end");
}

#[test]
fn a_cancelled_mcp_run_tests_call_ends_its_test_run_and_the_server_serves_on() {
    let ws = support::workspace(&[("test_hang.py", HANGING_TEST)]);
    let home = tempfile::tempdir().unwrap();
    let (mut mcp, mut stdin, mut stdout) = mcp_running_tests(ws.path(), home.path());
    let test_pid = hanging_test_pid(ws.path());
    let cancel = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "the user stopped it"}});
    writeln!(stdin, "{cancel}").unwrap();
    ends_within(test_pid, Duration::from_secs(5), "the cancelled call");
    let list = serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    writeln!(stdin, "{list}").unwrap();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the server ended");
        if line.contains("\"id\":3") {
            break;
        }
    }
    assert!(line.contains("run_tests"), "{line}");
    drop(stdin);
    mcp.wait().unwrap();
}

/// `agent-ls acp` with a session on `ws` whose prompt (id 2) is running the hanging test.
fn acp_running_tests(ws: &Path, home: &Path) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    // The run's first step is the baseline test run, before any model call.
    std::fs::create_dir_all(home.join("agent-ls")).unwrap();
    std::fs::write(
        home.join("agent-ls/config.toml"),
        "[test]\ncommand = [\"python3\", \"-m\", \"unittest\"]\nallowlist = [\"python3\"]\n",
    )
    .unwrap();
    let mut acp = support::agent_ls(&["acp"], home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = acp.stdin.take().unwrap();
    let mut stdout = BufReader::new(acp.stdout.take().unwrap());
    let mut ask = |id: u64, method: &str, params: serde_json::Value| {
        let m = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{m}").unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "acp ended");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id && v.get("method").is_none() {
                return v;
            }
        }
    };
    ask(
        0,
        "initialize",
        serde_json::json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let cwd = ws.canonicalize().unwrap();
    let session = ask(
        1,
        "session/new",
        serde_json::json!({"cwd": cwd, "mcpServers": []}),
    );
    let id = session["result"]["sessionId"].clone();
    let prompt = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": id, "prompt": [{"type": "text", "text": "fix the failing tests"}]}});
    writeln!(stdin, "{prompt}").unwrap();
    (acp, stdin, stdout)
}

/// Ends `agent-ls acp` mid-test with `how` (a signal, or closing its stdin), then checks that
/// it exits and that the test process ends with it.
fn acp_ended_mid_test(how: Option<nix::sys::signal::Signal>) {
    let ws = support::workspace(&[("test_hang.py", HANGING_TEST)]);
    let home = tempfile::tempdir().unwrap();
    let (mut acp, stdin, _stdout) = acp_running_tests(ws.path(), home.path());
    let test_pid = hanging_test_pid(ws.path());
    match how {
        Some(signal) => {
            let pid = nix::unistd::Pid::from_raw(acp.id() as i32);
            nix::sys::signal::kill(pid, signal).unwrap();
        }
        None => drop(stdin),
    }
    let since = Instant::now();
    while acp.try_wait().unwrap().is_none() {
        assert!(
            since.elapsed() < Duration::from_secs(3),
            "agent-ls acp still runs after {how:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ends_within(
        test_pid,
        Duration::from_secs(3),
        &format!("agent-ls acp's end by {how:?}"),
    );
}

#[test]
fn sigterm_of_agent_ls_acp_ends_its_test_run() {
    acp_ended_mid_test(Some(nix::sys::signal::Signal::SIGTERM));
}

#[test]
fn sigint_of_agent_ls_acp_ends_its_test_run() {
    acp_ended_mid_test(Some(nix::sys::signal::Signal::SIGINT));
}

#[test]
fn closing_agent_ls_acps_stdin_ends_its_test_run() {
    acp_ended_mid_test(None);
}

#[test]
fn sigkill_of_agent_ls_acp_ends_its_test_run() {
    acp_ended_mid_test(Some(nix::sys::signal::Signal::SIGKILL));
}

/// Ends `agent-ls mcp` mid-`run_tests` with `signal`, then checks that it exits and that the
/// test process ends with it.
fn mcp_signalled_mid_test(signal: nix::sys::signal::Signal) {
    let ws = support::workspace(&[("test_hang.py", HANGING_TEST)]);
    let home = tempfile::tempdir().unwrap();
    let (mut mcp, _stdin, _stdout) = mcp_running_tests(ws.path(), home.path());
    let test_pid = hanging_test_pid(ws.path());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(mcp.id() as i32), signal).unwrap();
    let since = Instant::now();
    while mcp.try_wait().unwrap().is_none() {
        assert!(
            since.elapsed() < Duration::from_secs(3),
            "agent-ls mcp still runs after {signal:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ends_within(
        test_pid,
        Duration::from_secs(3),
        &format!("agent-ls mcp's end by {signal:?}"),
    );
}

#[test]
fn sigterm_sigint_and_sigkill_of_agent_ls_mcp_end_its_test_run() {
    use nix::sys::signal::Signal;
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGKILL] {
        mcp_signalled_mid_test(signal);
    }
}

#[test]
fn an_mcp_run_tests_call_starts_its_tests_with_clean_signals() {
    let ws = support::workspace(&[("test_signals.py", SIGNALS_TEST)]);
    let home = tempfile::tempdir().unwrap();
    let (mut mcp, stdin, mut stdout) = mcp_running_tests(ws.path(), home.path());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the server ended");
        if line.contains("\"id\":2") {
            break;
        }
    }
    let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
    let result = &answer["result"]["structuredContent"];
    assert_eq!(result["state"], "passed", "{answer}");
    assert_eq!(result["passed"], 3, "{answer}");
    drop(stdin);
    mcp.wait().unwrap();
}

/// `agent-ls serve` on `ws`, trusted to run `python3 -m unittest`, with a test run started
/// by `agent-ls.rerunTests`.
fn serve_running_tests(ws: &Path) -> support::Client {
    let mut c = support::Client::spawn(support::Spawn {
        user_config: Some(
            "[test]\ncommand = [\"python3\", \"-m\", \"unittest\"]\nallowlist = [\"python3\"]\n"
                .into(),
        ),
        ..support::Spawn::default()
    });
    c.initialize(ws, serde_json::json!({}), serde_json::Value::Null);
    c.command("agent-ls.rerunTests", serde_json::Value::Null)
        .unwrap();
    c
}

#[test]
fn a_language_server_test_run_starts_with_clean_signals() {
    let ws = support::workspace(&[("test_signals.py", SIGNALS_TEST)]);
    let mut c = serve_running_tests(ws.path());
    let status = c.wait_notification("agent-ls/testStatus", |p| p["state"] != "running");
    assert_eq!(status["state"], "passed", "{status}");
    assert_eq!(status["passed"], 3, "{status}");
}

#[test]
fn sigterm_sigint_sigkill_and_stdin_close_of_agent_ls_serve_end_its_test_run() {
    use nix::sys::signal::Signal;
    for how in [
        Some(Signal::SIGTERM),
        Some(Signal::SIGINT),
        Some(Signal::SIGKILL),
        None,
    ] {
        let ws = support::workspace(&[("test_hang.py", HANGING_TEST)]);
        let mut c = serve_running_tests(ws.path());
        let test_pid = hanging_test_pid(ws.path());
        match how {
            Some(signal) => {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.pid() as i32), signal).unwrap()
            }
            None => c.close_stdin(),
        }
        ends_within(
            test_pid,
            Duration::from_secs(3),
            &format!("agent-ls serve's end by {how:?}"),
        );
    }
}

#[test]
fn an_acp_prompts_test_run_starts_with_clean_signals() {
    let ws = support::workspace(&[("test_signals.py", SIGNALS_TEST)]);
    let home = tempfile::tempdir().unwrap();
    let (mut acp, stdin, mut stdout) = acp_running_tests(ws.path(), home.path());
    let mut seen = String::new();
    let mut line = String::new();
    // The prompt's first step is the baseline test run, reported as a tool call.
    while !seen.contains("(3 passed, 0 failed)") {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "acp ended before its test run was reported:\n{seen}"
        );
        assert!(
            !line.contains("\"id\":2,"),
            "the prompt ended without three passing tests:\n{seen}{line}"
        );
        seen.push_str(&line);
    }
    drop(stdin);
    acp.wait().unwrap();
}
