//! The VS Code extension in real VS Code: code-server in headless Chromium, driven by
//! playwright-core (editors/vscode/test/e2e.mjs), with the real binary and the replay model.
//! One code-server serves every scenario, each in a window (and browser) of its own.
//! scripts/test builds the .vsix, installs code-server, Node 24 and Chromium, and sets the
//! AGENT_LS_TEST_* variables this test reads. The inline completion scenarios answer from a
//! stub fill-in-the-middle model on 127.0.0.1 (editors/vscode/test/inline.mjs).

use std::process::Command;

use crate::support;
use crate::support::model_server::{ModelServer, Reply};

/// The variables the test needs; `None` (skipped, saying so) under a plain `cargo test`.
fn tools() -> Option<[(String, String); 4]> {
    let names = [
        ("CODE_SERVER", "AGENT_LS_TEST_CODE_SERVER"),
        ("NODE24", "AGENT_LS_TEST_NODE24"),
        ("CHROMIUM", "AGENT_LS_TEST_CHROMIUM"),
        ("VSIX", "AGENT_LS_TEST_VSIX"),
    ];
    let mut out = Vec::new();
    for (key, var) in names {
        match std::env::var(var) {
            Ok(v) => out.push((key.to_string(), v)),
            Err(_) if std::env::var("AGENT_LS_REQUIRE_REAL_MODEL").is_ok() => {
                panic!("{var} is not set; scripts/test installs code-server and builds the .vsix")
            }
            Err(_) => {
                eprintln!("skipped: {var} is not set (scripts/test sets it)");
                return None;
            }
        }
    }
    out.try_into().ok()
}

const FIX: &str = "{\"role\": \"coder\", \"content\": \"calc.py\\n<<<<<<< SEARCH\\n    return a - b\\n=======\\n    return a + b\\n>>>>>>> REPLACE\\n\"}\n";

/// One scenario (a window and a Chromium) at a time: two at once on a 2-core machine starve
/// each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The code-server every scenario uses (editors/vscode/test/code-server.mjs), started by the
/// first: its address, user-data folder and log. It stops when this process ends, which
/// closes its stdin, however the process ends.
struct CodeServer {
    url: String,
    user_data: String,
    log: String,
    _process: std::process::Child,
}

fn code_server(tools: &[(String, String); 4]) -> &'static CodeServer {
    static SHARED: std::sync::OnceLock<CodeServer> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        use std::io::BufRead;
        let mut process = Command::new("node")
            .arg(support::repo("editors/vscode/test/code-server.mjs"))
            .envs(tools.iter().cloned())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("node runs code-server.mjs");
        let mut line = String::new();
        let out = process.stdout.take().expect("its stdout");
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("code-server.mjs answers");
        let started: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("code-server did not start ({e}): {line:?}"));
        let field = |k: &str| started[k].as_str().expect(k).to_string();
        CodeServer {
            url: field("url"),
            user_data: field("userData"),
            log: field("log"),
            _process: process,
        }
    })
}

/// Runs one scenario of the script and returns its checks.
fn scenario(name: &str) -> Option<Vec<serde_json::Value>> {
    let tools = tools()?;
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = code_server(&tools);
    let ws = tempfile::tempdir().unwrap();
    support::copy_example(ws.path());
    let script = replay_for(name, ws.path());
    std::fs::write(ws.path().join(".replay.jsonl"), script).unwrap();
    Some(run_e2e(name, ws.path(), tools, server, &[]))
}

/// The replay model's answers for scenario `name`, with what the scenario needs of the
/// workspace `ws` (a commit, an uncommitted change, a helper file) set up on the way.
fn replay_for(name: &str, ws: &std::path::Path) -> String {
    // The reviewer passes a change, so a run that fixes asks nothing after it (a review with
    // findings, or none to be had, ends with the review question: docs/review.md).
    let passed = serde_json::json!({"role": "reviewer", "content": r#"{"findings": [], "verdict": "correct", "explanation": "add adds", "confidence": 0.9}"#});
    match name {
        "explain" => EXPLAIN.to_string(),
        "create" => {
            std::fs::write(ws.join("test_helpers.py"), support::TEST_HELPERS).unwrap();
            format!("{}{passed}\n", support::create_module_replay())
        }
        "runview" => support::two_iterations_replay(),
        "rollback" => {
            support::git::commit_all(ws);
            support::replay_script(&[
                serde_json::json!({"role": "coder", "content": support::git::FIX_AND_CREATE}),
                passed,
            ])
        }
        "gate" => {
            let coder = |from: &str, to: &str| serde_json::json!({"role": "coder", "content": format!("calc.py\n<<<<<<< SEARCH\n    return {from}\n=======\n    return {to}\n>>>>>>> REPLACE\n")});
            let p1 = serde_json::json!({
                "findings": [{"title": "[P1] operands swapped", "body": "b + a reads oddly",
                    "priority": 1, "confidence": 0.9, "path": "calc.py",
                    "start_line": 5, "end_line": 5}],
                "verdict": "incorrect", "explanation": "swapped", "confidence": 0.9
            });
            support::replay_script(&[
                coder("a - b", "b + a"),
                serde_json::json!({"role": "reviewer", "content": p1.to_string()}),
                coder("b + a", "a + b"),
                passed,
            ])
        }
        "review_question" | "review_question_undo" | "review_question_key" => {
            support::git::commit_all(ws);
            let p1 = serde_json::json!({
                "findings": [{"title": "[P1] add subtracts", "body": "add(2, 3) gives -1",
                    "priority": 1, "confidence": 0.9, "path": "calc.py",
                    "start_line": 5, "end_line": 5}],
                "verdict": "incorrect", "explanation": "add is wrong", "confidence": 0.85
            });
            format!(
                "{FIX}{}\n",
                serde_json::json!({"role": "reviewer", "content": p1.to_string()})
            )
        }
        "review" => {
            support::git::uncommitted_change(ws);
            support::git::review_findings_replay()
        }
        "tester" => {
            let test = "import unittest\n\nfrom calc import add\n\n\nclass AddTests(unittest.TestCase):\n    def test_add_sums(self):\n        self.assertEqual(add(2, 3), 5)\n";
            let answer = serde_json::json!({"tests": [{"path": "test_add.py",
                "name": "test_add_sums", "kind": "example", "reason": "add must sum",
                "expect": "AssertionError: -1 != 5", "content": test}]});
            format!(
                "{}\n{FIX}{passed}\n",
                serde_json::json!({"role": "tester", "content": answer.to_string()})
            )
        }
        "typescript" => {
            typescript_project(ws);
            let coder = |from: &str, to: &str| serde_json::json!({"role": "coder", "content": format!("calc.ts\n<<<<<<< SEARCH\n  return {from};\n=======\n  return {to};\n>>>>>>> REPLACE\n")});
            support::replay_script(&[coder("a - b", "a + c"), coder("a + c", "a + b")])
        }
        "skill" => {
            let skill = ws.join(".agents/skills/py-style");
            std::fs::create_dir_all(&skill).unwrap();
            std::fs::write(
                skill.join("SKILL.md"),
                "---\nname: py-style\ndescription: Python style fixes.\n---\nFix what the tests say, in the file they name.\n",
            )
            .unwrap();
            let open = serde_json::json!({"role": "coder", "content": "", "tool_calls": [
                {"name": "read_skill", "arguments": {"name": "py-style"}}
            ]});
            format!("{}{FIX}{passed}\n", support::replay_script(&[open]))
        }
        "accept" => format!("{FIX}{passed}\n"),
        _ => FIX.to_string(),
    }
}

/// Runs editors/vscode/test/e2e.mjs's scenario `name` on `ws`, failing with the script's output
/// unless every check passed, and returns the checks.
fn run_e2e(
    name: &str,
    ws: &std::path::Path,
    tools: [(String, String); 4],
    server: &CodeServer,
    extra: &[(&str, String)],
) -> Vec<serde_json::Value> {
    // The flow's screenshots; AGENT_LS_UPDATE_DOCS=1 puts them in docs/images, which the
    // README and docs show.
    let screenshots = if std::env::var_os("AGENT_LS_UPDATE_DOCS").is_some() {
        support::repo("docs/images")
    } else {
        support::repo("target/vscode-e2e/screenshots")
    };
    let out_dir = tempfile::tempdir().unwrap();
    let result = out_dir.path().join("result.jsonl");
    let artifacts = support::repo("target/vscode-e2e");
    std::fs::create_dir_all(&artifacts).unwrap();
    let out = Command::new("node")
        .arg(support::repo("editors/vscode/test/e2e.mjs"))
        .envs(tools)
        .env("CODE_SERVER_URL", &server.url)
        .env("USER_DATA", &server.user_data)
        .env("CODE_SERVER_LOG", &server.log)
        .env("AGENT_LS", env!("CARGO_BIN_EXE_agent-ls"))
        .env("WORKSPACE", ws.canonicalize().unwrap())
        .env("RESULT", &result)
        .env("ARTIFACTS", &artifacts)
        .env("SCENARIO", name)
        .env("SCREENSHOTS", &screenshots)
        .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Kept beside the screenshots: each check's line says when it passed, and scripts/test
    // prints each scenario's last, so a slow CI run shows where its time went.
    let _ = std::fs::write(artifacts.join(format!("e2e-{name}.log")), &said);
    let text = std::fs::read_to_string(&result)
        .unwrap_or_else(|e| panic!("no results ({e}); the script said: {said}"));
    let checks: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failed: Vec<_> = checks.iter().filter(|c| c["ok"] != true).collect();
    assert!(
        failed.is_empty() && out.status.success(),
        "failed checks (screenshot and logs in target/vscode-e2e/): {failed:#?}\n{said}"
    );
    checks
}

/// Replaces the Python example in `ws` by a TypeScript one whose `add` subtracts, tested by
/// Node's own runner (Node 24 runs TypeScript as it is).
fn typescript_project(ws: &std::path::Path) {
    for f in ["calc.py", "test_calc.py"] {
        let _ = std::fs::remove_file(ws.join(f));
    }
    let files = [
        (
            "calc.ts",
            "export function add(a: number, b: number): number {\n  return a - b;\n}\n",
        ),
        (
            "calc.test.ts",
            "import { test } from 'node:test';\nimport assert from 'node:assert';\nimport { add } from './calc.ts';\n\ntest('add', () => {\n  assert.strictEqual(add(2, 3), 5);\n});\n",
        ),
        (
            "tsconfig.json",
            r#"{"compilerOptions": {"strict": true, "noEmit": true, "module": "nodenext", "allowImportingTsExtensions": true}}"#,
        ),
    ];
    for (name, text) in files {
        std::fs::write(ws.join(name), text).unwrap();
    }
}

const EXPLAIN: &str = "{\"role\": \"coder\", \"content\": \"`add` is meant to sum its arguments.\\n\\nIt subtracts instead:\\n\\n- `add(2, 3)` gives -1\\n- the tests expect 5\\n\"}\n";

#[test]
fn fix_failing_tests_from_the_palette_in_real_vs_code() {
    let Some(checks) = scenario("accept") else {
        return;
    };
    // Every step of the flow reported: install, status bar, problem, preview, disk, cleared,
    // passed, editor, undo, redo.
    assert!(checks.len() >= 10, "{checks:#?}");
}

#[test]
fn discarding_the_preview_in_real_vs_code_changes_nothing() {
    let Some(checks) = scenario("reject") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "calc.py is unchanged on disk"),
        "{checks:#?}"
    );
}

#[test]
fn a_question_from_agent_run_opens_its_answer_as_a_document_in_real_vs_code() {
    let Some(checks) = scenario("explain") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "the explanation opens as a document"),
        "{checks:#?}"
    );
}

#[test]
fn a_change_that_creates_a_module_then_save_all_undo_and_redo_in_real_vs_code() {
    let Some(checks) = scenario("create") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "Save All raises no conflict"),
        "{checks:#?}"
    );
}

#[test]
fn the_run_view_follows_a_two_iteration_run_and_undoes_its_first_step_in_real_vs_code() {
    let Some(checks) = scenario("runview") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "undo from the view reverts only that step"),
        "{checks:#?}"
    );
}

#[test]
fn a_test_command_that_cannot_run_is_an_error_not_failing_tests_in_real_vs_code() {
    let Some(checks) = scenario("broken") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "the fix run stops before any model call"),
        "{checks:#?}"
    );
}

#[test]
fn a_run_rolled_back_from_the_palette_after_a_second_confirmation_in_real_vs_code() {
    let Some(checks) = scenario("rollback") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "git sees the tree as at the checkpoint"),
        "{checks:#?}"
    );
}

#[test]
fn agent_review_changes_shows_the_reviewers_findings_in_problems_in_real_vs_code() {
    let Some(checks) = scenario("review") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "the P1 is an error on line 5, from agent-ls review"),
        "{checks:#?}"
    );
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "editing line 5 drops its finding, line 9 keeps its own"),
        "{checks:#?}"
    );
}

#[test]
fn the_review_question_lists_the_finding_in_a_picker_and_rolls_the_run_back_in_real_vs_code() {
    let Some(checks) = scenario("review_question") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "the editor shows calc.py as before the run"),
        "{checks:#?}"
    );
}

/// The review question waits in a picker; Agent: Undo from the palette answers it, and no
/// question is left on screen (a notification or a dialog would stay: microsoft/vscode#95901).
#[test]
fn undo_from_the_palette_while_the_review_question_waits_leaves_no_question_on_screen_in_real_vs_code()
 {
    undo_leaves_no_question("review_question_undo");
}

/// Agent: Undo from a key leaves the picker open: the server answers the question and cancels
/// it (`$/cancelRequest`), which closes the picker.
#[test]
fn the_servers_cancellation_closes_the_review_question_in_real_vs_code() {
    undo_leaves_no_question("review_question_key");
}

/// Runs scenario `name`: an undo while the review question waits lands, and takes the
/// question off the screen.
fn undo_leaves_no_question(name: &str) {
    let Some(checks) = scenario(name) else {
        return;
    };
    for check in [
        "Agent: Undo reverts the fix while the question waited",
        "the question is no longer on screen",
    ] {
        assert!(checks.iter().any(|c| c["name"] == check), "{checks:#?}");
    }
}

#[test]
fn in_gate_mode_the_retrys_refactor_preview_names_the_finding_in_real_vs_code() {
    let Some(checks) = scenario("gate") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "the retry preview names the finding it is to fix"),
        "{checks:#?}"
    );
}

#[test]
fn the_failing_test_code_action_creates_the_test_file_and_undo_removes_it_in_real_vs_code() {
    let Some(checks) = scenario("tester") else {
        return;
    };
    // Install, status bar, the action offered, the file, the fix, done, the two undos.
    assert!(checks.len() >= 8, "{checks:#?}");
}

#[test]
fn vs_codes_own_typescript_errors_check_the_agents_edit_with_no_server_spawned() {
    // Every check is in the script: the forwarded error went back to the model, the fix
    // followed before any test ran, and no language server of agent-ls's own started.
    let Some(checks) = scenario("typescript") else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "agent-ls started no language server of its own")
    );
}

#[test]
fn agent_run_skill_from_the_palette_runs_the_picked_skill_in_real_vs_code() {
    let Some(checks) = scenario("skill") else {
        return;
    };
    for name in [
        "the pick lists the skill with its description",
        "the run is the skill's, for the request",
        "the model opened the skill with read_skill",
    ] {
        assert!(
            checks.iter().any(|c| c["name"] == name && c["ok"] == true),
            "{name}: {checks:#?}"
        );
    }
}

const INLINE_PY: &str = "def add(a, b):\n    \n\nprint(add(1, 2))\n";

/// The stub model's completion of line 2 to `return a + b` from what the prompt shows typed
/// there, in OpenAI's `/v1/completions` shape.
fn completes_return(body: &serde_json::Value) -> Reply {
    let prompt = body["prompt"].as_str().unwrap_or_default();
    let typed = prompt.rsplit('\n').next().unwrap_or_default().trim_start();
    let rest = "return a + b".strip_prefix(typed).unwrap_or_default();
    Reply::json(serde_json::json!({"choices": [{"text": rest}]}))
}

/// Runs inline completion scenario `name` (inline.mjs) on a workspace holding `main.py`,
/// against a stub model; with `hold_first`, the stub holds its answer to the first keystroke
/// (`r` typed) for 1.5 s, answers it `STALE_TEXT`, and says so through marker files.
fn inline_scenario(name: &str, hold_first: bool) -> Option<Vec<serde_json::Value>> {
    let tools = tools()?;
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = code_server(&tools);
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("main.py"), INLINE_PY).unwrap();
    std::fs::create_dir(ws.path().join(".agent-ls")).unwrap();
    std::fs::write(ws.path().join(".replay.jsonl"), "").unwrap();
    let marks = ws.path().to_path_buf();
    let held = std::sync::atomic::AtomicBool::new(false);
    let asked = std::sync::atomic::AtomicUsize::new(0);
    let stub = ModelServer::answering(move |body| {
        // How many requests came, for the scenario's switched-off check.
        let n = asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let _ = std::fs::write(marks.join(".stub-count"), n.to_string());
        let typed_r = body["prompt"]
            .as_str()
            .is_some_and(|p| p.ends_with("    r"));
        if hold_first && typed_r && !held.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let _ = std::fs::write(marks.join(".stub-1"), "");
            std::thread::sleep(std::time::Duration::from_millis(1500));
            let _ = std::fs::write(marks.join(".stub-done-1"), "");
            return Reply::json(serde_json::json!({"choices": [{"text": "STALE_TEXT"}]}));
        }
        completes_return(body)
    });
    let checks = run_e2e(
        name,
        ws.path(),
        tools,
        server,
        &[("STUB_URL", stub.url.clone())],
    );
    Some(checks)
}

#[test]
fn ghost_text_from_the_completion_model_shows_and_tab_accepts_it_in_real_vs_code() {
    let Some(checks) = inline_scenario("inline", false) else {
        return;
    };
    for name in [
        "the suggestion shows as ghost text after the cursor",
        "Tab accepts it into the document",
        "VS Code ran the item's command: the acceptance is counted",
        "agentLs.inlineCompletion.enable is switched off in the Settings editor",
        "with agentLs.inlineCompletion.enable off, typing asks the model nothing and shows nothing",
    ] {
        assert!(
            checks.iter().any(|c| c["name"] == name),
            "{name}: {checks:#?}"
        );
    }
}

#[test]
fn a_suggestion_that_came_after_the_user_typed_on_never_shows_in_real_vs_code() {
    let Some(checks) = inline_scenario("inline_stale", true) else {
        return;
    };
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "the answer that came after the user typed on is never shown"),
        "{checks:#?}"
    );
}
