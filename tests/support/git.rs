//! Temporary git repositories for the tests of checkpoints, rollback, commits and pull
//! requests: `git` as the user runs it, and the example project as a repository with
//! agent-ls's own folder ignored.

use std::path::Path;
use std::process::Command;

/// `git ARGS` in `dir` as the user would run it; panics when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_out(dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `git ARGS` in `dir` (an author given, the index the real one), whatever its outcome.
pub fn git_out(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
        .args(args)
        .env_remove("GIT_INDEX_FILE")
        .output()
        .unwrap()
}

/// Makes `dir` a repository with no commit yet; `.agent-ls/`, build output and the replay
/// script are ignored.
pub fn init(dir: &Path) {
    std::fs::write(
        dir.join(".gitignore"),
        ".agent-ls/\n__pycache__/\n.pytest_cache/\nbuild/\n.replay.jsonl\n",
    )
    .unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
}

/// Makes `dir` a repository holding its files in one commit (see `init`).
pub fn commit_all(dir: &Path) {
    init(dir);
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

/// The example as a committed repository with the user's own change to `add` not committed
/// (`return b - a`): what `agent-ls review` reads by default.
pub fn uncommitted_change(dir: &Path) {
    commit_all(dir);
    let calc = std::fs::read_to_string(dir.join("calc.py")).unwrap();
    std::fs::write(
        dir.join("calc.py"),
        calc.replace("return a - b", "return b - a"),
    )
    .unwrap();
}

/// A replay script of one reviewer answer on that change: a P1 on calc.py line 5 ("add
/// subtracts") and a P3 on line 9 ("multiply is untested", outside the change).
pub fn review_findings_replay() -> String {
    let findings = serde_json::json!({
        "findings": [
            {"title": "[P1] add subtracts", "body": "add(2, 3) gives 1", "priority": 1,
             "confidence": 0.9, "path": "calc.py", "start_line": 5, "end_line": 5},
            {"title": "[P3] multiply is untested", "body": "no test calls it", "priority": 3,
             "confidence": 0.8, "path": "calc.py", "start_line": 9, "end_line": 9}
        ],
        "verdict": "incorrect", "explanation": "add is wrong", "confidence": 0.9
    });
    super::replay_script(&[serde_json::json!(
        {"role": "reviewer", "content": format!("```json\n{findings}\n```")}
    )])
}
