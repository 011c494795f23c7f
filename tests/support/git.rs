//! Temporary git repositories for the tests that roll runs back from an editor: the example
//! project committed, with agent-ls's own folder ignored.

use std::path::Path;
use std::process::Command;

/// `git ARGS` in `dir` as the user would run it; panics when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
        .args(args)
        .env_remove("GIT_INDEX_FILE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes `dir` a repository holding its files in one commit; `.agent-ls/`, build output and
/// the replay script are ignored.
pub fn commit_all(dir: &Path) {
    std::fs::write(
        dir.join(".gitignore"),
        ".agent-ls/\n__pycache__/\n.pytest_cache/\n.replay.jsonl\n",
    )
    .unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "start"]);
}

/// A copy of the example project as a committed repository.
pub fn example_repository() -> tempfile::TempDir {
    let ws = super::example();
    commit_all(ws.path());
    ws
}

/// The coder's answer: fix `add` in calc.py and create notes.py.
pub const FIX_AND_CREATE: &str = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n\nnotes.py\n<<<<<<< SEARCH\n=======\nNOTE = 1\n>>>>>>> REPLACE\n";
