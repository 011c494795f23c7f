//! The sandbox's limits and privileges with real processes (issue 38): a fork loop, a runaway
//! allocation, a file over the limit and a CPU spin each stopped and named, never read as a
//! failing test; a timeout named on the CLI and to the model; agent-ls's environment and
//! memory closed to its commands (as root too); interpreter eval flags refused by default;
//! `deny_read` inside the workspace enforced; UDP refused. The limits are small (64
//! processes, 256 MB) so that no test can take the machine down, and the workspace keeps its
//! files.

use std::path::Path;

use agent_ls_runtime::config::{SandboxConfig, TestConfig};
use agent_ls_runtime::tests_run::{self, RunEnd, RunError, RunResult};
use agent_ls_runtime::trust::limits::LimitKind;
use agent_ls_runtime::trust::sandbox::Sandbox;
use tokio_util::sync::CancellationToken;

use crate::support;
use crate::support::model_server::ModelServer;

/// Small limits, so that a runaway test costs the machine little.
fn small() -> SandboxConfig {
    SandboxConfig {
        max_processes: 64,
        max_memory_mb: 256,
        max_cpu_secs: 2,
        max_file_mb: 1,
        ..SandboxConfig::default()
    }
}

/// Runs `python3 SCRIPT` (written into `ws` as `script.py`) under `sandbox`.
fn run_python(ws: &Path, script: &str, sandbox: &SandboxConfig) -> Result<RunResult, RunError> {
    std::fs::write(ws.join("script.py"), script).unwrap();
    let cfg = TestConfig {
        command: vec!["python3".into(), "script.py".into()],
        allowlist: vec!["python3".into()],
        timeout_secs: 30,
        grace_ms: 500,
        ..TestConfig::default()
    };
    let sandbox = Sandbox::with_helper(sandbox, support::binary());
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(tests_run::run(
            ws,
            &cfg,
            &sandbox,
            &CancellationToken::new(),
        ))
}

/// A workspace with a file in it that no run may lose.
fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("keep.txt"), "kept\n").unwrap();
    ws
}

fn kept(ws: &Path) {
    assert_eq!(
        std::fs::read_to_string(ws.join("keep.txt")).unwrap(),
        "kept\n"
    );
}

/// The run was stopped by `kind`, named as such, and is no failing test.
fn stopped_by(r: &RunResult, kind: LimitKind, max: u64) {
    match r.end {
        RunEnd::Limit { limit } => {
            assert_eq!((limit.kind, limit.max), (kind, max), "{}", r.report);
        }
        other => panic!("not stopped by a limit: {other:?}\n{}", r.report),
    }
    let summary = r.summary();
    assert!(summary.contains(kind.setting()), "{summary}");
    assert_ne!(r.state().as_str(), "failed", "{summary}");
    let s = tests_run::summary(r);
    assert!(
        s.stopped
            .as_deref()
            .is_some_and(|w| w.contains(kind.setting())),
        "{s:?}"
    );
}

/// Runs `script` under the small limits: it never gets to print `never`, `kind` stopped it
/// (named), and the workspace kept its file. The workspace, for more checks.
fn runaway(script: &str, never: &str, kind: LimitKind, max: u64) -> tempfile::TempDir {
    let ws = workspace();
    let r = run_python(ws.path(), script, &small()).unwrap();
    assert!(!r.report.contains(never), "{}", r.report);
    stopped_by(&r, kind, max);
    kept(ws.path());
    ws
}

#[test]
fn a_fork_loop_is_capped_and_named() {
    // It stops itself at 300 children whatever happens, and they sleep (so they count).
    let script = "import os, time\nfor i in range(300):\n    if os.fork() == 0:\n        time.sleep(20)\n        os._exit(0)\nprint('forked 300')\n";
    runaway(script, "forked 300", LimitKind::Processes, 64);
}

#[test]
fn an_allocation_is_capped_and_named() {
    let script = "blocks = []\nfor i in range(64):\n    blocks.append(bytearray(64 * 1024 * 1024))\nprint('allocated 4 GB')\n";
    runaway(script, "allocated", LimitKind::MemoryMb, 256);
}

#[test]
fn a_file_over_the_limit_is_refused_and_named() {
    let script = "with open('big.bin', 'wb') as f:\n    for i in range(4):\n        f.write(b'x' * 1024 * 1024)\n        f.flush()\nprint('wrote 4 MB')\n";
    let ws = runaway(script, "wrote 4 MB", LimitKind::FileMb, 1);
    let size = std::fs::metadata(ws.path().join("big.bin")).unwrap().len();
    assert!(size <= 1024 * 1024, "{size}");
}

#[test]
fn a_cpu_spin_is_stopped_and_named() {
    let started = std::time::Instant::now();
    runaway(
        "while True:\n    pass\n",
        "Traceback",
        LimitKind::CpuSecs,
        2,
    );
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}

#[test]
fn deny_read_inside_the_workspace_is_enforced() {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("secret")).unwrap();
    std::fs::write(ws.path().join("secret/key"), "hunter2\n").unwrap();
    let sandbox = SandboxConfig {
        deny_read: vec![ws.path().join("secret").display().to_string()],
        ..small()
    };
    let script = "import os\ntry:\n    print('read', open('secret/key').read())\nexcept OSError as e:\n    print('refused', e.errno)\nprint('kept:', open('keep.txt').read().strip())\nopen('out.txt', 'w').write('written')\nos.makedirs('made/deep')\nopen('made/deep/f', 'w').write('x')\nprint('listed', sorted(os.listdir('.')))\n";
    let r = run_python(ws.path(), script, &sandbox).unwrap();
    assert!(r.report.contains("refused 13"), "{}", r.report);
    assert!(!r.report.contains("hunter2"), "{}", r.report);
    assert!(r.report.contains("kept: kept"), "{}", r.report);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "written"
    );
    assert!(ws.path().join("made/deep/f").is_file());
    assert!(r.passed_all(), "{}", r.report);
}

#[test]
fn a_udp_send_is_refused_unless_the_network_is_allowed() {
    let ws = workspace();
    let script = "import socket\ntry:\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    s.sendto(b'key', ('127.0.0.1', 9))\n    print('sent')\nexcept OSError as e:\n    print('refused', e.errno)\n";
    let r = run_python(ws.path(), script, &small()).unwrap();
    assert!(r.report.contains("refused 1"), "{}", r.report);
    let open = SandboxConfig {
        network: true,
        ..small()
    };
    let r = run_python(ws.path(), script, &open).unwrap();
    assert!(r.report.contains("sent"), "{}", r.report);
}

#[test]
fn node_eval_is_refused_by_the_default_allowlist() {
    let ws = workspace();
    let cfg = TestConfig {
        command: vec!["node".into(), "-e".into(), "require('fs')".into()],
        ..TestConfig::default()
    };
    let sandbox = Sandbox::with_helper(&small(), support::binary());
    let r = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(tests_run::run(
            ws.path(),
            &cfg,
            &sandbox,
            &CancellationToken::new(),
        ));
    match r {
        Err(RunError::Refused(why)) => assert!(why.contains("\"node -e\""), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// As root (CI), a command agent-ls starts reads neither agent-ls's environment nor attaches
/// to it: capabilities dropped, agent-ls not dumpable, Landlock's ptrace rule.
#[test]
fn a_command_cannot_read_agent_ls_s_environment_or_ptrace_it() {
    let ws = workspace();
    let probe = r#"import ctypes, os
helper = os.getppid()
stat = open(f'/proc/{helper}/stat').read()
agent = int(stat.rsplit(')', 1)[1].split()[1])
try:
    print('environ: read', open(f'/proc/{agent}/environ', 'rb').read())
except OSError as e:
    print('environ: refused', e.errno)
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, agent, 0, 0) == 0:
    print('ptrace: attached')
    libc.ptrace(17, agent, 0, 0)
else:
    print('ptrace: refused', ctypes.get_errno())
print('uid', os.getuid(), 'caps', open('/proc/self/status').read().split('CapEff:')[1].split()[0])
"#;
    std::fs::write(ws.path().join("probe.py"), probe).unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = support::in_workspace(&["run", "run `python3 probe.py`"], ws.path(), home.path())
        .env("AGENT_LS_TEST__ALLOWLIST", r#"["python3"]"#)
        .env("OPENAI_API_KEY", "sk-probe-secret-38")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("environ: refused"), "{stdout}\n{stderr}");
    assert!(stdout.contains("ptrace: refused"), "{stdout}\n{stderr}");
    assert!(!stdout.contains("sk-probe-secret-38"), "{stdout}");
    assert!(
        stdout.contains("caps 0000000000000000"),
        "capabilities left: {stdout}"
    );
    kept(ws.path());
}

/// A suite that hangs: the CLI names the timeout and the test that hung (unittest -v
/// announced it and gave no result), and the model is told it was one rather than shown a
/// failure count.
#[test]
fn a_timeout_is_named_on_the_cli_and_to_the_model() {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\nreview = \"off\"\nmax_iterations = 1\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("test_hang.py"),
        "import time, unittest\n\nclass Hang(unittest.TestCase):\n    def test_hang(self):\n        time.sleep(300)\n",
    )
    .unwrap();
    let fix =
        "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let server = ModelServer::start(vec![support::model_server::openai_text(&[fix])]);
    let home = tempfile::tempdir().unwrap();
    let out = support::in_workspace(
        &["run", "fix the failing tests", "--yes"],
        ws.path(),
        home.path(),
    )
    .env("AGENT_LS_MODEL__PROVIDER", "openai")
    .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
    .env("OPENAI_API_KEY", "test-key")
    // Long enough for `unittest -v` to start and name the hung test on a busy machine (at 2 s
    // a CI run stopped it before its first line).
    .env("AGENT_LS_TEST__TIMEOUT_SECS", "8")
    .env(
        "AGENT_LS_TEST__COMMAND",
        r#"["python3", "-m", "unittest", "-v"]"#,
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tests did not finish (the tests timed out"),
        "{stderr}"
    );
    assert!(stderr.contains("test.timeout_secs"), "{stderr}");
    let hung = "while `test_hang.Hang.test_hang` was running";
    assert!(stderr.contains(hung), "{stderr}");
    let requests = server.requests();
    let first = requests.first().expect("a model call").body.to_string();
    assert!(
        first.contains("The tests did not finish: the tests timed out"),
        "{first}"
    );
    assert!(first.contains(hung), "{first}");
    assert!(!first.contains("The tests fail ("), "{first}");
}

/// A test run that timed out is named when it happens, not only in the final line: here
/// the run goes on (the hang was a one-off) and ends done, and the user still learns of it.
#[test]
fn a_timeout_is_named_when_it_happens_even_when_the_run_then_succeeds() {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\nreview = \"off\"\nmax_iterations = 3\n",
    )
    .unwrap();
    // Hangs on the first run only: it leaves a mark for the next.
    std::fs::write(
        ws.path().join("test_once.py"),
        "import os, time, unittest\n\nclass Once(unittest.TestCase):\n    def test_once(self):\n        if not os.path.exists('hung.mark'):\n            open('hung.mark', 'w').close()\n            time.sleep(300)\n",
    )
    .unwrap();
    let fix =
        "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let server = ModelServer::start(vec![
        support::model_server::openai_text(&[fix]),
        support::model_server::openai_text(&[fix]),
    ]);
    let home = tempfile::tempdir().unwrap();
    let out = support::in_workspace(
        &["run", "fix the failing tests", "--yes"],
        ws.path(),
        home.path(),
    )
    .env("AGENT_LS_MODEL__PROVIDER", "openai")
    .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
    .env("OPENAI_API_KEY", "test-key")
    .env("AGENT_LS_TEST__TIMEOUT_SECS", "8")
    .env(
        "AGENT_LS_TEST__COMMAND",
        r#"["python3", "-m", "unittest", "-v"]"#,
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warned = stderr
        .find("agent-ls: warning: the tests timed out")
        .unwrap_or_else(|| panic!("no timeout warning:\n{stderr}"));
    let done = stderr.find("agent-ls: done").expect("done");
    assert!(warned < done, "{stderr}");
    assert!(stderr.contains("test.timeout_secs"), "{stderr}");
}

/// A test that catches the refused fork and passes: the run passed, and says the limit was
/// reached (the control group counted the refusal), rather than only "the tests pass".
#[test]
fn a_limit_reached_is_named_when_the_tests_then_pass() {
    let ws = workspace();
    let script = "import os, sys, time\nkids = 0\ntry:\n    for i in range(300):\n        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n        kids += 1\nexcept OSError as e:\n    print('fork refused after', kids)\nsys.exit(0)\n";
    let r = run_python(ws.path(), script, &small()).unwrap();
    assert!(r.report.contains("fork refused after"), "{}", r.report);
    assert_eq!(r.end, RunEnd::Exited { code: 0 }, "{}", r.report);
    let reached = r.reached.expect("the limit reached is named");
    assert_eq!((reached.kind, reached.max), (LimitKind::Processes, 64));
    assert!(
        r.summary().contains("sandbox.max_processes"),
        "{}",
        r.summary()
    );
    kept(ws.path());
}

/// Each test run has a `TMPDIR` of its own, writable even when a file the sandbox denies sits
/// in the temporary folder (a user configuration under `/tmp`, as CI runners set XDG
/// folders), and it is gone after the run.
#[test]
fn a_test_run_has_its_own_temporary_folder_and_it_is_removed() {
    let ws = workspace();
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("config.toml");
    std::fs::write(&secret, "key = 'hunter2'\n").unwrap();
    let sandbox = SandboxConfig {
        deny_read: vec![secret.display().to_string()],
        ..small()
    };
    let script = format!(
        "import os, tempfile\nprint('tmpdir', os.environ['TMPDIR'])\nwith tempfile.NamedTemporaryFile() as f:\n    f.write(b'x')\n    print('made', f.name)\ntry:\n    print('read', open({:?}).read())\nexcept OSError as e:\n    print('refused', e.errno)\n",
        secret.display().to_string()
    );
    let r = run_python(ws.path(), &script, &sandbox).unwrap();
    assert!(r.passed_all(), "{}", r.report);
    assert!(r.report.contains("refused 13"), "{}", r.report);
    // The output as the user reads it: the model's report writes temporary paths as <tmp>.
    let tmpdir = r
        .output
        .lines()
        .find_map(|l| l.strip_prefix("tmpdir "))
        .expect("the run printed its TMPDIR")
        .trim()
        .to_string();
    assert!(tmpdir.contains("agent-ls-test-"), "{tmpdir}");
    assert!(
        r.output.contains(&format!("made {tmpdir}/")),
        "{}",
        r.output
    );
    assert!(!std::path::Path::new(&tmpdir).exists(), "{tmpdir} was left");
}

/// As root with `sandbox.run_as`, a command runs as that unprivileged user: it writes the
/// workspace it was given, and a file only root may read is closed to it (uid 0 without
/// capabilities still reads root's own files). A user that does not exist runs nothing.
#[test]
fn as_root_run_as_runs_the_command_as_the_unprivileged_user() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("not root: sandbox.run_as applies to root only");
        return;
    }
    let ws = workspace();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let private = tempfile::tempdir().unwrap();
    let secret = private.path().join("root-only");
    std::fs::write(&secret, "hunter2\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = format!(
        "import os\nprint('uid', os.getuid(), 'gid', os.getgid(), 'groups', os.getgroups())\nopen('made.txt', 'w').write('x')\ntry:\n    print('root file: read', open('{}').read())\nexcept OSError as e:\n    print('root file: refused', e.errno)\n",
        secret.display()
    );
    let as_nobody = SandboxConfig {
        run_as: "nobody".into(),
        ..small()
    };
    let r = run_python(ws.path(), &script, &as_nobody).unwrap();
    assert!(r.report.contains("uid 65534"), "{}", r.report);
    assert!(r.report.contains("groups []"), "{}", r.report);
    assert!(r.report.contains("root file: refused 13"), "{}", r.report);
    assert!(!r.report.contains("hunter2"), "{}", r.report);
    assert!(ws.path().join("made.txt").is_file());
    assert!(r.passed_all(), "{}", r.report);
    // Without it, the same command is uid 0 and reads root's own file (in a workspace of its
    // own: uid 0 without capabilities cannot write over nobody's `made.txt`).
    let root_ws = workspace();
    let r = run_python(root_ws.path(), &script, &small()).unwrap();
    assert!(r.report.contains("uid 0"), "{}", r.report);
    assert!(r.report.contains("root file: read"), "{}", r.report);
    let unknown = SandboxConfig {
        run_as: "no-such-user-38".into(),
        ..small()
    };
    match run_python(ws.path(), &script, &unknown) {
        Err(RunError::Sandbox(why)) => assert!(why.contains("no user `no-such-user-38`"), "{why}"),
        other => panic!("{other:?}"),
    }
    kept(ws.path());
}
