//! Skills (issue 41, docs/skills.md) on a real repository's skill (anthropics/skills'
//! webapp-testing, tests/fixtures/repos): the model server on 127.0.0.1 sees only the skill's
//! name and description until the model calls `read_skill`, whose answer is the body; and a
//! skill is run from the CLI (`agent-ls run --skill`), ACP (`available_commands`, `/name`)
//! and LSP (`agent-ls.skills`, `agent-ls.runSkill`, a code action where it declares paths).

use crate::acp::RawAcp;
use crate::instructions::{FIX, done, fix, project, run, system};
use crate::support;

use serde_json::{Value, json};
use support::model_server::{ModelServer, Recorded, openai_text, openai_tool_call};
use support::{Client, Spawn};

const DESCRIPTION: &str =
    "Toolkit for interacting with and testing local web applications using Playwright.";
/// A line of the skill's body, which only `read_skill` gives.
const BODY: &str = "Decision Tree: Choosing Your Approach";

fn with_skill() -> tempfile::TempDir {
    project("webapp-testing-skill", "")
}

/// Every message's text of a request, tool results among them.
fn all_text(r: &Recorded) -> String {
    r.body["messages"].to_string()
}

fn tools(r: &Recorded) -> Vec<String> {
    r.body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The first request lists the skill and not its body; the body comes back as the tool's
/// result once the model calls `read_skill`.
fn listed_then_opened(requests: &[Recorded], goal_words: &str) {
    let first = &requests[0];
    let sys = system(first);
    assert!(
        sys.contains(&format!("- webapp-testing: {DESCRIPTION}")),
        "{sys}"
    );
    assert!(
        !all_text(first).contains(BODY),
        "the body is not in the prompt"
    );
    assert!(
        tools(first).contains(&"read_skill".to_string()),
        "{:?}",
        tools(first)
    );
    assert!(all_text(first).contains(goal_words), "{}", all_text(first));
    let second = all_text(&requests[1]);
    assert!(second.contains(BODY), "{second}");
    assert!(second.contains("scripts/with_server.py"), "{second}");
    assert!(second.contains("run_command"), "{second}");
}

fn opens_then_fixes() -> ModelServer {
    ModelServer::start(vec![
        openai_tool_call("read_skill", &[r#"{"name": "webapp-testing"}"#]),
        openai_text(&[FIX]),
    ])
}

#[test]
fn the_cli_runs_a_skill_the_model_opens_only_with_read_skill() {
    let ws = with_skill();
    let home = tempfile::tempdir().unwrap();
    let server = opens_then_fixes();
    let out = run(
        ws.path(),
        home.path(),
        &server,
        &["--skill", "webapp-testing", "check the calculator"],
    );
    done(&out);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    listed_then_opened(&requests, "Use the skill `webapp-testing`");
    assert!(all_text(&requests[0]).contains("check the calculator"));
    let context = support::journaled(ws.path(), "context");
    assert_eq!(context[0]["data"]["skills"], json!(["webapp-testing"]));
    let calls = support::journaled(ws.path(), "tool_call");
    assert!(
        calls.iter().any(|c| c["data"]["name"] == "read_skill"),
        "{calls:?}"
    );
}

#[test]
fn a_run_that_never_opens_the_skill_never_sends_its_body_and_an_unknown_skill_is_refused() {
    let ws = with_skill();
    let home = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![openai_text(&[FIX])]);
    done(&fix(ws.path(), home.path(), &server));
    let requests = server.requests();
    assert!(system(&requests[0]).contains("- webapp-testing: "));
    assert!(requests.iter().all(|r| !all_text(r).contains(BODY)));

    let out = support::cli(&["run", "--skill", "nope"], ws.path(), home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("there is no skill `nope`; the skills are: webapp-testing"),
        "{stderr}"
    );
}

#[test]
fn acp_offers_the_skill_as_a_command_and_slash_name_runs_it() {
    let ws = with_skill();
    let server = opens_then_fixes();
    let home = support::home_with(&format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\napi_key = \"test-key\"\n",
        server.url
    ));
    let cwd = ws.path().canonicalize().unwrap();
    let mut acp = RawAcp::start(home.path());
    let (created, mut seen) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].clone();
    let (answer, more) = acp.request(
        2,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "/webapp-testing check the calculator"}]}),
    );
    seen.extend(more);
    acp.close();
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let offered = crate::acp::offered_commands(&seen);
    let skill = offered
        .iter()
        .find(|c| c["name"] == "webapp-testing")
        .unwrap_or_else(|| panic!("{offered:?}"));
    assert!(
        skill["description"]
            .as_str()
            .unwrap()
            .starts_with(DESCRIPTION)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{seen:?}");
    listed_then_opened(&requests, "Use the skill `webapp-testing`");
}

/// The `key` of each object of the array `list`.
fn strings(list: &Value, key: &str) -> Vec<String> {
    let items = list.as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter_map(|v| v[key].as_str().map(String::from))
        .collect()
}

/// A server on `ws` whose model is `server`, edits applied without asking.
fn lsp(ws: &std::path::Path, server: &ModelServer) -> Client {
    let mut c = Client::spawn(Spawn {
        env: vec![("OPENAI_API_KEY".into(), "test-key".into())],
        ..Spawn::default()
    });
    c.initialize(
        ws,
        json!({}),
        json!({"model": {"provider": "openai", "base_url": format!("{}/v1", server.url), "name": "m"}, "agent": {"approval": "auto"}}),
    );
    c
}

#[test]
fn the_editor_lists_the_skills_runs_one_and_offers_one_with_paths_as_a_code_action() {
    let ws = with_skill();
    // A skill of the test's own that declares the files it is for.
    let own = ws.path().join(".agents/skills/py-style");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("SKILL.md"),
        "---\nname: py-style\ndescription: Python style fixes.\npaths: [\"*.py\"]\n---\nUse black.\n",
    )
    .unwrap();
    let server = opens_then_fixes();
    let mut c = lsp(ws.path(), &server);
    let listed = c.command("agent-ls.skills", Value::Null).unwrap();
    let names = strings(&listed, "name");
    assert_eq!(names, ["py-style", "webapp-testing"], "{listed}");
    assert!(
        listed[1]["description"]
            .as_str()
            .unwrap()
            .starts_with(DESCRIPTION),
        "{listed}"
    );

    // The code action: on calc.py for py-style (its paths), never for webapp-testing.
    let uri = support::file_uri(&ws.path().join("calc.py"));
    let text = std::fs::read_to_string(ws.path().join("calc.py")).unwrap();
    c.open(&uri, &text);
    let actions = c
        .request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "context": {"diagnostics": []}}),
        )
        .unwrap();
    let titles = strings(&actions, "title");
    assert!(
        titles.iter().any(|t| t == "Agent: run skill py-style"),
        "{titles:?}"
    );
    assert!(
        !titles.iter().any(|t| t.contains("webapp-testing")),
        "{titles:?}"
    );

    // "Agent: Run Skill…" runs agent-ls.runSkill.
    let started = c
        .command(
            "agent-ls.runSkill",
            json!({"name": "webapp-testing", "request": "check the calculator"}),
        )
        .unwrap();
    assert!(started["run_id"].is_string(), "{started}");
    // The test client does not write what it is asked to apply: the run's end matters here,
    // not its change.
    let finished = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(finished["run_id"], started["run_id"], "{finished}");
    listed_then_opened(&server.requests(), "for this: check the calculator");
    let unknown = c.command("agent-ls.runSkill", json!({"name": "nope"}));
    assert!(
        format!("{unknown:?}").contains("there is no skill `nope`"),
        "{unknown:?}"
    );
}
