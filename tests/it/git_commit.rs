//! Commits of a run's own files and pull requests, against the real `git` binary in temporary
//! repositories: `agent-ls run` with `git.commit = "on_success"`, `agent-ls commit` (hooks,
//! `git.no_verify`), and `agent-ls pr` with a bare repository on disk as the remote and a
//! stand-in `gh` on PATH that records its arguments.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use support::git::{FIX_AND_CREATE, git, init};

/// The coder's answer: fix `add` in calc.py and create notes.py.
fn fix_and_create() -> Value {
    json!({"role": "coder", "content": FIX_AND_CREATE})
}

/// A project in a git repository whose user is Ada, with a home of its own for agent-ls (its
/// trust file and configuration), the folder trusted unless `trusted` is false.
struct Project {
    ws: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Project {
    fn new(trusted: bool) -> Project {
        let ws = support::example();
        let p = ws.path();
        init(p);
        git(p, &["config", "user.name", "Ada Lovelace"]);
        git(p, &["config", "user.email", "ada@example.com"]);
        git(p, &["add", "-A"]);
        git(p, &["commit", "-qm", "start"]);
        let project = Project {
            ws,
            home: tempfile::tempdir().unwrap(),
        };
        if trusted {
            let out = project.agent(&["trust"], &[], &[]);
            assert!(out.status.success(), "{}", stderr(&out));
        }
        project
    }

    fn path(&self) -> &Path {
        self.ws.path()
    }

    /// `agent-ls ARGS` in the project, the model's answers from `lines`.
    fn agent(&self, args: &[&str], lines: &[Value], env: &[(&str, &str)]) -> Output {
        let script = self.path().join(".replay.jsonl");
        std::fs::write(&script, support::replay_script(lines)).unwrap();
        let mut cmd = if args == ["trust"] {
            let mut c = support::agent_ls(args, self.home.path());
            c.arg(self.path());
            c
        } else {
            support::in_workspace(args, self.path(), self.home.path())
        };
        cmd.env("AGENT_LS_MODEL__PROVIDER", "replay")
            .env("AGENT_LS_MODEL__REPLAY_FILE", &script)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// One run that fixes calc.py and creates notes.py: its outcome (`--json`).
    fn run_fix(&self, env: &[(&str, &str)]) -> Value {
        let out = self.agent(
            &["run", "fix the failing tests", "--yes", "--json"],
            &[fix_and_create()],
            env,
        );
        let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                stderr(&out)
            )
        });
        assert_eq!(o["status"], "done", "{o}\n{}", stderr(&out));
        o
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The user's own changes beside the run's: a staged edit and a staged new file, an unstaged
/// edit and an untracked file, none of them in files the run writes.
fn users_changes(p: &Path) {
    std::fs::write(p.join("util.py"), "X = 1\n").unwrap();
    std::fs::write(p.join("other.py"), "Y = 1\n").unwrap();
    git(p, &["add", "util.py", "other.py"]);
    git(p, &["commit", "-qm", "util"]);
    std::fs::write(p.join("util.py"), "X = 2\n").unwrap();
    std::fs::write(p.join("staged_new.py"), "Z = 1\n").unwrap();
    git(p, &["add", "util.py", "staged_new.py"]);
    std::fs::write(p.join("other.py"), "Y = 2\n").unwrap();
    std::fs::write(p.join("scratch.txt"), "untracked\n").unwrap();
}

/// The index and the working tree's changes as git reports them.
fn index_state(p: &Path) -> (String, String, String) {
    (
        git(p, &["diff", "--cached"]),
        git(p, &["diff"]),
        git(p, &["ls-files", "--stage"]),
    )
}

#[test]
fn commit_on_success_commits_only_the_runs_files_as_the_user_with_the_trailer() {
    let project = Project::new(true);
    let p = project.path();
    users_changes(p);
    let start = git(p, &["rev-parse", "HEAD"]);

    let o = project.run_fix(&[("AGENT_LS_GIT__COMMIT", "on_success")]);
    let commit = o["commit"].as_str().expect("a commit in --json");
    assert_eq!(o["branch"], "main", "{o}");
    assert_eq!(git(p, &["rev-parse", "HEAD"]).trim(), commit);
    assert_eq!(git(p, &["rev-parse", "HEAD^"]), start);
    let files = git(p, &["show", "--name-only", "--format=", "HEAD"]);
    let mut files: Vec<&str> = files.lines().collect();
    files.sort();
    assert_eq!(files, ["calc.py", "notes.py"]);
    let who = git(p, &["show", "-s", "--format=%an <%ae>|%cn", "HEAD"]);
    assert_eq!(who.trim(), "Ada Lovelace <ada@example.com>|Ada Lovelace");
    let message = git(p, &["show", "-s", "--format=%B", "HEAD"]);
    assert!(
        message.starts_with("fix: fix the failing tests\n"),
        "{message}"
    );
    assert!(message.contains("Goal: fix the failing tests"), "{message}");
    assert!(message.contains("Tests: passed"), "{message}");
    assert!(
        message
            .trim_end()
            .ends_with("Co-authored-by: agent-ls <agent-ls@localhost>"),
        "{message}"
    );
    // The user's changes are as they were: staged still staged, unstaged still unstaged.
    let staged = git(p, &["diff", "--cached", "--name-only"]);
    assert_eq!(
        staged.lines().collect::<Vec<_>>(),
        ["staged_new.py", "util.py"]
    );
    assert_eq!(git(p, &["diff", "--name-only"]).trim(), "other.py");
    let status = git(p, &["status", "--porcelain"]);
    assert!(status.contains("?? scratch.txt"), "{status}");
    assert!(
        !status.contains("calc.py") && !status.contains("notes.py"),
        "{status}"
    );
    assert_eq!(
        std::fs::read_to_string(p.join("util.py")).unwrap(),
        "X = 2\n"
    );
}

#[test]
fn without_on_success_a_run_commits_nothing_and_commit_needs_a_trusted_folder() {
    let project = Project::new(false);
    let p = project.path();
    let start = git(p, &["rev-parse", "HEAD"]);
    let o = project.run_fix(&[]);
    assert_eq!(o["commit"], Value::Null, "{o}");
    assert_eq!(git(p, &["rev-parse", "HEAD"]), start);

    let out = project.agent(&["commit"], &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("not trusted"), "{}", stderr(&out));
    assert_eq!(git(p, &["rev-parse", "HEAD"]), start);
}

#[test]
fn a_failing_pre_commit_hook_is_reported_and_nothing_is_lost_and_no_verify_skips_it() {
    let project = Project::new(true);
    let p = project.path();
    users_changes(p);
    // The user's hook, there before the run.
    let hook = p.join(".git/hooks/pre-commit");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho \"lint: calc.py is not formatted\" >&2\ntouch \"$(git rev-parse --git-dir)/hook-ran\"\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    project.run_fix(&[]);
    let head = git(p, &["rev-parse", "HEAD"]);
    let before = (index_state(p), git(p, &["status", "--porcelain"]));
    let calc = std::fs::read(p.join("calc.py")).unwrap();

    let out = project.agent(&["commit"], &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(said.contains("lint: calc.py is not formatted"), "{said}");
    assert!(said.contains("nothing was committed"), "{said}");
    assert!(p.join(".git/hook-ran").exists());
    assert_eq!(git(p, &["rev-parse", "HEAD"]), head);
    assert_eq!((index_state(p), git(p, &["status", "--porcelain"])), before);
    assert_eq!(std::fs::read(p.join("calc.py")).unwrap(), calc);
    assert!(p.join("notes.py").exists());

    std::fs::remove_file(p.join(".git/hook-ran")).unwrap();
    let out = project.agent(
        &["commit", "--message", "fix(calc): add adds"],
        &[],
        &[("AGENT_LS_GIT__NO_VERIFY", "true")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("fix(calc): add adds"),
        "{}",
        stdout(&out)
    );
    assert!(!p.join(".git/hook-ran").exists(), "the hook ran");
    let message = git(p, &["show", "-s", "--format=%B", "HEAD"]);
    assert!(message.starts_with("fix(calc): add adds\n"), "{message}");
    let staged = git(p, &["diff", "--cached", "--name-only"]);
    assert_eq!(
        staged.lines().collect::<Vec<_>>(),
        ["staged_new.py", "util.py"]
    );

    let out = project.agent(&["commit"], &[], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("nothing to commit"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_model_writes_the_message_when_it_answers_in_form() {
    let project = Project::new(true);
    let p = project.path();
    project.run_fix(&[]);
    let out = project.agent(
        &["commit"],
        &[json!({"role": "summarizer", "content": "fix(calc): make add add\n\nadd subtracted its arguments."})],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let message = git(p, &["show", "-s", "--format=%B", "HEAD"]);
    assert!(
        message.starts_with("fix(calc): make add add\n\nadd subtracted its arguments.\n\nGoal: fix the failing tests\n"),
        "{message}"
    );
}

/// A folder holding a stand-in `gh` that records its arguments (one a line) in `gh.args`.
fn stand_in_gh(dir: &Path) -> PathBuf {
    stand_in(dir, "gh")
}

/// A stand-in `name` (gh or glab) in `dir/bin` that records its arguments in `dir/NAME.args`
/// and prints a request's URL.
fn stand_in(dir: &Path, name: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let record = dir.join(format!("{name}.args"));
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n--\\n' \"$a\" >> '{}'; done\necho https://example.test/pull/7\n",
        record.display()
    );
    std::fs::write(bin.join(name), script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn pr_pushes_the_branch_to_a_bare_remote_and_opens_the_request_with_gh() {
    let project = Project::new(true);
    let p = project.path();
    let remote = tempfile::tempdir().unwrap();
    git(remote.path(), &["init", "-q", "--bare", "-b", "main"]);
    git(
        p,
        &["remote", "add", "origin", &remote.path().to_string_lossy()],
    );
    git(p, &["push", "-q", "origin", "main"]);
    git(p, &["switch", "-q", "-c", "agent/fix-add"]);
    let tools = tempfile::tempdir().unwrap();
    let bin = stand_in_gh(tools.path());
    let path = path_with(&bin);

    // No commit yet: refused, with the way to make one.
    project.run_fix(&[]);
    let out = project.agent(&["pr"], &[], &[("PATH", &path)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("agent-ls commit"), "{}", stderr(&out));

    let out = project.agent(&["commit"], &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let head = git(p, &["rev-parse", "HEAD"]);
    let out = project.agent(&["pr"], &[], &[("PATH", &path)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("https://example.test/pull/7"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        git(remote.path(), &["rev-parse", "refs/heads/agent/fix-add"]),
        head
    );
    let recorded = std::fs::read_to_string(tools.path().join("gh.args")).unwrap();
    let args: Vec<&str> = recorded.split("\n--\n").collect();
    let after = |flag: &str| {
        let i = args.iter().position(|a| *a == flag).expect(flag);
        args[i + 1]
    };
    assert_eq!(&args[..2], ["pr", "create"]);
    assert_eq!(after("--title"), "fix: fix the failing tests");
    assert_eq!(after("--head"), "agent/fix-add");
    assert_eq!(after("--base"), "main");
    let body = after("--body");
    assert!(body.contains("## Goal\n\nfix the failing tests"), "{body}");
    assert!(body.contains("## Tests"), "{body}");
    assert!(body.contains("- after: passed"), "{body}");
    // The replay script has no reviewer answer: the body says the review was unavailable,
    // never that it passed.
    assert!(body.contains("## Review"), "{body}");
    assert!(body.contains("review unavailable"), "{body}");
    assert!(body.contains(head.trim()), "{body}");
}

/// `origin` fetched from a hosting service at `url` (never reached here) and pushed to a bare
/// repository on disk, returned, with main pushed and known as the remote's default branch.
fn hosted_remote(p: &Path, url: &str) -> tempfile::TempDir {
    let remote = tempfile::tempdir().unwrap();
    git(remote.path(), &["init", "-q", "--bare", "-b", "main"]);
    git(p, &["remote", "add", "origin", url]);
    let bare = remote.path().to_string_lossy().into_owned();
    git(p, &["config", "remote.origin.pushurl", &bare]);
    git(p, &["push", "-q", "origin", "main"]);
    git(p, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
    git(
        p,
        &[
            "symbolic-ref",
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/main",
        ],
    );
    remote
}

#[test]
fn pr_without_gh_pushes_and_prints_the_compare_url_and_refuses_the_default_branch() {
    let project = Project::new(true);
    let p = project.path();
    let remote = hosted_remote(p, "git@github.com:owner/calc.git");
    project.run_fix(&[("AGENT_LS_GIT__COMMIT", "on_success")]);
    // A PATH with git but no gh or glab.
    let tools = tempfile::tempdir().unwrap();
    let git_bin = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::os::unix::fs::symlink(git_bin.trim(), tools.path().join("git")).unwrap();
    let path = tools.path().to_string_lossy().into_owned();

    let out = project.agent(&["pr"], &[], &[("PATH", &path)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("default branch"), "{}", stderr(&out));

    git(p, &["switch", "-q", "-c", "agent/fix"]);
    let out = project.agent(&["pr"], &[], &[("PATH", &path)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        said.contains("git push --set-upstream origin agent/fix"),
        "{said}"
    );
    assert!(
        said.contains("https://github.com/owner/calc/compare/main...agent/fix?expand=1"),
        "{said}"
    );
    assert_eq!(
        git(remote.path(), &["rev-parse", "refs/heads/agent/fix"]),
        git(p, &["rev-parse", "HEAD"])
    );
}

#[test]
fn pr_on_a_gitlab_remote_opens_a_merge_request_with_glab() {
    let project = Project::new(true);
    let p = project.path();
    let remote = hosted_remote(p, "git@gitlab.com:group/calc.git");
    git(p, &["switch", "-q", "-c", "agent/fix-add"]);
    project.run_fix(&[("AGENT_LS_GIT__COMMIT", "on_success")]);
    let tools = tempfile::tempdir().unwrap();
    // Both on PATH: the remote's host picks glab.
    stand_in(tools.path(), "gh");
    let bin = stand_in(tools.path(), "glab");
    let out = project.agent(&["pr"], &[], &[("PATH", &path_with(&bin))]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!tools.path().join("gh.args").exists(), "gh was not used");
    let recorded = std::fs::read_to_string(tools.path().join("glab.args")).unwrap();
    let args: Vec<&str> = recorded.split("\n--\n").collect();
    let after = |flag: &str| {
        let i = args.iter().position(|a| *a == flag).expect(flag);
        args[i + 1]
    };
    assert_eq!(&args[..2], ["mr", "create"]);
    assert_eq!(after("--source-branch"), "agent/fix-add");
    assert_eq!(after("--target-branch"), "main");
    assert!(after("--description").contains("## Goal"), "{recorded}");
    assert_eq!(
        git(remote.path(), &["rev-parse", "refs/heads/agent/fix-add"]),
        git(p, &["rev-parse", "HEAD"])
    );
}

const BROKEN: &str = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n";

/// A language server on the project (trusted by the editor) with calc.py open, edits applied
/// as an editor applies them, the model replayed: the fix of calc.py.
fn server(project: &Project, commit_answer: &'static str) -> support::Client {
    server_with(project, commit_answer, json!({}))
}

/// `server` with more settings (the `git` section).
fn server_with(project: &Project, commit_answer: &'static str, git: Value) -> support::Client {
    let p = project.path();
    assert_eq!(std::fs::read_to_string(p.join("calc.py")).unwrap(), BROKEN);
    let fix = json!({"role": "coder", "content": "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"});
    std::fs::write(p.join(".replay.jsonl"), support::replay_script(&[fix])).unwrap();
    let mut c = support::Client::spawn(support::Spawn::default());
    c.initialize(
        p,
        json!({}),
        json!({"model": {"provider": "replay", "replay_file": ".replay.jsonl"}, "agent": {"approval": "auto"}, "git": git, "workspaceTrusted": true}),
    );
    let uri = support::file_uri(&p.join("calc.py"));
    c.open(&uri, BROKEN);
    let editor = std::sync::Arc::new(std::sync::Mutex::new((BROKEN.to_string(), 1)));
    c.on_request_then("workspace/applyEdit", move |params| {
        let mut e = editor.lock().unwrap();
        for op in params["edit"]["documentChanges"].as_array().unwrap() {
            if op["textDocument"]["uri"] == uri.as_str() {
                e.0 = support::apply_lsp_edits(&e.0, op["edits"].as_array().unwrap());
                e.1 += 1;
            }
        }
        let change = json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": uri, "version": e.1}, "contentChanges": [{"text": e.0}]}});
        (json!({"applied": true}), vec![change])
    });
    c.on_request("window/showMessageRequest", move |params| {
        let message = params["message"].as_str().unwrap_or_default();
        if message.contains("commit the run's") {
            json!({"title": commit_answer})
        } else {
            params["actions"][0].clone()
        }
    });
    c
}

#[test]
fn the_editor_asks_after_a_successful_run_and_commits_on_commit() {
    let project = Project::new(false);
    let p = project.path();
    users_changes(p);
    let start = git(p, &["rev-parse", "HEAD"]);
    let mut c = server(&project, "Commit");
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(
        done["commit"],
        Value::Null,
        "asked after runFinished: {done}"
    );
    assert_eq!(done["branch"], "main", "{done}");
    assert!(done["checkpoint"].is_string(), "{done}");
    let committed = c.wait_notification("agent-ls/runCommitted", |_| true);
    let asked = c.server_request("window/showMessageRequest");
    assert!(
        asked["params"]["message"]
            .as_str()
            .unwrap()
            .contains("commit the run's 1 file (calc.py)?"),
        "{asked}"
    );
    assert_eq!(
        asked["params"]["actions"],
        json!([{"title": "Not now"}, {"title": "Commit"}])
    );
    let head = git(p, &["rev-parse", "HEAD"]);
    assert_eq!(committed["commit"], head.trim(), "{committed}");
    assert_eq!(committed["run_id"], done["run_id"]);
    assert_eq!(git(p, &["rev-parse", "HEAD^"]), start);
    assert_eq!(
        git(p, &["show", "--name-only", "--format=", "HEAD"]).trim(),
        "calc.py"
    );
    let message = git(p, &["show", "-s", "--format=%an|%B", "HEAD"]);
    assert!(
        message.starts_with("Ada Lovelace|fix: fix the failing tests"),
        "{message}"
    );
    assert!(
        message.contains("Co-authored-by: agent-ls <agent-ls@localhost>"),
        "{message}"
    );
    let staged = git(p, &["diff", "--cached", "--name-only"]);
    assert_eq!(
        staged.lines().collect::<Vec<_>>(),
        ["staged_new.py", "util.py"]
    );
    assert_eq!(git(p, &["diff", "--name-only"]).trim(), "other.py");
}

#[test]
fn not_now_commits_nothing_and_the_commit_command_commits_later() {
    let project = Project::new(false);
    let p = project.path();
    let start = git(p, &["rev-parse", "HEAD"]);
    let mut c = server(&project, "Not now");
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}");
    c.wait_until(
        |c| {
            c.server_requests
                .iter()
                .any(|r| {
                    r["method"] == "window/showMessageRequest"
                        && r["params"]["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("commit the run's"))
                })
                .then_some(())
        },
        "the question about committing",
    );

    let answer = c
        .command("agent-ls.commit", json!({"run": done["run_id"]}))
        .unwrap();
    let head = git(p, &["rev-parse", "HEAD"]);
    assert_eq!(answer["commit"], head.trim(), "{answer}");
    // The only commit since the start: "Not now" made none.
    assert_eq!(git(p, &["rev-parse", "HEAD^"]), start);
    assert_eq!(answer["branch"], "main");
    assert_eq!(answer["files"], json!(["calc.py"]));
    assert_eq!(answer["subject"], "fix: fix the failing tests");
    // Nothing left of the run's to commit: refused with the reason.
    let again = c.command("agent-ls.commit", Value::Null).unwrap_err();
    assert!(
        again["message"]
            .as_str()
            .unwrap()
            .contains("nothing to commit"),
        "{again}"
    );
}

/// `agent-ls acp` spoken to line by line: each request's answer and the messages before it.
struct Acp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Acp {
    fn request(&mut self, id: u64, method: &str, params: Value) -> (Value, Vec<Value>) {
        use std::io::{BufRead, Write};
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{message}").unwrap();
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "acp ended");
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["id"] == json!(id) && value.get("method").is_none() {
                return (value, seen);
            }
            seen.push(value);
        }
    }
}

#[test]
fn acp_advertises_and_answers_commit() {
    let project = Project::new(true);
    let p = project.path();
    let start = git(p, &["rev-parse", "HEAD"]);
    let o = project.run_fix(&[]);
    use std::process::Stdio;
    let mut child = support::agent_ls(&["acp"], project.home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acp = Acp {
        stdin: child.stdin.take().unwrap(),
        stdout: std::io::BufReader::new(child.stdout.take().unwrap()),
        child,
    };
    acp.request(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let cwd = p.canonicalize().unwrap();
    let (created, mut seen) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].clone();
    let (answer, more) = acp.request(
        2,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "/commit"}]}),
    );
    seen.extend(more);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let advertised = seen.iter().any(|n| {
        n["params"]["update"]["availableCommands"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["name"] == "commit"))
    });
    assert!(advertised, "{seen:?}");
    let said: String = seen
        .iter()
        .filter_map(|n| n["params"]["update"]["content"]["text"].as_str())
        .collect();
    let run = o["run_id"].as_str().unwrap();
    assert!(said.contains(&format!("committed run {run}")), "{said}");
    assert_eq!(git(p, &["rev-parse", "HEAD^"]), start);
    drop(acp.stdin);
    acp.child.wait().unwrap();
}

#[test]
fn a_hook_that_changed_after_the_run_began_is_not_run() {
    let project = Project::new(true);
    let p = project.path();
    project.run_fix(&[]);
    // As a test run could have written it: .git/ is inside the workspace.
    let hook = p.join(".git/hooks/pre-commit");
    std::fs::write(
        &hook,
        "#!/bin/sh\ntouch \"$(git rev-parse --git-dir)/planted-ran\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let head = git(p, &["rev-parse", "HEAD"]);
    let out = project.agent(&["commit"], &[], &[]);
    assert_eq!(out.status.code(), Some(1));
    let said = stderr(&out);
    assert!(
        said.contains("pre-commit") && said.contains("changed after the run began"),
        "{said}"
    );
    assert!(!p.join(".git/planted-ran").exists(), "the planted hook ran");
    assert_eq!(git(p, &["rev-parse", "HEAD"]), head);
}

#[test]
fn on_success_in_the_editor_commits_before_run_finished_without_asking() {
    let project = Project::new(false);
    let p = project.path();
    let mut c = server_with(&project, "Not now", json!({"commit": "on_success"}));
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}");
    let head = git(p, &["rev-parse", "HEAD"]);
    assert_eq!(done["commit"], head.trim(), "{done}");
    assert_eq!(done["branch"], "main");
    assert!(
        !c.server_requests
            .iter()
            .any(|r| r["method"] == "window/showMessageRequest"),
        "asked: {:?}",
        c.server_requests
    );
    let message = git(p, &["show", "-s", "--format=%B", "HEAD"]);
    assert!(message.contains("Co-authored-by: agent-ls"), "{message}");
}
