//! The processes agent-ls starts for a test run begin clean and end with it: an empty signal
//! mask and default dispositions (so `terminate()` works inside a test), and no process of the
//! run left behind when agent-ls itself is killed, even with SIGKILL.

mod support;

use std::path::Path;
use std::process::Stdio;
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
