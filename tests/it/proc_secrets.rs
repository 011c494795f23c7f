//! The model's key in agent-ls's environment stays out of reach of the commands and tests it
//! starts: they run as the same user, and `/proc/<pid>/environ` is open to that user unless
//! the process is not dumpable. As root (CI), both sides run as `nobody`, since root may read
//! any process's environment.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `cmd` as `nobody` when this test runs as root, else as it is.
fn as_plain_user(program: &str) -> Command {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            program,
        ]);
        c
    } else {
        Command::new(program)
    }
}

#[test]
fn a_process_of_the_same_user_cannot_read_agent_ls_s_environment() {
    // A copy anyone may run: the checkout may sit where `nobody` cannot reach.
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = dir.path().join("agent-ls");
    // Copied by `cp`, not std::fs::copy: a file this process holds open for writing is
    // inherited by any child another test forks meanwhile, and exec of a file open for writing
    // fails (ETXTBSY). All tests share one process now.
    let copied = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_agent-ls"))
        .arg(&bin)
        .status()
        .expect("cp");
    assert!(copied.success(), "copy the binary");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).expect("home");
    for p in [dir.path(), home.as_path()] {
        std::process::Command::new("chmod")
            .args(["0777", &p.display().to_string()])
            .status()
            .expect("chmod");
    }
    let secret = "sk-canary-7f3a9c0e5d1b";
    let mut server = as_plain_user(&bin.display().to_string())
        .arg("serve")
        .env_clear()
        .env("HOME", &home)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("OPENAI_API_KEY", secret)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start agent-ls serve");
    // setpriv execs agent-ls in place, so the child's pid is the server's.
    let pid = server.id();
    let environ = format!("/proc/{pid}/environ");
    let deadline = Instant::now() + Duration::from_secs(10);
    // Until setpriv has exec'd agent-ls the process is root's, whose environment `nobody` may
    // never read: the check starts once agent-ls itself runs.
    while std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or(true, |c| c.trim() != "agent-ls")
    {
        assert!(Instant::now() < deadline, "agent-ls serve did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut last = String::new();
    let refused = loop {
        let read = as_plain_user("cat").arg(&environ).output().expect("cat");
        let text = String::from_utf8_lossy(&read.stdout).to_string();
        // In the moment between exec and agent-ls's first lines the file is still readable.
        if !read.status.success() {
            break true;
        }
        if text.contains(secret) {
            last = "the key was readable".into();
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        refused,
        "another process of agent-ls's user could still read {environ} after 10 s ({last})"
    );
}

/// Every file under `dir`, its bytes lossily as text, with its path.
fn files_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    out
}

/// A key that reached agent-ls from a file (a role's `api_key` in the user file: not a
/// variable named like a key, not shaped like one), printed by a test, is redacted by value
/// from the journal and the store; and the user file, where `XDG_CONFIG_HOME` puts it, is not
/// readable by the test.
#[test]
fn a_key_from_the_user_file_echoed_by_a_test_never_reaches_the_journal_or_the_store() {
    const KEY: &str = "plain-role-key-38";
    let ws = crate::support::example();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\nreview = \"off\"\nmax_iterations = 1\n",
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    // `support::agent_ls` sets XDG_CONFIG_HOME to the home folder: the user file is
    // `<home>/agent-ls/config.toml`, outside the default `~/.config/agent-ls`.
    let user_dir = home.path().join("agent-ls");
    std::fs::create_dir_all(&user_dir).unwrap();
    std::fs::write(
        user_dir.join("config.toml"),
        format!("[roles.tester]\napi_key = \"{KEY}\"\n"),
    )
    .unwrap();
    // The key in two pieces: the model reads the test's source, which does not hold it whole.
    let leak = format!(
        "import os, unittest\n\nclass Leak(unittest.TestCase):\n    def test_leak(self):\n        try:\n            open(os.path.join(os.environ['HOME'], 'agent-ls', 'config.toml')).read()\n            said = 'config: read'\n        except OSError:\n            said = 'config: refused'\n        self.fail(said + ' key ' + '{head}' + '{tail}')\n",
        head = &KEY[..6],
        tail = &KEY[6..]
    );
    std::fs::write(ws.path().join("test_leak.py"), leak).unwrap();
    let server = crate::support::model_server::ModelServer::start(vec![
        crate::support::model_server::openai_text(&[crate::support::git::FIX_AND_CREATE]),
    ]);
    let out = crate::support::in_workspace(
        &["run", "fix the failing tests", "--yes"],
        ws.path(),
        home.path(),
    )
    .env("AGENT_LS_MODEL__PROVIDER", "openai")
    .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
    .env("OPENAI_API_KEY", "test-key")
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let written = files_under(&ws.path().join(".agent-ls"));
    assert!(!written.is_empty(), "nothing recorded: {stderr}");
    let all: String = written.iter().map(|(_, text)| text.as_str()).collect();
    // The test ran and its failure was recorded, the key in it redacted.
    assert!(all.contains("key <redacted>"), "{stderr}");
    assert!(all.contains("config: refused"), "{stderr}");
    // Nor does the model's request carry it: the test output it reads is redacted too.
    let requests = server.requests();
    let sent: Vec<String> = requests.iter().map(|r| r.body.to_string()).collect();
    assert!(
        sent.iter().any(|b| b.contains("key <redacted>")),
        "{sent:?}"
    );
    for b in &sent {
        let at = b.find(KEY).unwrap_or(0);
        let around: String = b[at.saturating_sub(200)..].chars().take(300).collect();
        assert!(!b.contains(KEY), "{around}");
    }
    for (path, text) in &written {
        let at = text.find(KEY).unwrap_or(0);
        let around: String = text[at.saturating_sub(300)..].chars().take(400).collect();
        assert!(
            !text.contains(KEY),
            "{} holds the key: {around:?}",
            path.display()
        );
    }
}
