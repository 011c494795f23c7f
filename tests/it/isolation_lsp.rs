//! `git.isolation` for runs started from the editor, over LSP against real git: `"branch"`
//! switches the checkout to `agent/<slug>` before the first step and the run's commit lands
//! there; a dirty tree is refused with a message and nothing changes; `"worktree"` works in a
//! new worktree on disk (asked first, never through the editor's buffers), and in a workspace
//! that is one of agent-ls's worktrees already goes on there.

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::editor::{Buffers, applies as editor_applies};
use support::git::{FIX_AND_CREATE, example_repository, git};
use support::{Client, Spawn, file_uri};

const BROKEN: &str = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n";

/// A language server on `root` with `git` settings, calc.py open, the model replayed (fix
/// calc.py, create notes.py), edits applied as an editor applies them.
fn server(root: &Path, git_settings: Value) -> Client {
    server_asking(root, git_settings, "auto")
}

/// `server` with the approval mode given.
fn server_asking(root: &Path, git_settings: Value, approval: &str) -> Client {
    std::fs::write(
        root.join(".replay.jsonl"),
        support::replay_script(&[json!({"role": "coder", "content": FIX_AND_CREATE})]),
    )
    .unwrap();
    let options = json!({"model": {"provider": "replay", "replay_file": ".replay.jsonl"}, "agent": {"approval": approval, "evaluate": false}, "git": git_settings, "workspaceTrusted": true});
    // An editor with VS Code's preview: in the checkout, "confirm" asks through it.
    let caps = json!({"workspace": {"workspaceEdit": {"documentChanges": true, "resourceOperations": ["create", "delete"], "changeAnnotationSupport": {"groupsOnLabel": true}}}});
    let mut c = Client::spawn(Spawn::default());
    c.initialize(root, caps, options);
    let calc = file_uri(&root.join("calc.py"));
    c.open(&calc, BROKEN);
    let buffers: Buffers = Arc::new(Mutex::new(HashMap::from([(
        calc.clone(),
        (BROKEN.to_string(), 1),
    )])));
    editor_applies(&mut c, buffers, vec![calc]);
    c
}

/// A committed example project whose git user is set (so a run's commit can be made).
fn repository() -> tempfile::TempDir {
    let ws = example_repository();
    git(ws.path(), &["config", "user.name", "Ada Lovelace"]);
    git(ws.path(), &["config", "user.email", "ada@example.com"]);
    ws
}

fn head(dir: &Path) -> String {
    git(dir, &["symbolic-ref", "--short", "HEAD"])
        .trim()
        .to_string()
}

/// The branches of the repository, one a line.
fn branches(dir: &Path) -> String {
    git(dir, &["branch", "--format=%(refname:short)"])
}

/// The window/showMessage texts the server sent.
fn shown(c: &Client) -> Vec<String> {
    c.notifications
        .iter()
        .filter(|n| n["method"] == "window/showMessage")
        .filter_map(|n| n["params"]["message"].as_str().map(String::from))
        .collect()
}

#[test]
fn branch_mode_runs_on_a_new_branch_and_its_commit_lands_there() {
    let ws = repository();
    let p = ws.path();
    let start = git(p, &["rev-parse", "HEAD"]);
    let mut c = server(p, json!({"isolation": "branch", "commit": "on_success"}));
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    // Where the run works is said before its first step.
    let said = c.wait_notification("window/logMessage", |m| {
        m["message"]
            .as_str()
            .is_some_and(|t| t.contains("on the new branch agent/"))
    });
    assert_eq!(
        said["message"],
        "agent-ls: working on the new branch agent/fix-the-failing-tests"
    );
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}\n{}", c.stderr());
    assert_eq!(done["branch"], "agent/fix-the-failing-tests", "{done}");
    assert_eq!(done["worktree"], Value::Null, "{done}");
    // The checkout is on the new branch, which holds the run's commit on top of main.
    assert_eq!(head(p), "agent/fix-the-failing-tests");
    let commit = git(p, &["rev-parse", "HEAD"]);
    assert_eq!(done["commit"], commit.trim(), "{done}");
    assert_eq!(git(p, &["rev-parse", "HEAD^"]), start);
    let mut files: Vec<String> = git(p, &["show", "--name-only", "--format=", "HEAD"])
        .lines()
        .map(String::from)
        .collect();
    files.sort();
    assert_eq!(files, ["calc.py", "notes.py"]);
    // main is where it was, and holds none of it.
    assert_eq!(git(p, &["rev-parse", "main"]), start);
    assert!(
        git(p, &["show", "main:calc.py"]).contains("return a - b"),
        "main changed"
    );
    assert_eq!(git(p, &["status", "--porcelain"]), "");
}

#[test]
fn branch_mode_refuses_a_dirty_tree_with_a_message_and_changes_nothing() {
    let ws = repository();
    let p = ws.path();
    std::fs::write(p.join("calc.py"), format!("# mine\n{BROKEN}")).unwrap();
    std::fs::write(p.join("scratch.txt"), "notes\n").unwrap();
    let (start, status) = (
        git(p, &["rev-parse", "HEAD"]),
        git(p, &["status", "--porcelain"]),
    );
    let mut c = server(p, json!({"isolation": "branch"}));
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "failed", "{done}");
    let answer = done["answer"].as_str().unwrap();
    assert!(
        answer.starts_with("cannot isolate the run: git.isolation = \"branch\"")
            && answer.contains("calc.py (unstaged), scratch.txt (untracked)"),
        "{answer}"
    );
    assert_eq!(done["branch"], Value::Null, "{done}");
    assert_eq!(done["iterations"], 0, "{done}");
    // The user is shown why.
    assert!(
        shown(&c).iter().any(|m| m.contains(answer)),
        "{:?}",
        shown(&c)
    );
    // Nothing changed: no edit, same HEAD and branch, same files, no new branch or checkpoint.
    assert!(
        !c.server_requests
            .iter()
            .any(|r| r["method"] == "workspace/applyEdit"),
        "an edit was sent"
    );
    assert_eq!(head(p), "main");
    assert_eq!(git(p, &["rev-parse", "HEAD"]), start);
    assert_eq!(git(p, &["status", "--porcelain"]), status);
    assert_eq!(branches(p).trim(), "main");
    assert_eq!(git(p, &["for-each-ref", "refs/agent-ls"]), "");
    assert_eq!(
        std::fs::read_to_string(p.join("calc.py")).unwrap(),
        format!("# mine\n{BROKEN}")
    );
    assert!(!p.join("notes.py").exists());
}

/// The change was asked about, naming the worktree `top`, then written there: never sent to
/// the editor.
fn asked_then_written_in_the_worktree_not_sent(c: &Client, top: &Path) {
    let asked: Vec<&Value> = c
        .server_requests
        .iter()
        .filter(|r| r["method"] == "window/showMessageRequest")
        .collect();
    assert!(
        asked.iter().any(
            |r| r["params"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(&format!(
                    "(in the worktree {}): apply the proposed change to calc.py, notes.py",
                    top.display()
                )))
        ),
        "{asked:?}"
    );
    assert!(
        !c.server_requests
            .iter()
            .any(|r| r["method"] == "workspace/applyEdit"),
        "an edit was sent to the editor"
    );
}

#[test]
fn worktree_mode_works_in_a_new_worktree_on_disk_after_asking_and_leaves_the_checkout_alone() {
    let ws = repository();
    let p = ws.path();
    let start = git(p, &["rev-parse", "HEAD"]);
    // The user's own unsaved and uncommitted work stays where it is: a worktree needs no
    // clean tree.
    std::fs::write(p.join("scratch.txt"), "mine\n").unwrap();
    let git_settings = json!({"isolation": "worktree", "commit": "on_success"});
    let mut c = server_asking(p, git_settings, "confirm");
    c.on_request("window/showMessageRequest", |_| json!({"title": "Accept"}));
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}\n{}", c.stderr());
    let top = p.join(".agent-ls/worktrees/fix-the-failing-tests");
    assert_eq!(done["worktree"], top.to_string_lossy().as_ref(), "{done}");
    assert_eq!(done["branch"], "agent/fix-the-failing-tests", "{done}");
    asked_then_written_in_the_worktree_not_sent(&c, &top);
    assert!(
        std::fs::read_to_string(top.join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
    // Its tests ran there, its checkpoint and commit are on the worktree's branch.
    assert!(
        done["tests"]["passed"].as_u64().is_some_and(|n| n > 0),
        "{done}"
    );
    assert!(done["checkpoint"].is_string(), "{done}");
    assert_eq!(head(&top), "agent/fix-the-failing-tests");
    assert_eq!(
        done["commit"],
        git(&top, &["rev-parse", "HEAD"]).trim(),
        "{done}"
    );
    assert_eq!(git(&top, &["rev-parse", "HEAD^"]), start);
    assert!(
        top.join(".agent-ls/runs").is_dir(),
        "no journal in the worktree"
    );
    // The user's checkout: same branch, commit, files, status; the buffer untouched.
    assert_eq!(head(p), "main");
    assert_eq!(git(p, &["rev-parse", "HEAD"]), start);
    assert!(
        std::fs::read_to_string(p.join("calc.py"))
            .unwrap()
            .contains("return a - b")
    );
    assert!(!p.join("notes.py").exists());
    assert_eq!(git(p, &["status", "--porcelain"]), "?? scratch.txt\n");
    let calc = file_uri(&p.join("calc.py"));
    assert_eq!(c.document_state(&calc)["text"], BROKEN);
    // Where it works was said.
    assert!(
        c.notifications
            .iter()
            .any(|n| n["method"] == "window/logMessage"
                && n["params"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("working in the worktree"))),
        "not said"
    );
}

#[test]
fn a_workspace_that_is_one_of_our_worktrees_goes_on_there_in_worktree_mode() {
    let ws = repository();
    let p = ws.path();
    let start = git(p, &["rev-parse", "HEAD"]);
    // As `agent-ls run --isolated` leaves it: a worktree on its branch, opened in the editor.
    let top = p.join(".agent-ls/worktrees/edit-calc");
    let top_arg = top.to_string_lossy().into_owned();
    git(
        p,
        &["worktree", "add", "-q", "-b", "agent/edit-calc", &top_arg],
    );
    let mut c = server(&top, json!({"isolation": "worktree"}));
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "done", "{done}\n{}", c.stderr());
    assert_eq!(done["branch"], "agent/edit-calc", "{done}");
    assert_eq!(done["worktree"], top_arg.as_str(), "{done}");
    // The run worked in the worktree; the user's checkout did not change.
    assert!(
        std::fs::read_to_string(top.join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
    assert!(top.join("notes.py").exists());
    assert_eq!(head(&top), "agent/edit-calc");
    assert_eq!(head(p), "main");
    assert_eq!(git(p, &["rev-parse", "HEAD"]), start);
    assert!(
        std::fs::read_to_string(p.join("calc.py"))
            .unwrap()
            .contains("return a - b")
    );
    assert!(!p.join("notes.py").exists());
    assert!(!top.join(".agent-ls/worktrees").exists());
}
