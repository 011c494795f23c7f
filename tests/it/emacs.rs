//! The Emacs client (editors/emacs/agent-ls.el) and eglot alone, with the real binary in a
//! real headless Emacs 28 with eglot 1.9 (Debian's `emacs-nox` and `elpa-eglot`, which
//! scripts/test installs): fix, undo and redo, with the buffer and the disk in step after
//! each, and every question Emacs asks recorded (tests/e2e/emacs_fix.el); and agent-ls.el's
//! ghost text against a stub completion model (tests/e2e/emacs_completion.el).

use std::path::Path;
use std::process::Command;

use crate::support;

/// Where Debian's elpa-eglot puts eglot.
const ELPA: &str = "/usr/share/emacs/site-lisp/elpa";

fn required() -> bool {
    std::env::var("AGENT_LS_REQUIRE_EDITOR_TESTS").is_ok()
        || std::env::var("AGENT_LS_REQUIRE_REAL_MODEL").is_ok()
}

/// The Emacs to run, or `None` (the test is skipped) when there is none and the editor tests
/// are not required.
fn emacs() -> Option<String> {
    let emacs = std::env::var("AGENT_LS_TEST_EMACS").unwrap_or_else(|_| "emacs".into());
    let runs = Command::new(&emacs)
        .args(["--batch", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    let eglot = std::fs::read_dir(ELPA)
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("eglot-"))
        })
        .unwrap_or(false);
    match (runs, eglot) {
        (true, true) => Some(emacs),
        _ if required() => panic!(
            "no Emacs with eglot ({emacs} runs: {runs}; eglot under {ELPA}: {eglot}); \
             scripts/test installs emacs-nox and elpa-eglot"
        ),
        _ => {
            eprintln!(
                "skipped: no Emacs with eglot (apt-get install emacs-nox elpa-eglot, as scripts/test does)"
            );
            None
        }
    }
}

/// The coder's fix, then a reviewer that passes it: a run whose review found something (or
/// could not be had) ends with the review question (docs/review.md), which these flows,
/// counting one question for the change, are not about.
const FIX: &str = "{\"role\": \"coder\", \"content\": \"calc.py\\n<<<<<<< SEARCH\\n    return a - b\\n=======\\n    return a + b\\n>>>>>>> REPLACE\\n\"}\n{\"role\": \"reviewer\", \"content\": \"{\\\"findings\\\": [], \\\"verdict\\\": \\\"correct\\\", \\\"explanation\\\": \\\"adds\\\", \\\"confidence\\\": 0.9}\"}\n";

/// Runs one scenario of tests/e2e/emacs_fix.el in a copy of the example; its checks.
fn scenario(name: &str) -> Vec<serde_json::Value> {
    let Some(emacs) = emacs() else {
        return Vec::new();
    };
    let ws = tempfile::tempdir().unwrap();
    support::copy_example(ws.path());
    std::fs::write(ws.path().join(".replay.jsonl"), FIX).unwrap();
    let new_user = matches!(name, "user" | "iterations" | "declined");
    if new_user {
        // A new user's project is a real repository: its run is checkpointed and its commit
        // offered, which must not be one more question.
        support::git::commit_all(ws.path());
    } else {
        std::fs::create_dir(ws.path().join(".git")).unwrap();
    }
    let state = tempfile::tempdir().unwrap();
    if new_user {
        // Trusted, as a user's own project is: only there is a commit offered (it runs the
        // repository's hooks).
        let trusted = Command::new(env!("CARGO_BIN_EXE_agent-ls"))
            .arg("trust")
            .arg(ws.path())
            .env("HOME", state.path())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .output()
            .unwrap();
        assert!(trusted.status.success(), "{trusted:?}");
    }
    let result = state.path().join("result.jsonl");
    let events = state.path().join("events.txt");
    let mut child = Command::new(emacs)
        .args(["-Q", "--batch", "-l"])
        .arg(support::repo("tests/e2e/emacs_fix.el"))
        // Emacs writes nothing of its own into the user's home.
        .env("HOME", state.path())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env("RESULT", &result)
        .env("EVENTS", &events)
        .env("SCENARIO", name)
        .env("WORKSPACE", ws.path().canonicalize().unwrap())
        .env("PLUGIN", support::repo("editors/emacs"))
        .env("AGENT_LS", env!("CARGO_BIN_EXE_agent-ls"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A question the harness did not answer would wait for a terminal that is not there:
    // the scenario gets two minutes, then fails with what Emacs said.
    let started = std::time::Instant::now();
    let mut timed_out = false;
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            timed_out = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}\nevents:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        read(&events)
    );
    let text = std::fs::read_to_string(&result)
        .unwrap_or_else(|e| panic!("no results ({e}); emacs said: {said}"));
    let mut results: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    if timed_out {
        results.push(serde_json::json!({
            "name": "the scenario ends (Emacs was stopped after 120 s, waiting at a prompt?)",
            "ok": false,
            "detail": said,
        }));
    }
    let failed: Vec<_> = results.iter().filter(|r| r["ok"] != true).collect();
    assert!(
        failed.is_empty(),
        "failed checks: {failed:#?}\nall: {results:#?}\nemacs said: {said}"
    );
    results
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn names(results: &[serde_json::Value]) -> Vec<&str> {
    results.iter().filter_map(|r| r["name"].as_str()).collect()
}

#[test]
fn fix_undo_and_redo_with_agent_ls_el_keep_buffer_and_disk_in_step_without_questions() {
    let results = scenario("plugin");
    if results.is_empty() {
        return;
    }
    let names = names(&results);
    for check in [
        "one question for the change",
        "buffer saved after undo",
        "the mode line shows the tests after an undo",
        "buffer saved after redo",
        "no changed-on-disk question, even on save",
        "rewind reaches the server",
    ] {
        assert!(names.contains(&check), "{check} was not checked: {names:?}");
    }
    assert!(results.len() >= 20, "{results:#?}");
}

/// eglot alone, the user answering yes should Emacs ask "changed on disk; discard your edits?"
/// (it does not: the server parks the file it wrote as Emacs last saw it while the edit is
/// applied): undo and redo land, buffer and disk in step.
#[test]
fn undo_and_redo_with_eglot_alone_land_when_emacs_rereads_the_file() {
    let results = scenario("eglot");
    if results.is_empty() {
        return;
    }
    assert!(
        names(&results).contains(&"one question for the change (eglot's)"),
        "{results:#?}"
    );
    assert!(results.len() >= 16, "{results:#?}");
}

/// eglot alone, the user answering no (keep the buffer) should Emacs ask: the edit goes into
/// the buffer, and the disk, written after it, holds the same text.
#[test]
fn undo_and_redo_with_eglot_alone_land_when_the_user_keeps_the_buffer() {
    let results = scenario("eglot-no");
    if results.is_empty() {
        return;
    }
    assert!(results.len() >= 16, "{results:#?}");
}

/// agent-ls.el's review question: Show diff opens the change in a diff-mode buffer and asks
/// again, Reject leaves buffer and disk untouched; the mode line follows the run and a rerun,
/// and the runs buffer shows the proposal and its rejection.
#[test]
fn the_review_question_in_emacs_shows_the_diff_and_a_rejection_changes_nothing() {
    let results = scenario("review");
    if results.is_empty() {
        return;
    }
    assert!(
        names(&results).contains(&"Show diff opens the change in diff-mode"),
        "{results:#?}"
    );
    assert!(results.len() >= 12, "{results:#?}");
}

/// eglot alone with the default settings in a git repository, as a new user meets it: the fix
/// takes at most two questions (the code action, the change; the commit is offered as a
/// notice), each undo and redo at most one, Emacs's own "changed on disk" included (none
/// comes: the server parks the file it wrote under the buffer as Emacs last saw it while the
/// edit is applied), and ten undos and redos in a row, each sent as M-x sends it (a
/// synchronous request), all land: none stalls on Emacs 28's jsonrpc reading the server's
/// workspace/applyEdit late.
#[test]
fn eglot_alone_asks_two_questions_for_a_fix_one_for_an_undo_and_ten_undos_land() {
    let results = scenario("user");
    if results.is_empty() {
        return;
    }
    let names = names(&results);
    for check in [
        "at most 2 questions for the fix (the action, the change)",
        "the commit is offered as a notice, not asked",
        "agent-ls.undo 10 lands within 10 s",
        "agent-ls.undo 10: at most 1 question",
        "agent-ls.undo 10: no changed-on-disk question",
        "agent-ls.redo 10: at most 1 question",
    ] {
        assert!(names.contains(&check), "{check} was not checked: {names:?}");
    }
}

/// eglot alone with the default settings: a fix that takes two iterations, whose review has a
/// finding, still takes two questions (the action menu, eglot's one "Proceed?": the run's
/// edits reach the editor as one edit at its end, the finding said just before it); the
/// commit notice names what eglot has, the code actions "Agent: Undo" and "Agent: Commit";
/// Agent: Undo takes one question besides the menu, and saving right after it asks nothing.
#[test]
fn eglot_alone_fix_of_two_iterations_takes_two_questions_and_undo_then_save_asks_nothing() {
    let results = scenario("iterations");
    if results.is_empty() {
        return;
    }
    let names = names(&results);
    for check in [
        "status done after two iterations",
        "at most 2 questions for a fix of two iterations with a finding",
        "the review's finding is said",
        "the notice names what eglot has",
        "Agent: Undo and Agent: Commit are code actions",
        "Agent: Undo: one question besides the menu",
        "saving right after the undo asks nothing",
    ] {
        assert!(names.contains(&check), "{check} was not checked: {names:?}");
    }
}

/// eglot alone, the user answering no to the run's one edit: eglot asked once, and the buffer
/// and the disk are as before the run (the disk with the time Emacs recorded: saving asks
/// nothing).
#[test]
fn eglot_alone_declining_the_runs_one_edit_leaves_the_files_as_before_the_run() {
    let results = scenario("declined");
    if results.is_empty() {
        return;
    }
    let names = names(&results);
    for check in [
        "eglot asked once for the run's change",
        "the disk is as before the run",
        "saving asks nothing",
    ] {
        assert!(names.contains(&check), "{check} was not checked: {names:?}");
    }
}

/// agent-ls.el byte-compiles against eglot 1.9 with no warning (an unknown function or a
/// free variable would be one).
#[test]
fn agent_ls_el_byte_compiles_without_warnings() {
    let Some(emacs) = emacs() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("agent-ls.el");
    std::fs::copy(support::repo("editors/emacs/agent-ls.el"), &copy).unwrap();
    let out = Command::new(emacs)
        .env("HOME", dir.path())
        .args(["-Q", "--batch", "--eval"])
        .arg(format!(
            "(progn (dolist (d (file-expand-wildcards \"{ELPA}/*\")) (add-to-list 'load-path d)) \
             (setq byte-compile-error-on-warn t))"
        ))
        .args(["-f", "batch-byte-compile"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success() && dir.path().join("agent-ls.elc").exists(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn flymakes_diagnostics_check_the_agents_edit_in_emacs_with_no_server_spawned() {
    // A flymake backend beside agent-ls's eglot (the test's own, reporting `c` undefined)
    // reports the bad edit's error; agent-ls.el forwards it, the run sends it back to the
    // model, whose next answer fixes it before any test runs, and agent-ls starts no server.
    let results = scenario("diagnostics");
    if results.is_empty() {
        return;
    }
    let names = names(&results);
    for check in [
        "the bad edit came back with flymake's error",
        "agent-ls started no language server of its own",
    ] {
        assert!(names.contains(&check), "{check} was not checked: {names:?}");
    }
}

const INLINE_PY: &str = "def add(a, b):\n    \n\nprint(add(1, 2))\n";

/// Runs tests/e2e/emacs_completion.el's scenario `name` against a stub FIM model that
/// completes line 2 to `return a + b`; with `hold_first`, its answer to the first keystroke
/// (`r` typed) is held for 1.5 s and is `STALE_TEXT`, marker files saying when.
fn completion_scenario(name: &str, hold_first: bool) -> Vec<serde_json::Value> {
    use crate::support::model_server::{ModelServer, Reply};
    let Some(emacs) = emacs() else {
        return Vec::new();
    };
    let ws = tempfile::tempdir().unwrap();
    for dir in [".git", ".agent-ls"] {
        std::fs::create_dir(ws.path().join(dir)).unwrap();
    }
    std::fs::write(ws.path().join("main.py"), INLINE_PY).unwrap();
    let marks = ws.path().to_path_buf();
    let held = std::sync::atomic::AtomicBool::new(false);
    let stub = ModelServer::answering(move |body| {
        let prompt = body["prompt"].as_str().unwrap_or_default();
        let typed = prompt.rsplit('\n').next().unwrap_or_default().trim_start();
        if hold_first && typed == "r" && !held.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let _ = std::fs::write(marks.join(".stub-1"), "");
            std::thread::sleep(std::time::Duration::from_millis(1500));
            let _ = std::fs::write(marks.join(".stub-done-1"), "");
            return Reply::json(serde_json::json!({"choices": [{"text": "STALE_TEXT"}]}));
        }
        let rest = "return a + b".strip_prefix(typed).unwrap_or_default();
        Reply::json(serde_json::json!({"choices": [{"text": rest}]}))
    });
    let state = tempfile::tempdir().unwrap();
    let result = state.path().join("result.jsonl");
    let out = Command::new(emacs)
        .args(["-Q", "--batch", "-l"])
        .arg(support::repo("tests/e2e/emacs_completion.el"))
        .env("HOME", state.path())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env("RESULT", &result)
        .env("SCENARIO", name)
        .env("STUB_URL", &stub.url)
        .env("WORKSPACE", ws.path().canonicalize().unwrap())
        .env("PLUGIN", support::repo("editors/emacs"))
        .env("AGENT_LS", env!("CARGO_BIN_EXE_agent-ls"))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<serde_json::Value> = read(&result)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failed: Vec<_> = results.iter().filter(|r| r["ok"] != true).collect();
    assert!(
        !results.is_empty() && failed.is_empty(),
        "failed checks: {failed:#?}\nall: {results:#?}\nemacs said: {said}"
    );
    results
}

#[test]
fn agent_ls_el_shows_ghost_text_from_the_model_and_tab_accepts_it() {
    let results = completion_scenario("accept", false);
    if results.is_empty() {
        return;
    }
    let names = names(&results);
    for check in [
        "the suggestion shows as an overlay after point",
        "C-<right> takes the next word, the rest stays shown",
        "TAB accepts it into the buffer",
        "the acceptance reaches the server",
        "with agent-ls-inline-completion off nothing is asked or shown",
    ] {
        assert!(names.contains(&check), "{check} was not checked: {names:?}");
    }
}

#[test]
fn agent_ls_el_never_shows_an_answer_that_came_after_the_user_typed_on() {
    let results = completion_scenario("stale", true);
    if results.is_empty() {
        return;
    }
    assert!(
        names(&results).contains(&"the answer that came after the user typed on is never shown"),
        "{results:#?}"
    );
}
