//! The reviewer's phase through `agent-ls run --json` (the replay provider playing the coder
//! and the reviewer, on a copy of the bundled example), and `agent-ls review` on the user's
//! own changes in a real git repository: verdicts, the gate, repair, stats and exit codes.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

/// The coder's answer turning `add`'s body from `from` into `to`.
fn coder(from: &str, to: &str) -> Value {
    json!({"role": "coder", "content": format!("calc.py\n<<<<<<< SEARCH\n    return {from}\n=======\n    return {to}\n>>>>>>> REPLACE\n")})
}

/// The reviewer's answer with one finding of `priority` on calc.py line 5 (`add`'s body).
fn reviewer(verdict: &str, priority: u8) -> Value {
    let content = json!({
        "findings": [{"title": format!("[P{priority}] operands swapped"), "body": "b + a reads oddly",
            "priority": priority, "confidence": 0.9, "path": "calc.py", "start_line": 5, "end_line": 5}],
        "verdict": verdict, "explanation": "see the finding", "confidence": 0.9
    });
    json!({"role": "reviewer", "content": format!("```json\n{content}\n```")})
}

fn approved() -> Value {
    json!({"role": "reviewer", "content": r#"{"findings": [], "verdict": "correct", "explanation": "adds", "confidence": 0.95}"#})
}

/// A copy of the example with `agent` settings (no evaluator), as a git repository when
/// `git` says so.
fn workspace(agent: &str, git: bool) -> tempfile::TempDir {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        format!("[agent]\nevaluate = false\n{agent}"),
    )
    .unwrap();
    if git {
        std::fs::write(
            ws.path().join(".gitignore"),
            ".agent-ls/\n__pycache__/\n.replay.jsonl\n",
        )
        .unwrap();
        run_git(ws.path(), &["init", "-q", "-b", "main"]);
        run_git(ws.path(), &["add", "-A"]);
        run_git(ws.path(), &["commit", "-qm", "start"]);
    }
    ws
}

fn run_git(dir: &Path, args: &[&str]) -> String {
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

/// `agent-ls ARGS --workspace WS` with the model's answers from `lines`.
fn agent_ls(ws: &Path, args: &[&str], lines: &[Value]) -> Output {
    let script = ws.join(".replay.jsonl");
    std::fs::write(&script, support::replay_script(lines)).unwrap();
    let home = tempfile::tempdir().unwrap();
    support::in_workspace(args, ws, home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "replay")
        .env("AGENT_LS_MODEL__REPLAY_FILE", script.display().to_string())
        .output()
        .unwrap()
}

/// `agent-ls run "fix the failing tests" --yes --json`: its outcome, once it exited `code`.
fn fix(ws: &Path, lines: &[Value], code: i32) -> Value {
    let out = agent_ls(
        ws,
        &["run", "fix the failing tests", "--yes", "--json"],
        lines,
    );
    json_of(&out, code)
}

fn json_of(out: &Output, code: i32) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}\nstderr {stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(out.status.code(), Some(code), "{v}\nstderr {stderr}");
    v
}

fn calc(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("calc.py")).unwrap()
}

#[test]
fn gate_mode_sends_a_p1_back_to_the_coder_once_and_the_second_diff_passes() {
    let ws = workspace("review = \"gate\"\n", true);
    let lines = [
        coder("a - b", "b + a"),
        reviewer("incorrect", 1),
        coder("b + a", "a + b"),
        approved(),
    ];
    let o = fix(ws.path(), &lines, 0);
    assert_eq!(o["status"], "done", "{o}");
    assert_eq!(o["iterations"], 2, "{o}");
    assert_eq!(o["review"]["status"], "reviewed");
    assert_eq!(o["review"]["verdict"], "correct");
    assert!(calc(ws.path()).contains("    return a + b\n"));
    // Both reviews are journaled: the first (on the git diff against the checkpoint) blocked.
    let reviews = support::journaled(ws.path(), "review");
    assert_eq!(reviews.len(), 2, "{reviews:?}");
    assert_eq!(reviews[0]["data"]["blocking"], true);
    assert_eq!(reviews[0]["data"]["findings"][0]["start_line"], 5);
    assert_eq!(reviews[0]["data"]["findings"][0]["outside_change"], false);
    assert_eq!(reviews[1]["data"]["verdict"], "correct");
    // The retry's patch names the finding it is to fix; the first fixes nothing.
    let patches = support::journaled(ws.path(), "patch");
    assert_eq!(patches.len(), 2, "{patches:?}");
    assert!(
        patches[0]["data"]["review"].get("fixes").is_none(),
        "{patches:?}"
    );
    assert_eq!(
        patches[1]["data"]["review"]["fixes"],
        json!([{"path": "calc.py", "text": "[P1] operands swapped — calc.py:5 (0.90)"}])
    );
    // And counted.
    let out = agent_ls(ws.path(), &["stats", "--json"], &[]);
    let stats = json_of(&out, 0);
    let r = &stats["total"]["review"];
    assert_eq!(
        (r["reviews"].as_u64(), r["rejections"].as_u64()),
        (Some(2), Some(1)),
        "{r}"
    );
    assert_eq!(r["findings_by_priority"], json!([0, 1, 0, 0]));
}

#[test]
fn a_p3_finding_does_not_block_in_gate_mode() {
    let ws = workspace("review = \"gate\"\n", false);
    let o = fix(
        ws.path(),
        &[coder("a - b", "b + a"), reviewer("incorrect", 3)],
        0,
    );
    assert_eq!(
        (o["status"].as_str(), o["iterations"].as_u64()),
        (Some("done"), Some(1)),
        "{o}"
    );
    assert_eq!(o["review"]["blocking"], false);
    assert_eq!(o["review"]["findings"][0]["priority"], 3);
    assert!(o["answer"].as_str().unwrap().contains("1 P3"), "{o}");
}

#[test]
fn once_the_retries_are_spent_the_change_comes_with_the_findings() {
    let ws = workspace("review = \"gate\"\nmax_retries = 0\n", false);
    // Exit 2: the change stays applied (the user sees it with the findings).
    let o = fix(
        ws.path(),
        &[coder("a - b", "b + a"), reviewer("incorrect", 0)],
        2,
    );
    assert_eq!(o["status"], "failed", "{o}");
    assert!(
        o["answer"]
            .as_str()
            .unwrap()
            .contains("the reviewer found problems"),
        "{o}"
    );
    assert_eq!(o["review"]["blocking"], true);
    assert_eq!(o["review"]["findings"][0]["title"], "[P0] operands swapped");
    assert!(calc(ws.path()).contains("    return b + a\n"));
}

#[test]
fn an_unreadable_review_is_asked_again_once_then_reported_unavailable_not_approved() {
    let ws = workspace("review = \"gate\"\n", false);
    let unreadable = json!({"role": "reviewer", "content": "Looks good to me!"});
    let lines = [coder("a - b", "a + b"), unreadable.clone(), unreadable];
    let out = agent_ls(
        ws.path(),
        &["run", "fix the failing tests", "--yes", "--json"],
        &lines,
    );
    let o = json_of(&out, 0);
    assert_eq!(o["review"]["status"], "unavailable", "{o}");
    let reason = o["review"]["reason"].as_str().unwrap();
    assert!(reason.contains("could not be read twice"), "{reason}");
    assert!(o["review"].get("verdict").is_none());
    // Two reviewer calls: the answer and the one repair.
    let calls = support::journaled(ws.path(), "model_call");
    let reviewer_calls = calls.iter().filter(|c| c["role"] == "reviewer").count();
    assert_eq!(reviewer_calls, 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("review unavailable"), "{stderr}");
}

#[test]
fn in_advise_mode_a_run_without_a_reviewer_answer_is_not_blocked() {
    // The default mode, and a script with no reviewer's answer: the review is unavailable,
    // and the run ends as it would have.
    let ws = workspace("", false);
    let o = fix(ws.path(), &[coder("a - b", "a + b")], 0);
    assert_eq!(o["status"], "done", "{o}");
    assert_eq!(o["review"]["status"], "unavailable");
}

/// A finding of `priority` on calc.py `line`.
fn finding_at(priority: u8, line: u32) -> Value {
    json!({"title": "t", "body": "b", "priority": priority, "confidence": 0.9,
        "path": "calc.py", "start_line": line, "end_line": line})
}

#[test]
fn review_staged_reviews_the_index_in_a_real_repository_with_exit_codes() {
    let ws = workspace("", true);
    let p = ws.path();
    // Nothing staged: nothing to review.
    let out = agent_ls(p, &["review", "--staged", "--json"], &[]);
    assert_eq!(json_of(&out, 0)["answer"], "nothing to review");
    // `add` fixed and staged; `multiply` changed in the working tree only.
    let fixed = calc(p).replace("return a - b", "return a + b");
    std::fs::write(p.join("calc.py"), &fixed).unwrap();
    run_git(p, &["add", "calc.py"]);
    std::fs::write(
        p.join("calc.py"),
        fixed.replace("return a * b", "return b * a"),
    )
    .unwrap();
    let incorrect = json!({"role": "reviewer", "content": json!({
        "findings": [finding_at(1, 5), finding_at(2, 9)],
        "verdict": "incorrect", "explanation": "x", "confidence": 0.9}).to_string()});
    let out = agent_ls(
        p,
        &["review", "--staged", "--json"],
        std::slice::from_ref(&incorrect),
    );
    let v = json_of(&out, 2);
    let findings = &v["review"]["findings"];
    // Line 5 is the staged change; line 9 changed only in the working tree, so it is outside.
    assert_eq!(findings[0]["outside_change"], false, "{v}");
    assert_eq!(findings[1]["outside_change"], true, "{v}");
    assert_eq!(v["review"]["verdict"], "incorrect");
    // The uncommitted work (the default) has both changes.
    let out = agent_ls(p, &["review", "--json"], &[incorrect]);
    let v = json_of(&out, 2);
    assert_eq!(v["review"]["findings"][1]["outside_change"], false, "{v}");
    // A correct verdict exits 0, and the terminal gets the summary.
    let out = agent_ls(p, &["review", "--staged"], &[approved()]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("review: the patch is correct (no findings"),
        "{text}"
    );
    // Nothing was changed by the reviews: the index still has only `add`'s fix.
    let staged = run_git(p, &["diff", "--cached", "--stat"]);
    assert!(staged.contains("calc.py | 2 +-"), "{staged}");
    // An unreadable answer twice: unavailable, exit 2 (never an approval).
    let unreadable = json!({"role": "reviewer", "content": "fine"});
    let out = agent_ls(
        p,
        &["review", "--staged", "--json"],
        &[unreadable.clone(), unreadable],
    );
    assert_eq!(json_of(&out, 2)["review"]["status"], "unavailable");
}

#[test]
fn review_run_reviews_a_runs_change_against_its_checkpoint() {
    let ws = workspace("review = \"off\"\n", true);
    let o = fix(ws.path(), &[coder("a - b", "a + b")], 0);
    assert!(o.get("review").is_none(), "review off: {o}");
    let run_id = o["run_id"].as_str().unwrap().to_string();
    let out = agent_ls(
        ws.path(),
        &["review", "--run", &run_id, "--json"],
        &[json!({"role": "reviewer", "content": json!({
            "findings": [finding_at(3, 5)], "verdict": "correct",
            "explanation": "fine", "confidence": 0.8}).to_string()})],
    );
    let v = json_of(&out, 0);
    assert_eq!(v["review"]["findings"][0]["outside_change"], false, "{v}");
}

/// Whether a publishDiagnostics for `uri` carries `n` review diagnostics.
fn review_diagnostics(p: &Value, uri: &str) -> Vec<Value> {
    if p["uri"] != uri {
        return Vec::new();
    }
    p["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["source"] == "agent-ls review")
        .cloned()
        .collect()
}

/// A server on `ws` in `encoding`, with calc.py (`uri`) open in an editor that applies edits
/// to its buffer (returned), and a replayed run whose review finds a P1 on line 5 and a P3 on
/// line 9.
fn server_whose_review_finds_a_p1_and_a_p3(
    ws: &std::path::Path,
    encoding: &str,
    uri: &str,
) -> (support::Client, Buffer) {
    use support::{Client, Spawn, apply_lsp_edits};
    let broken = calc(ws);
    let findings = json!({"role": "reviewer", "content": json!({
        "findings": [finding_at(1, 5), finding_at(3, 9)],
        "verdict": "incorrect", "explanation": "x", "confidence": 0.9}).to_string()});
    std::fs::write(
        ws.join(".replay.jsonl"),
        support::replay_script(&[coder("a - b", "a + b"), findings]),
    )
    .unwrap();
    let options = json!({"model": {"provider": "replay", "replay_file": ".replay.jsonl"},
        "agent": {"approval": "auto", "evaluate": false}});
    let mut c = Client::spawn(Spawn::default());
    c.initialize(
        ws,
        support::capabilities_with_encodings(&[encoding]),
        options,
    );
    c.open(uri, &broken);
    let buffer = std::sync::Arc::new(std::sync::Mutex::new((broken.clone(), 1i64)));
    let (b, u) = (buffer.clone(), uri.to_string());
    c.on_request_then("workspace/applyEdit", move |p| {
        let mut b = b.lock().unwrap();
        for op in p["edit"]["documentChanges"]
            .as_array()
            .into_iter()
            .flatten()
        {
            b.0 = apply_lsp_edits(&b.0, op["edits"].as_array().unwrap());
        }
        b.1 += 1;
        let note = json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": u, "version": b.1}, "contentChanges": [{"text": b.0}]}});
        (json!({"applied": true}), vec![note])
    });
    (c, buffer)
}

/// The editor's copy of calc.py and its version.
type Buffer = std::sync::Arc<std::sync::Mutex<(String, i64)>>;

/// Over LSP, in `encoding`: a replayed reviewer's P1 and P3 findings become diagnostics on
/// their lines, move with an edit above them, and go when their line is edited or the step
/// is undone.
fn findings_become_diagnostics(encoding: &str) {
    let ws = workspace("", false);
    let uri = support::file_uri(&ws.path().join("calc.py"));
    let (mut c, buffer) = server_whose_review_finds_a_p1_and_a_p3(ws.path(), encoding, &uri);
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["review"]["verdict"], "incorrect", "{done}");
    let p = c.wait_notification("textDocument/publishDiagnostics", |p| {
        !review_diagnostics(p, &uri).is_empty()
    });
    let diags = review_diagnostics(&p, &uri);
    let placed: Vec<(u64, u64, u64, u64)> = diags
        .iter()
        .map(|d| {
            let r = &d["range"];
            (
                r["start"]["line"].as_u64().unwrap(),
                r["start"]["character"].as_u64().unwrap(),
                r["end"]["line"].as_u64().unwrap(),
                d["severity"].as_u64().unwrap(),
            )
        })
        .collect();
    // Lines 5 and 9 (1-based) as whole lines; P1 an error, P3 information.
    assert_eq!(placed, vec![(4, 0, 5, 1), (8, 0, 9, 3)], "{p}");
    // A line typed at the top moves both down.
    let version = buffer.lock().unwrap().1 + 1;
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [
            {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": "# top\n"}]}),
    );
    let p = c.wait_notification("textDocument/publishDiagnostics", |p| {
        p["uri"] == uri.as_str() && p["version"] == version
    });
    let lines: Vec<u64> = review_diagnostics(&p, &uri)
        .iter()
        .map(|d| d["range"]["start"]["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, vec![5, 9], "{p}");
    // Editing the P1's line (now line 6) drops it; the P3 stays.
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": version + 1}, "contentChanges": [
            {"range": {"start": {"line": 5, "character": 4}, "end": {"line": 5, "character": 10}}, "text": "return"}]}),
    );
    let p = c.wait_notification("textDocument/publishDiagnostics", |p| {
        p["uri"] == uri.as_str() && p["version"] == version + 1
    });
    let left = review_diagnostics(&p, &uri);
    assert_eq!(left.len(), 1, "{p}");
    assert_eq!(left[0]["range"]["start"]["line"], 9);
    // Undo of the run's step (the edit above kept the text of its line): the P3 goes too.
    c.notifications.clear();
    c.command("agent-ls.undo", Value::Null).unwrap();
    let p = c.wait_notification("textDocument/publishDiagnostics", |p| {
        p["uri"] == uri.as_str()
    });
    assert!(review_diagnostics(&p, &uri).is_empty(), "{p}");
    assert!(
        buffer.lock().unwrap().0.contains("return a - b"),
        "the step was undone"
    );
}

#[test]
fn over_lsp_findings_are_diagnostics_on_their_lines_in_utf16() {
    findings_become_diagnostics("utf-16");
}

#[test]
fn over_lsp_findings_are_diagnostics_on_their_lines_in_utf8() {
    findings_become_diagnostics("utf-8");
}

#[test]
fn over_lsp_agent_ls_review_reviews_the_uncommitted_work_and_publishes_its_findings() {
    use support::{Client, Spawn, file_uri};
    let ws = workspace("", true);
    let p = ws.path();
    let uri = file_uri(&p.join("calc.py"));
    std::fs::write(
        p.join("calc.py"),
        calc(p).replace("return a - b", "return a + b"),
    )
    .unwrap();
    let findings = json!({"role": "reviewer", "content": json!({
        "findings": [finding_at(2, 5)],
        "verdict": "incorrect", "explanation": "x", "confidence": 0.9}).to_string()});
    std::fs::write(p.join(".replay.jsonl"), support::replay_script(&[findings])).unwrap();
    let options = json!({"model": {"provider": "replay", "replay_file": ".replay.jsonl"},
        "agent": {"evaluate": false}});
    let mut c = Client::spawn(Spawn::default());
    c.initialize(p, json!({}), options);
    let bad = c.command("agent-ls.review", json!({"branch": "x"}));
    assert!(bad.is_err(), "{bad:?}");
    let started = c.command("agent-ls.review", Value::Null).unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["run_id"], started["run_id"]);
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["review"]["verdict"], "incorrect", "{done}");
    assert_eq!(done["files_changed"], json!([]), "a review changes nothing");
    let published = c.wait_notification("textDocument/publishDiagnostics", |p| {
        !review_diagnostics(p, &uri).is_empty()
    });
    let d = &review_diagnostics(&published, &uri)[0];
    assert_eq!(
        (d["range"]["start"]["line"].as_u64(), d["severity"].as_u64()),
        (Some(4), Some(2))
    );
}
