//! `agent-ls apply` through the real binary: dry run, atomic writes, exit codes, the JSON
//! report, and paths that try to leave the workspace.

use crate::support;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use support::workspace;

fn apply(ws: &Path, plan: &str, args: &[&str]) -> Output {
    let plan_file = ws.join(".plan");
    fs::write(&plan_file, plan).unwrap();
    let home = tempfile::tempdir().unwrap();
    support::agent_ls(&["apply"], home.path())
        .arg(&plan_file)
        .arg("--workspace")
        .arg(ws)
        .args(args)
        .output()
        .unwrap()
}

const FIX: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";

#[test]
fn without_write_it_prints_the_diff_and_changes_nothing() {
    let ws = workspace(&[("calc.py", "def add(a, b):\n    return a - b\n")]);
    let out = apply(ws.path(), FIX, &[]);
    assert_eq!(out.status.code(), Some(0));
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(
        diff.contains("--- a/calc.py")
            && diff.contains("-    return a - b")
            && diff.contains("+    return a + b"),
        "{diff}"
    );
    assert_eq!(
        fs::read_to_string(ws.path().join("calc.py")).unwrap(),
        "def add(a, b):\n    return a - b\n"
    );
}

#[test]
fn with_write_it_writes_and_a_second_run_reports_already_applied() {
    let ws = workspace(&[("calc.py", "def add(a, b):\n    return a - b\n")]);
    let out = apply(ws.path(), FIX, &["--write"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        fs::read_to_string(ws.path().join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    let out = apply(ws.path(), FIX, &["--write", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["edits"][0]["status"], "already_applied");
    assert_eq!(report["written"], false);
    // No temporary files are left behind.
    let names: Vec<_> = fs::read_dir(ws.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn a_partial_plan_exits_2_and_writes_nothing() {
    let ws = workspace(&[("a.py", "a = 1\n"), ("b.py", "b = 2\n")]);
    let plan = r#"{"edits": [
        {"path": "a.py", "search": "a = 1", "replace": "a = 10"},
        {"path": "b.py", "search": "something else entirely", "replace": "x"}
    ]}"#;
    let out = apply(ws.path(), plan, &["--write", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["all_applied"], false);
    assert_eq!(report["written"], false);
    assert_eq!(report["edits"][0]["status"], "applied");
    assert_eq!(report["edits"][0]["rule"], "exact");
    assert_eq!(report["edits"][1]["status"], "refused");
    assert_eq!(
        fs::read_to_string(ws.path().join("a.py")).unwrap(),
        "a = 1\n"
    );
}

#[test]
fn nothing_applied_or_an_unparsable_plan_exits_1() {
    let ws = workspace(&[("a.py", "a = 1\n")]);
    let out = apply(
        ws.path(),
        r#"{"path": "a.py", "search": "zzz qqq", "replace": "x"}"#,
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let out = apply(ws.path(), "just prose, no edits", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no edits"));
    let out = Command::new(support::binary())
        .args(["apply", "/nonexistent/plan.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn new_files_are_created_with_their_directories() {
    let ws = workspace(&[]);
    let out = apply(
        ws.path(),
        r#"{"path": "pkg/sub/new.py", "content": "X = 1\n"}"#,
        &["--write"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        fs::read_to_string(ws.path().join("pkg/sub/new.py")).unwrap(),
        "X = 1\n"
    );
}

#[test]
fn paths_leaving_the_workspace_are_refused_before_anything_is_written() {
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("target.txt"), "untouched\n").unwrap();
    let ws = workspace(&[("ok.txt", "ok\n")]);
    std::os::unix::fs::symlink(outside.path(), ws.path().join("escape")).unwrap();
    for path in [
        "escape/target.txt",
        "../target.txt",
        outside.path().join("target.txt").to_str().unwrap(),
    ] {
        let plan = serde_json::json!({"edits": [
            {"path": "ok.txt", "search": "ok", "replace": "changed"},
            {"path": path, "content": "pwned\n"}
        ]})
        .to_string();
        let out = apply(ws.path(), &plan, &["--write", "--json"]);
        assert_eq!(out.status.code(), Some(2), "{path}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            report["edits"][1]["reason"]
                .as_str()
                .unwrap()
                .contains("outside the workspace"),
            "{report}"
        );
        assert_eq!(
            fs::read_to_string(outside.path().join("target.txt")).unwrap(),
            "untouched\n"
        );
        assert_eq!(
            fs::read_to_string(ws.path().join("ok.txt")).unwrap(),
            "ok\n"
        );
    }
}

#[test]
fn writing_through_a_symlink_inside_the_workspace_keeps_the_link() {
    let ws = workspace(&[("real.py", "x = 1\n")]);
    std::os::unix::fs::symlink(ws.path().join("real.py"), ws.path().join("link.py")).unwrap();
    let out = apply(
        ws.path(),
        r#"{"path": "link.py", "search": "x = 1", "replace": "x = 2"}"#,
        &["--write"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        fs::symlink_metadata(ws.path().join("link.py"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        fs::read_to_string(ws.path().join("real.py")).unwrap(),
        "x = 2\n"
    );
}

#[test]
fn the_json_report_names_the_rule_and_the_lines_that_differed_from_the_models_copy() {
    let ws = workspace(&[(
        "greet.py",
        "def greet(name):\n    message = \"Hello, world\"\n    print(message)\n    return name\n",
    )]);
    // The model's copy of the context line has a typo; the rule is fuzzy, and the line stays
    // as the file has it.
    let plan = "--- a/greet.py\n+++ b/greet.py\n@@ -1,4 +1,5 @@\n def greet(name):\n     message = \"Hello, wrld\"\n     print(message)\n+    log(name)\n     return name\n";
    let out = apply(ws.path(), plan, &["--write", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let edit = &report["edits"][0];
    assert_eq!(edit["rule"], "fuzzy", "{report}");
    assert_eq!(
        edit["differing"],
        serde_json::json!([{"line": 2, "file": "    message = \"Hello, world\"", "model": "    message = \"Hello, wrld\""}])
    );
    assert_eq!(
        fs::read_to_string(ws.path().join("greet.py")).unwrap(),
        "def greet(name):\n    message = \"Hello, world\"\n    print(message)\n    log(name)\n    return name\n"
    );
}
