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
