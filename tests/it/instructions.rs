//! Instruction files (issue 41, docs/instructions.md) through `agent-ls run --json` on real
//! repositories' files (tests/fixtures/repos): the system prompt the model server on
//! 127.0.0.1 receives holds the root's file, the nearest last; a nested file joins only once
//! the run reads under its folder; CLAUDE.md stands in where there is no AGENTS.md; over the
//! budget the farthest file is cut and the run says so; the journal and `agent-ls config`
//! name the files and their bytes.

use crate::support;

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use support::model_server::{ModelServer, Recorded, openai_text, openai_tool_call};

/// The fix of the example's bug, as the coder's last answer.
pub const FIX: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";

/// The example project (`examples/calc`, whose tests fail) with the files of the fixture
/// `name` over it, the evaluator and the review off, so the server answers the coder only.
pub fn project(fixture: &str, config: &str) -> tempfile::TempDir {
    let ws = support::example();
    copy_tree(
        &support::repo(&format!("tests/fixtures/repos/{fixture}")),
        ws.path(),
    );
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        format!("[agent]\nevaluate = false\nreview = \"off\"\n{config}"),
    )
    .unwrap();
    ws
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let dest = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// `agent-ls run GOAL --yes --json ARGS` against `server`, with `home` as the user's home.
pub fn run(ws: &Path, home: &Path, server: &ModelServer, goal: &[&str]) -> Output {
    let mut args = vec!["run"];
    args.extend_from_slice(goal);
    args.push("--yes");
    support::cli(&args, ws, home)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "test-key")
        .output()
        .unwrap()
}

/// `agent-ls run "fix the failing tests"`, as `run` runs it.
pub fn fix(ws: &Path, home: &Path, server: &ModelServer) -> Output {
    run(ws, home, server, &["fix the failing tests"])
}

/// The run's outcome, which must be done.
pub fn done(out: &Output) -> Value {
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}\nstderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(
        o["status"],
        "done",
        "{o}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    o
}

/// The system prompt of a recorded chat request.
pub fn system(r: &Recorded) -> String {
    let m = &r.body["messages"][0];
    assert_eq!(m["role"], "system", "{m}");
    m["content"].as_str().unwrap_or_default().to_string()
}

/// A model that reads `path` first, then fixes the example.
fn reads_then_fixes(path: &str) -> ModelServer {
    let args = json!({"path": path}).to_string();
    ModelServer::start(vec![
        openai_tool_call("read_file", &[&args]),
        openai_text(&[FIX]),
    ])
}

fn fixture_text(path: &str) -> String {
    std::fs::read_to_string(support::repo(&format!("tests/fixtures/repos/{path}"))).unwrap()
}

#[test]
fn the_roots_file_leads_and_a_nested_one_joins_only_once_the_run_reads_under_its_folder() {
    let ws = project("openlit", "");
    std::fs::write(ws.path().join("sdk/go/client.go"), "package openlit\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = reads_then_fixes("sdk/go/client.go");
    done(&fix(ws.path(), home.path(), &server));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let (first, second) = (system(&requests[0]), system(&requests[1]));
    assert!(first.contains("# OpenLIT Agent Rules"), "{first}");
    assert!(!first.contains("Go SDK instructions"), "{first}");
    let root = second
        .find("# OpenLIT Agent Rules")
        .expect("the root's file");
    let nested = second
        .find("# Go SDK instructions")
        .expect("the nested file");
    // Top-down: the nearest comes last, so it wins where they disagree.
    assert!(root < nested, "{second}");
    assert!(second.contains("## sdk/go/AGENTS.md (for the files under sdk/go/)"));
    // The journal: the context line names the root's file and its bytes, the instructions
    // line both, once the run came under sdk/go.
    let context = support::journaled(ws.path(), "context");
    assert_eq!(
        context[0]["data"]["instructions"],
        json!([{"path": "AGENTS.md", "bytes": 2563}])
    );
    let later = support::journaled(ws.path(), "instructions");
    assert_eq!(
        later[0]["data"]["files"],
        json!([{"path": "AGENTS.md", "bytes": 2563}, {"path": "sdk/go/AGENTS.md", "bytes": 346}])
    );
}

/// A goal that names a file under a folder with its own AGENTS.md: the folder is one the run
/// works in, so its file is in the first request (it came one call later).
#[test]
fn a_folder_the_goal_names_brings_its_file_into_the_first_request() {
    let ws = project("openlit", "");
    std::fs::write(ws.path().join("sdk/go/client.go"), "package openlit\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = reads_then_fixes("calc.py");
    done(&run(
        ws.path(),
        home.path(),
        &server,
        &["fix the failing tests; sdk/go/client.go is not involved"],
    ));
    let requests = server.requests();
    let first = system(&requests[0]);
    assert!(first.contains("# OpenLIT Agent Rules"), "{first}");
    assert!(first.contains("# Go SDK instructions"), "{first}");
    let context = support::journaled(ws.path(), "context");
    assert_eq!(
        context[0]["data"]["instructions"],
        json!([{"path": "AGENTS.md", "bytes": 2563}, {"path": "sdk/go/AGENTS.md", "bytes": 346}])
    );
}

#[test]
fn claude_md_stands_in_where_there_is_no_agents_md_after_the_users_own_file() {
    let ws = project("claude-code-action", "");
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(home.path().join("agent-ls/AGENTS.md"), "Answer tersely.\n").unwrap();
    let server = ModelServer::start(vec![openai_text(&[FIX])]);
    done(&fix(ws.path(), home.path(), &server));
    let system = system(&server.requests()[0]);
    let own = system.find("Answer tersely.").expect("the user's file");
    let claude = system
        .find("A GitHub Action that lets Claude respond")
        .expect("CLAUDE.md");
    assert!(own < claude, "{system}");
    let context = support::journaled(ws.path(), "context");
    let files = &context[0]["data"]["instructions"];
    assert_eq!(
        files[1],
        json!({"path": "CLAUDE.md", "bytes": 3532}),
        "{files}"
    );
    assert!(
        files[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("agent-ls/AGENTS.md"),
        "{files}"
    );
}

#[test]
fn over_the_budget_the_farthest_file_is_cut_first_and_the_run_says_so() {
    // The user's file (24 bytes), the root's (2563) and, once read under, sdk/go's (346):
    // 2933 bytes in 2600. The user's goes whole, then the root's tail; the nearest stays.
    let ws = project("openlit", "[context]\ninstructions_bytes = 2600\n");
    std::fs::write(ws.path().join("sdk/go/client.go"), "package openlit\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(
        home.path().join("agent-ls/AGENTS.md"),
        "My own farthest rules.\n\n",
    )
    .unwrap();
    let server = reads_then_fixes("sdk/go/client.go");
    let out = fix(ws.path(), home.path(), &server);
    done(&out);
    let second = system(&server.requests()[1]);
    assert!(
        second.contains(fixture_text("openlit/sdk/go/AGENTS.md").trim()),
        "{second}"
    );
    assert!(!second.contains("My own farthest rules"), "{second}");
    assert!(second.contains("# OpenLIT Agent Rules"), "{second}");
    assert!(
        !second.contains("keep RBAC permission literals out of CE"),
        "{second}"
    );
    assert!(
        second.contains("[the rest of AGENTS.md was cut"),
        "{second}"
    );
    // Said to the user (stderr) and in the journal.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("instruction files over the budget of 2600 bytes"),
        "{stderr}"
    );
    let lines = support::journaled(ws.path(), "instructions");
    let cut = lines.last().unwrap()["data"]["cut"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(cut.contains("the farthest first"), "{cut}");
    let files = &lines.last().unwrap()["data"]["files"];
    assert_eq!(files[0]["bytes"], 0, "{files}");
    assert_eq!(
        files[2],
        json!({"path": "sdk/go/AGENTS.md", "bytes": 346}),
        "{files}"
    );
}

#[test]
fn agent_ls_config_lists_the_instruction_files_and_their_bytes() {
    let ws = project("openlit", "");
    let home = tempfile::tempdir().unwrap();
    let out = support::cli(&["config"], ws.path(), home.path())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["instructions"],
        json!([{"path": "AGENTS.md", "bytes": 2563}]),
        "{v}"
    );
    let text = support::in_workspace(&["config"], ws.path(), home.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("# instruction file AGENTS.md: 2563 bytes"),
        "{text}"
    );
}
