//! Git checkpoints, `agent-ls diff`, `rollback` and `gc` against the real `git` binary, in
//! temporary repositories, with `agent-ls run --yes` and the replay provider as the model.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};
use support::git::{FIX_AND_CREATE, commit_all, git, git_out, init};

/// The coder's answer: fix `add` in calc.py and create notes.py.
fn fix_and_create() -> Value {
    json!({"role": "coder", "content": FIX_AND_CREATE})
}

/// A copy of the example project as a repository: `.agent-ls/` and build output ignored.
fn repository(commit: bool) -> tempfile::TempDir {
    let ws = support::example();
    match commit {
        true => commit_all(ws.path()),
        false => init(ws.path()),
    }
    ws
}

/// `agent-ls ARGS` (with --workspace) in `ws`, the model's answers from `lines`.
fn agent(ws: &Path, args: &[&str], lines: &[Value], env: &[(&str, &str)]) -> Output {
    let script = ws.join(".replay.jsonl");
    std::fs::write(&script, support::replay_script(lines)).unwrap();
    let home = tempfile::tempdir().unwrap();
    support::in_workspace(args, ws, home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "replay")
        .env("AGENT_LS_MODEL__REPLAY_FILE", &script)
        .envs(env.iter().copied())
        .envs(std::env::var("GIT_TRACE").ok().map(|t| ("GIT_TRACE", t)))
        .output()
        .unwrap()
}

/// One run that fixes calc.py and creates notes.py: its outcome (`--json`).
fn run_fix(ws: &Path) -> (Value, String) {
    let out = agent(
        ws,
        &["run", "fix the failing tests", "--yes", "--json"],
        &[fix_and_create()],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let o: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(o["status"], "done", "{o}\n{stderr}");
    (o, stderr)
}

fn cli(ws: &Path, args: &[&str]) -> Output {
    agent(ws, args, &[], &[])
}

/// Every file of the working tree but git's and agent-ls's own, with its bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in walk(dir) {
        let rel = entry
            .strip_prefix(dir)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if [".git/", ".agent-ls/", "__pycache__", ".replay.jsonl"]
            .iter()
            .any(|s| rel.starts_with(s) || rel.contains("__pycache__"))
        {
            continue;
        }
        files.insert(rel, std::fs::read(&entry).unwrap());
    }
    files
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// What a rollback must leave exactly as it was: the files, the index, HEAD, the stash.
fn state(p: &Path) -> (BTreeMap<String, Vec<u8>>, String, String, String, String) {
    (
        tree(p),
        git(p, &["diff", "--cached"]),
        git(p, &["ls-files", "--stage"]),
        git(p, &["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"]),
        git(p, &["stash", "list"]),
    )
}

#[test]
fn a_dirty_tree_is_byte_identical_after_a_run_and_its_rollback() {
    let ws = repository(true);
    let p = ws.path();
    std::fs::write(p.join("util.py"), "X = 1\n").unwrap();
    git(p, &["add", "util.py"]);
    git(p, &["commit", "-qm", "util"]);
    // A stash entry, then staged, unstaged and untracked changes (calc.py's is unstaged).
    std::fs::write(p.join("util.py"), "X = 2\n").unwrap();
    git(p, &["stash", "push", "-q", "-m", "kept"]);
    std::fs::write(p.join("util.py"), "X = 3\n").unwrap();
    std::fs::write(p.join("staged_new.py"), "Y = 1\n").unwrap();
    git(p, &["add", "util.py", "staged_new.py"]);
    let calc = std::fs::read_to_string(p.join("calc.py")).unwrap() + "# a local note\n";
    std::fs::write(p.join("calc.py"), &calc).unwrap();
    std::fs::write(p.join("scratch.txt"), "untracked\n").unwrap();
    let before = state(p);

    let (o, _) = run_fix(p);
    let id = o["run_id"].as_str().unwrap();
    let checkpoint = o["checkpoint"].as_str().expect("a checkpoint in --json");
    let kept = git(
        p,
        &["rev-parse", &format!("refs/agent-ls/checkpoints/{id}")],
    );
    assert_eq!(kept.trim(), checkpoint);
    // The journal names the checkpoint too.
    let journal = std::fs::read_dir(p.join(".agent-ls/runs"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().contains(id))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .expect("the run's journal");
    let line = journal
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["type"] == "checkpoint")
        .expect("a checkpoint line in the journal");
    assert_eq!(line["data"]["commit"], checkpoint, "{line}");
    assert_eq!(
        git(p, &["rev-parse", &format!("{checkpoint}^")]).trim(),
        before.3.lines().next().unwrap()
    );
    assert!(p.join("notes.py").exists());
    assert!(
        std::fs::read_to_string(p.join("calc.py"))
            .unwrap()
            .contains("a + b")
    );
    // The run touched neither the index nor HEAD nor the stash.
    let after = state(p);
    assert_eq!(
        (&after.1, &after.2, &after.3, &after.4),
        (&before.1, &before.2, &before.3, &before.4)
    );

    let out = cli(p, &["rollback"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(id));
    assert_eq!(state(p), before);
    assert!(!p.join("notes.py").exists());
    // A second rollback finds the files as the checkpoint has them: nothing to do.
    let again = cli(p, &["rollback"]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("rolled back already"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert_eq!(state(p), before);
}

#[test]
fn rollback_refuses_a_file_the_user_changed_after_the_run_unless_forced() {
    let ws = repository(true);
    let p = ws.path();
    let original = std::fs::read(p.join("calc.py")).unwrap();
    run_fix(p);
    let edited = std::fs::read_to_string(p.join("calc.py")).unwrap() + "# mine\n";
    std::fs::write(p.join("calc.py"), &edited).unwrap();

    let out = cli(p, &["rollback"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("calc.py") && said.contains("--force"),
        "{said}"
    );
    assert!(!said.contains("notes.py"), "{said}");
    assert_eq!(std::fs::read_to_string(p.join("calc.py")).unwrap(), edited);
    assert!(p.join("notes.py").exists());

    let out = cli(p, &["rollback", "--force"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(p.join("calc.py")).unwrap(), original);
    assert!(!p.join("notes.py").exists());
}

#[test]
fn ignored_folders_are_untouched_and_big_untracked_files_are_warned_and_left_out() {
    let ws = repository(true);
    let p = ws.path();
    // An ignored build folder of many files: no warning, not recorded, left alone.
    std::fs::create_dir_all(p.join("build")).unwrap();
    for i in 0..1200 {
        std::fs::write(p.join(format!("build/o{i}.o")), format!("{i}")).unwrap();
    }
    // A 20 MiB untracked file and an untracked folder of 1,001 files: warned and left out.
    std::fs::write(p.join("big.bin"), vec![7u8; 20 * 1024 * 1024]).unwrap();
    std::fs::create_dir_all(p.join("many")).unwrap();
    for i in 0..1001 {
        std::fs::write(p.join(format!("many/f{i}")), "x").unwrap();
    }
    let (o, stderr) = run_fix(p);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("leaves out"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("big.bin (20 MiB)"), "{stderr}");
    assert!(warnings[0].contains("many (1001 files)"), "{stderr}");
    assert!(!warnings[0].contains("build"), "{stderr}");
    let recorded = git(
        p,
        &[
            "ls-tree",
            "-r",
            "--name-only",
            o["checkpoint"].as_str().unwrap(),
        ],
    );
    assert!(recorded.lines().any(|l| l == "calc.py"), "{recorded}");
    assert!(
        !recorded
            .lines()
            .any(|l| l.starts_with("build/") || l.starts_with("many/") || l == "big.bin"),
        "{recorded}"
    );

    assert!(cli(p, &["rollback"]).status.success());
    assert_eq!(std::fs::read_dir(p.join("build")).unwrap().count(), 1200);
    assert_eq!(std::fs::read_to_string(p.join("build/o7.o")).unwrap(), "7");
    assert_eq!(
        std::fs::metadata(p.join("big.bin")).unwrap().len(),
        20 * 1024 * 1024
    );
}

#[test]
fn a_repository_with_no_commits_gets_a_parentless_checkpoint() {
    let ws = repository(false);
    let p = ws.path();
    let original = std::fs::read(p.join("calc.py")).unwrap();
    let (o, _) = run_fix(p);
    let checkpoint = o["checkpoint"].as_str().expect("a checkpoint");
    let parents = git(p, &["rev-list", "--parents", "-n", "1", checkpoint]);
    assert_eq!(parents.split_whitespace().count(), 1, "{parents}");
    assert!(
        !git_out(p, &["rev-parse", "--verify", "-q", "HEAD"])
            .status
            .success()
    );
    assert!(
        git(p, &["ls-files"]).is_empty(),
        "the user's index stays empty"
    );

    assert!(cli(p, &["rollback"]).status.success());
    assert_eq!(std::fs::read(p.join("calc.py")).unwrap(), original);
    assert!(!p.join("notes.py").exists());
    assert!(
        !git_out(p, &["rev-parse", "--verify", "-q", "HEAD"])
            .status
            .success()
    );
}

#[test]
fn the_runs_diff_applies_to_its_checkpoint_with_git_apply_check() {
    let ws = repository(true);
    let p = ws.path();
    // An uncommitted change beside the line the run changes, so the diff's context has it.
    let dirty = std::fs::read_to_string(p.join("calc.py"))
        .unwrap()
        .replace("def add(a, b):", "def add(a, b):  # dirty");
    std::fs::write(p.join("calc.py"), dirty).unwrap();
    let (o, _) = run_fix(p);
    let checkpoint = o["checkpoint"].as_str().unwrap();
    let out = cli(p, &["diff"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let patch = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        patch.contains("+++ b/calc.py") && patch.contains("+    return a + b"),
        "{patch}"
    );
    assert!(
        patch.contains("+++ b/notes.py") && patch.contains("new file mode"),
        "{patch}"
    );
    assert!(!patch.contains("test_calc.py"), "{patch}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &patch).unwrap();
    // On the checkpoint's tree, in an index of its own, the patch applies.
    let index = tempfile::tempdir().unwrap();
    let idx = index.path().join("index");
    let with_index = |args: &[&str]| {
        Command::new("git")
            .current_dir(p)
            .env("GIT_INDEX_FILE", &idx)
            .args(args)
            .output()
            .unwrap()
    };
    assert!(with_index(&["read-tree", checkpoint]).status.success());
    let check = with_index(&[
        "apply",
        "--check",
        "--cached",
        file.path().to_str().unwrap(),
    ]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // And it does not apply to HEAD, which lacks the uncommitted note it is based on.
    assert!(with_index(&["read-tree", "HEAD"]).status.success());
    assert!(
        !with_index(&[
            "apply",
            "--check",
            "--cached",
            file.path().to_str().unwrap()
        ])
        .status
        .success()
    );
}

#[test]
fn gc_keeps_only_the_last_n_checkpoints() {
    let ws = repository(true);
    let p = ws.path();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (o, _) = run_fix(p);
        ids.push(o["run_id"].as_str().unwrap().to_string());
        assert!(cli(p, &["rollback"]).status.success());
    }
    let refs = || {
        git(
            p,
            &[
                "for-each-ref",
                "--format=%(refname)",
                "refs/agent-ls/checkpoints/",
            ],
        )
    };
    assert_eq!(refs().lines().count(), 3, "{}", refs());
    let out = agent(p, &["gc"], &[], &[("AGENT_LS_GIT__KEEP_CHECKPOINTS", "1")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        refs().trim(),
        format!("refs/agent-ls/checkpoints/{}", ids[2])
    );
}

#[test]
fn outside_a_repository_the_run_says_so_and_has_no_checkpoint() {
    let ws = support::example();
    let (o, stderr) = run_fix(ws.path());
    assert!(o.get("checkpoint").is_none(), "{o}");
    assert_eq!(
        stderr.matches("not a git repository").count(),
        1,
        "{stderr}"
    );
    let out = cli(ws.path(), &["rollback"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_repositorys_hooks_fsmonitor_filters_and_external_diff_never_run() {
    let ws = repository(true);
    let p = ws.path();
    let bin = tempfile::tempdir().unwrap();
    let log = bin.path().join("ran.log");
    let script = bin.path().join("mark");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$0 $*\" >> '{}'\ncat\n", log.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hooks = bin.path().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for hook in ["reference-transaction", "post-index-change", "pre-commit"] {
        std::os::unix::fs::symlink(&script, hooks.join(hook)).unwrap();
    }
    let s = script.to_str().unwrap();
    for (key, value) in [
        ("core.fsmonitor", s),
        ("core.hooksPath", hooks.to_str().unwrap()),
        ("filter.evil.clean", s),
        ("filter.evil.smudge", s),
        ("filter.evil.required", "true"),
        ("diff.external", s),
    ] {
        git(p, &["config", key, value]);
    }
    std::fs::write(p.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
    std::fs::write(p.join(".git/info/attributes"), "* filter=evil\n").unwrap();

    let (o, _) = run_fix(p);
    assert!(o["checkpoint"].is_string(), "{o}");
    let out = cli(p, &["diff"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("+    return a + b"));
    assert!(cli(p, &["rollback"]).status.success());
    assert!(cli(p, &["gc"]).status.success());
    assert!(
        !log.exists(),
        "a repository's program ran: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // The stand-in does run when git is asked plainly, so the check above can fail.
    git(p, &["add", "calc.py"]);
    assert!(log.exists());
}

#[test]
fn a_file_the_checkpoint_left_out_is_never_deleted_by_a_rollback() {
    let ws = repository(true);
    let p = ws.path();
    std::fs::create_dir_all(p.join("many")).unwrap();
    for i in 0..1001 {
        std::fs::write(p.join(format!("many/f{i}")), "x\n").unwrap();
    }
    let original = std::fs::read(p.join("calc.py")).unwrap();
    let answer = json!({"role": "coder", "content": "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n\nmany/f1\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"});
    let out = agent(
        p,
        &["run", "fix the failing tests", "--yes", "--json"],
        &[answer],
        &[],
    );
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(o["files_changed"], json!(["calc.py", "many/f1"]), "{o}");

    let out = cli(p, &["rollback"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("many/f1") && said.contains("left out"),
        "{said}"
    );
    assert_ne!(std::fs::read(p.join("calc.py")).unwrap(), original);

    let out = cli(p, &["rollback", "--force"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(p.join("calc.py")).unwrap(), original);
    assert_eq!(std::fs::read_to_string(p.join("many/f1")).unwrap(), "y\n");
}

/// The user's checkout as `git status` shows it, every untracked file too.
fn status(p: &Path) -> String {
    git(p, &["status", "--porcelain=v1", "--untracked-files=all"])
}

#[test]
fn branch_isolation_runs_on_a_new_branch_from_head() {
    let ws = repository(true);
    let p = ws.path();
    let head = git(p, &["rev-parse", "HEAD"]);
    let isolate = [("AGENT_LS_GIT__ISOLATION", "branch")];
    let out = agent(
        p,
        &["run", "Fix the failing tests!", "--yes", "--json"],
        &[fix_and_create()],
        &isolate,
    );
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(o["status"], "done", "{o}\n{said}");
    assert_eq!(o["branch"], "agent/fix-the-failing-tests", "{o}");
    assert!(o["worktree"].is_null(), "{o}");
    assert!(said.contains("agent/fix-the-failing-tests"), "{said}");
    assert_eq!(
        git(p, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/agent/fix-the-failing-tests"
    );
    // The branch starts at HEAD, main is where it was, and the run's change is on the branch.
    assert_eq!(git(p, &["rev-parse", "agent/fix-the-failing-tests"]), head);
    assert_eq!(git(p, &["rev-parse", "main"]), head);
    assert_eq!(
        git(p, &["status", "--porcelain=v1"]),
        " M calc.py\n?? notes.py\n"
    );
    let checkpoint = o["checkpoint"].as_str().expect("a checkpoint");
    assert_eq!(git(p, &["rev-parse", &format!("{checkpoint}^")]), head);

    // Once committed, the same goal gets a branch of its own.
    git(p, &["add", "-A"]);
    git(p, &["commit", "-qm", "the run's change"]);
    git(p, &["switch", "-q", "main"]);
    let out = agent(
        p,
        &["run", "fix the failing tests", "--yes", "--json"],
        &[fix_and_create()],
        &isolate,
    );
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(o["branch"], "agent/fix-the-failing-tests-2", "{o}");
}

#[test]
fn branch_isolation_refuses_a_dirty_tree_naming_what_is_dirty_and_changes_nothing() {
    let ws = repository(true);
    let p = ws.path();
    let calc = std::fs::read_to_string(p.join("calc.py")).unwrap() + "# mine\n";
    std::fs::write(p.join("calc.py"), calc).unwrap();
    std::fs::write(p.join("staged.py"), "S = 1\n").unwrap();
    git(p, &["add", "staged.py"]);
    std::fs::write(p.join("scratch.txt"), "untracked\n").unwrap();
    let before = (state(p), status(p), git(p, &["branch", "--list"]));

    let out = agent(
        p,
        &["run", "fix the failing tests", "--yes", "--json"],
        &[fix_and_create()],
        &[("AGENT_LS_GIT__ISOLATION", "branch")],
    );
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("uncommitted changes"), "{said}");
    for name in ["calc.py", "staged.py", "scratch.txt"] {
        assert!(said.contains(name), "{name} not named: {said}");
    }
    assert!(!said.contains(".agent-ls"), "{said}");
    assert_eq!((state(p), status(p), git(p, &["branch", "--list"])), before);
    assert_eq!(git(p, &["for-each-ref", "refs/agent-ls/"]), "");
}

/// A Python test that fails when the user's checkout (USER, appended) is not as
/// `.expected.json` there says; run by the run in its worktree.
const THROUGHOUT: &str = r#"import json
import os
import unittest


class UserCheckout(unittest.TestCase):
    def test_the_users_checkout_is_untouched_while_the_run_goes_on(self):
        self.assertNotEqual(os.path.realpath(os.getcwd()), USER)
        with open(os.path.join(USER, ".expected.json")) as f:
            expected = json.load(f)
        with open(os.path.join(USER, "calc.py")) as f:
            self.assertEqual(f.read(), expected["calc"])
        self.assertFalse(os.path.exists(os.path.join(USER, "notes.py")))
        with open(os.path.join(USER, ".git", "HEAD")) as f:
            self.assertEqual(f.read(), expected["head"])
        with open(os.path.join(USER, ".git", "index"), "rb") as f:
            self.assertEqual(list(f.read()), expected["index"])


"#;

/// The run's change is in the worktree `wt`, on its branch from the checkout `p`'s HEAD,
/// without the checkout's own uncommitted changes.
fn the_change_is_in_the_worktree_on_its_branch_from_head(p: &Path, wt: &Path) {
    assert_eq!(
        git(wt, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/agent/fix-the-failing-tests"
    );
    assert_eq!(
        git(wt, &["rev-parse", "HEAD"]),
        git(p, &["rev-parse", "HEAD"])
    );
    assert!(
        std::fs::read_to_string(wt.join("calc.py"))
            .unwrap()
            .contains("a + b")
    );
    assert!(
        !std::fs::read_to_string(wt.join("calc.py"))
            .unwrap()
            .contains("# mine")
    );
    assert!(wt.join("notes.py").exists());
    assert!(!wt.join("scratch.txt").exists());
}

#[test]
fn worktree_isolation_leaves_the_users_checkout_byte_identical() {
    // `.agent-ls/` is not ignored here: the worktrees' folder must keep itself out of the
    // user's status.
    let ws = repository(false);
    let p = ws.path();
    std::fs::write(
        p.join(".gitignore"),
        "__pycache__/\n.replay.jsonl\n.expected.json\n",
    )
    .unwrap();
    // A test the run runs in its worktree, while it goes on: the user's checkout is still
    // as it was (the file, no created file, HEAD, the index to the byte).
    let user = p.canonicalize().unwrap();
    std::fs::write(
        p.join("test_user_checkout.py"),
        format!("{THROUGHOUT}USER = {:?}\n", user.display().to_string()),
    )
    .unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-qm", "start"]);
    // A dirty checkout: worktree isolation takes the run elsewhere, so it may stay dirty.
    let calc = std::fs::read_to_string(p.join("calc.py")).unwrap() + "# mine\n";
    std::fs::write(p.join("calc.py"), &calc).unwrap();
    std::fs::write(p.join("staged.py"), "S = 1\n").unwrap();
    git(p, &["add", "staged.py"]);
    std::fs::write(p.join("scratch.txt"), "untracked\n").unwrap();
    let index = std::fs::read(p.join(".git/index")).unwrap();
    let expected = json!({"calc": calc, "index": index, "head": "ref: refs/heads/main\n"});
    std::fs::write(p.join(".expected.json"), expected.to_string()).unwrap();
    let before = (state(p), status(p));

    let out = agent(
        p,
        &[
            "run",
            "fix the failing tests",
            "--yes",
            "--json",
            "--isolated",
        ],
        &[fix_and_create()],
        &[],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {said}"));
    assert_eq!(o["status"], "done", "{o}\n{said}");
    assert_eq!(o["branch"], "agent/fix-the-failing-tests", "{o}");
    let wt = std::path::PathBuf::from(o["worktree"].as_str().expect("the worktree"));
    assert_eq!(
        wt,
        p.canonicalize()
            .unwrap()
            .join(".agent-ls/worktrees/fix-the-failing-tests")
    );
    assert!(said.contains(&wt.display().to_string()), "{said}");

    // The user's checkout: files, index (to the byte), HEAD, stash and status unchanged.
    assert_eq!((state(p), status(p)), before);
    assert_eq!(std::fs::read(p.join(".git/index")).unwrap(), index);
    assert_eq!(git(p, &["symbolic-ref", "HEAD"]).trim(), "refs/heads/main");
    assert!(!p.join("notes.py").exists());

    the_change_is_in_the_worktree_on_its_branch_from_head(p, &wt);
    // The tests ran in the worktree, the user's checkout test among them, and passed.
    assert_eq!(o["tests"]["failed"], 0, "{o}");
    assert!(o["tests"]["passed"].as_u64().unwrap() >= 4, "{o}");
    // The run is recorded in the worktree, where `agent-ls diff` finds it.
    let diff = cli(&wt, &["diff"]);
    let diff = String::from_utf8_lossy(&diff.stdout);
    assert!(
        diff.contains("+    return a + b") && diff.contains("b/notes.py"),
        "{diff}"
    );
}

#[test]
fn a_run_killed_midway_is_rolled_back_from_the_steps_it_recorded() {
    use support::model_server::{ModelServer, Reply, openai_text};
    let ws = repository(true);
    let p = ws.path();
    let original = std::fs::read(p.join("calc.py")).unwrap();
    // A wrong fix, a reflection, then the second coder call hangs: the run is killed there.
    let wrong = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return b - a\n>>>>>>> REPLACE\n\nnotes.py\n<<<<<<< SEARCH\n=======\nNOTE = 1\n>>>>>>> REPLACE\n";
    let reflection = r#"{"task_id": "T1", "passed": false, "report": "wrong way round", "next_step": "return a + b"}"#;
    let model = ModelServer::start(vec![
        openai_text(&[wrong]),
        openai_text(&[reflection]),
        Reply::Sse {
            events: vec![],
            stall_after: Some(0),
        },
    ]);
    let home = tempfile::tempdir().unwrap();
    let mut child =
        support::in_workspace(&["run", "fix the failing tests", "--yes"], p, home.path())
            .env("AGENT_LS_MODEL__PROVIDER", "openai")
            .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", model.url))
            .env("AGENT_LS_MODEL__NAME", "m")
            .env("AGENT_LS_AGENT__EVALUATE", "false")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
    model.wait_for_requests(3);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(p.join("notes.py").exists());

    let out = cli(p, &["rollback"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("did not finish"), "{said}");
    assert_eq!(std::fs::read(p.join("calc.py")).unwrap(), original);
    assert!(!p.join("notes.py").exists());
    assert_eq!(git(p, &["status", "--porcelain"]), "");
}

/// Adds to the repository `p` a submodule `sub`, from a repository beside it (returned, to
/// live as long as the test), and a repository of its own in `vendor/inner`, untracked by the
/// outer one; each has a change of its own.
fn add_a_submodule_and_a_nested_repository(p: &Path) -> tempfile::TempDir {
    // A submodule, from a repository beside the workspace.
    let upstream = tempfile::tempdir().unwrap();
    let u = upstream.path();
    git(u, &["init", "-q", "-b", "main"]);
    std::fs::write(u.join("lib.py"), "LIB = 1\n").unwrap();
    git(u, &["add", "-A"]);
    git(u, &["commit", "-qm", "lib"]);
    git(
        p,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &u.to_string_lossy(),
            "sub",
        ],
    );
    git(p, &["commit", "-qm", "sub"]);
    // A repository of its own inside the workspace, untracked by the outer one, with a
    // change of its own; and a change inside the submodule.
    let nested = p.join("vendor/inner");
    std::fs::create_dir_all(&nested).unwrap();
    git(&nested, &["init", "-q", "-b", "main"]);
    std::fs::write(nested.join("inner.py"), "INNER = 1\n").unwrap();
    git(&nested, &["add", "-A"]);
    git(&nested, &["commit", "-qm", "inner"]);
    std::fs::write(nested.join("inner.py"), "INNER = 2\n").unwrap();
    std::fs::write(p.join("sub/lib.py"), "LIB = 2\n").unwrap();
    upstream
}

#[test]
fn a_nested_repository_and_a_submodule_are_untouched_on_a_detached_head() {
    let ws = repository(true);
    let p = ws.path();
    let _upstream = add_a_submodule_and_a_nested_repository(p);
    let nested = p.join("vendor/inner");
    git(p, &["checkout", "-q", "--detach"]);
    // (git status refreshes an index's stat data, so it runs before the tree is taken.)
    let inner_before = (
        git(&nested, &["status", "--porcelain"]),
        git(&nested, &["rev-parse", "HEAD"]),
        git(&nested, &["ls-files", "--stage"]),
    );
    let sub_before = (
        git(&p.join("sub"), &["status", "--porcelain"]),
        git(&p.join("sub"), &["rev-parse", "HEAD"]),
    );
    let before = state(p);

    let (o, _) = run_fix(p);
    assert!(o["checkpoint"].is_string(), "{o}");
    let out = cli(p, &["rollback"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = state(p);
    let differ: Vec<&String> = before
        .0
        .keys()
        .chain(after.0.keys())
        .filter(|k| before.0.get(*k) != after.0.get(*k))
        .collect();
    assert!(differ.is_empty(), "files differ: {differ:?}");
    assert_eq!(
        (&after.1, &after.2, &after.3, &after.4),
        (&before.1, &before.2, &before.3, &before.4)
    );
    assert_eq!(
        git(p, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "HEAD"
    );
    assert_eq!(
        (
            git(&nested, &["status", "--porcelain"]),
            git(&nested, &["rev-parse", "HEAD"]),
            git(&nested, &["ls-files", "--stage"]),
        ),
        inner_before
    );
    assert_eq!(
        (
            git(&p.join("sub"), &["status", "--porcelain"]),
            git(&p.join("sub"), &["rev-parse", "HEAD"]),
        ),
        sub_before
    );
}
