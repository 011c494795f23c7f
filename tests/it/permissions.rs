//! Permission rules and modes through the real binary (docs/permissions.md): a deny rule
//! beats an allow rule and the refusal names it, for a change and for a command; a workspace
//! file cannot choose `auto` nor undo the user's deny, even in a trusted folder; plan mode
//! writes nothing, and a custom agent's own plan mode holds in the editor too; an `ask` rule
//! on a tool call asks through the surface's own question (the editor's showMessageRequest,
//! ACP's session/request_permission, the terminal's [y/N] under `script`) and, with no one to
//! ask (`agent-ls run` without a terminal), refuses naming the rule.

use crate::acp::RawAcp;
use crate::hooks::{FIX, cli, coder, home, read, replay, run_in, text, user_file};
use crate::support;

use serde_json::{Value, json};
use support::model_server::{ModelServer, Recorded, openai_text, openai_tool_call};
use support::{Client, Spawn};

#[test]
fn a_deny_rule_beats_an_allow_rule_and_the_refusal_names_it() {
    let home = home();
    let ws = support::example();
    user_file(
        home.path(),
        "[permissions]\nallow = [\"edit(**)\", \"command(python3 *)\"]\ndeny = [\"edit(calc.py)\", \"command(python3 -m pytest *)\"]\n",
    );
    let pytest = json!({"role": "coder", "content": "", "tool_calls": [
        {"name": "run_command", "arguments": {"argv": ["python3", "-m", "pytest", "-q"]}}
    ]});
    let env = replay(ws.path(), &[pytest, coder(FIX), coder(FIX)]);
    let out = run_in(home.path(), ws.path(), &["--yes"], &env);
    assert!(
        read(ws.path().join("calc.py")).contains("return a - b"),
        "{}",
        text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "writing calc.py is denied by `edit(calc.py)` in permissions.deny (user settings)"
        ),
        "{stderr}"
    );
    // The command's refusal is the tool's result, which the journal keeps.
    let journal = journals(ws.path());
    assert!(
        journal.contains(
            "denied by `command(python3 -m pytest *)` in permissions.deny (user settings)"
        ),
        "{journal}"
    );
}

/// Every journal of the workspace's runs, as one text.
fn journals(ws: &std::path::Path) -> String {
    let dir = ws.join(".agent-ls/runs");
    std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| read(e.path()))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[test]
fn a_trusted_workspace_cannot_choose_auto_nor_undo_the_users_deny() {
    let home = home();
    let ws = support::example();
    let ws_arg = ws.path().to_str().unwrap();
    user_file(
        home.path(),
        "[permissions]\ndeny = [\"edit(secrets/**)\"]\n",
    );
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\napproval = \"auto\"\n\n[permissions]\nallow = [\"edit(**)\"]\ndeny = [\"edit(vendor/**)\"]\n",
    )
    .unwrap();
    let out = cli(home.path(), &["trust", ws_arg], &[]);
    assert!(out.status.success(), "{}", text(&out));

    let out = cli(
        home.path(),
        &["permissions", "--workspace", ws_arg, "--json"],
        &[],
    );
    let view: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(view["mode"], "confirm", "{view}");
    let rules = view["rules"].as_array().cloned().unwrap_or_default();
    for (list, rule, from) in [
        ("deny", "edit(secrets/**)", "user settings"),
        ("deny", "edit(vendor/**)", "workspace file"),
        ("allow", "edit(**)", "workspace file"),
    ] {
        let expected = json!({"list": list, "rule": rule, "from": from});
        assert!(rules.contains(&expected), "{expected} in {view}");
    }
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agent.approval = \"auto\" is ignored"),
        "{}",
        text(&out)
    );

    // Without --yes and nobody at a terminal, nothing is applied: the workspace's "auto" is
    // not the mode.
    let env = replay(ws.path(), &[coder(FIX)]);
    let out = run_in(home.path(), ws.path(), &[], &env);
    assert!(
        read(ws.path().join("calc.py")).contains("return a - b"),
        "{}",
        text(&out)
    );

    // The workspace's allow does not undo the user's deny.
    let secret = "secrets/key.txt\n<<<<<<< SEARCH\n=======\nhunter2\n>>>>>>> REPLACE\n";
    let env = replay(ws.path(), &[coder(secret), coder(FIX)]);
    let out = run_in(home.path(), ws.path(), &["--yes"], &env);
    assert!(
        !ws.path().join("secrets/key.txt").exists(),
        "{}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("`edit(secrets/**)` in permissions.deny (user settings)"),
        "{}",
        text(&out)
    );
    assert!(
        read(ws.path().join("calc.py")).contains("return a + b"),
        "{}",
        text(&out)
    );
}

#[test]
fn plan_mode_writes_nothing() {
    let home = home();
    let ws = support::example();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(ws.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap()
    };
    git(&["init", "-q"]);
    git(&["add", "calc.py", "test_calc.py"]);
    assert!(git(&["commit", "-qm", "start"]).status.success());
    user_file(home.path(), "[agent]\napproval = \"plan\"\n");
    let created = "notes/plan.md\n<<<<<<< SEARCH\n=======\n1. fix add\n>>>>>>> REPLACE\n";
    let env = replay(ws.path(), &[coder(FIX), coder(created), coder(FIX)]);
    let out = run_in(home.path(), ws.path(), &["--yes"], &env);
    let diff = git(&["diff", "--stat", "HEAD"]);
    assert!(
        diff.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
    assert!(!ws.path().join("notes").exists(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("plan mode (agent.approval = \"plan\") is read only"),
        "{}",
        text(&out)
    );
}

const ASK_READ: &str = "[permissions]\nask = [\"tool(read_file)\"]\n";
const THE_RULE: &str = "`tool(read_file)` in permissions.ask (user settings)";

/// A model that reads calc.py, then fixes it.
fn reads_then_fixes() -> ModelServer {
    ModelServer::start(vec![
        openai_tool_call("read_file", &[r#"{"path": "calc.py"}"#]),
        openai_text(&[FIX]),
    ])
}

/// What the model was told the tool call gave (the `tool` message of its second request).
fn tool_result(requests: &[Recorded]) -> String {
    let second = requests.get(1).map(|r| r.body["messages"].clone());
    second
        .and_then(|m| m.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .unwrap_or_else(|| panic!("no tool result in {requests:?}"))
}

/// Whether the tool result is calc.py's text (or says the model has it already).
fn read_it(result: &str) -> bool {
    result.contains("def add") || result.contains("calc.py lines 1-")
}

/// Initializes `c` on `ws` with `server` as its model, changes applied without asking.
pub(crate) fn initialize_auto(c: &mut Client, ws: &std::path::Path, server: &ModelServer) {
    c.initialize(
        ws,
        json!({}),
        json!({"model": {"provider": "openai", "base_url": format!("{}/v1", server.url), "name": "m"},
               "agent": {"approval": "auto", "evaluate": false}}),
    );
}

/// An editor run whose model calls read_file, which the user's ask rule holds; the test
/// client answers the question about the call with `answer`. The model's requests, and the
/// questions about the call.
fn editor_asked(answer: &'static str) -> (Vec<Recorded>, Vec<Value>) {
    let ws = support::example();
    let server = reads_then_fixes();
    let mut c = Client::spawn(Spawn {
        env: vec![("OPENAI_API_KEY".into(), "test-key".into())],
        user_config: Some(ASK_READ.into()),
        ..Spawn::default()
    });
    c.on_request("window/showMessageRequest", move |p| {
        if p["message"]
            .as_str()
            .unwrap_or("")
            .contains("Let the agent call")
        {
            json!({"title": answer})
        } else {
            p["actions"][0].clone()
        }
    });
    initialize_auto(&mut c, ws.path(), &server);
    let started = c
        .command("agent-ls.run", json!({"goal": "fix the failing tests"}))
        .unwrap();
    let finished = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(finished["run_id"], started["run_id"], "{finished}");
    let asked = c
        .server_requests
        .iter()
        .filter(|r| r["method"] == "window/showMessageRequest")
        .filter(|r| {
            r["params"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("Let the agent call")
        })
        .cloned()
        .collect();
    (server.requests(), asked)
}

#[test]
fn an_ask_rule_on_a_tool_call_asks_the_editor_and_its_answer_decides() {
    let (requests, asked) = editor_asked("Allow this call");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let message = asked[0]["params"]["message"].as_str().unwrap();
    assert!(
        message.contains(THE_RULE) && message.contains("`read_file` (calc.py)"),
        "{message}"
    );
    let result = tool_result(&requests);
    assert!(read_it(&result), "the call ran: {result}");

    let (requests, asked) = editor_asked("Refuse");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let result = tool_result(&requests);
    assert!(
        result.contains(THE_RULE) && result.contains("the user said no"),
        "the refusal names the rule: {result}"
    );
    assert!(!read_it(&result), "{result}");
}

#[test]
fn an_ask_rule_on_a_tool_call_is_acps_permission_question() {
    let ws = support::example();
    let server = reads_then_fixes();
    let home = support::home_with(&format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\napi_key = \"test-key\"\n[agent]\nevaluate = false\n{ASK_READ}",
        server.url
    ));
    let cwd = ws.path().canonicalize().unwrap();
    let mut acp = RawAcp::start(home.path());
    let (created, _) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].clone();
    let (answer, seen) = acp.request(
        2,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "fix the failing tests"}]}),
    );
    acp.close();
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    // The first question is the call's (RawAcp allows it, as the user would); the change's
    // comes after.
    let asked = seen
        .iter()
        .find(|m| m["method"] == "session/request_permission")
        .unwrap_or_else(|| panic!("no question: {seen:?}"));
    let call = &asked["params"]["toolCall"];
    assert!(
        call["title"].as_str().unwrap_or("").contains("read_file"),
        "{asked}"
    );
    assert!(call["content"].to_string().contains(THE_RULE), "{asked}");
    let result = tool_result(&server.requests());
    assert!(read_it(&result), "the call ran: {result}");
}

/// A user whose ask rule holds read_file, and a run whose replayed model reads calc.py, then
/// fixes it: the home, the workspace and the run's environment.
fn asked_to_read() -> (
    tempfile::TempDir,
    tempfile::TempDir,
    Vec<(&'static str, String)>,
) {
    let home = home();
    let ws = support::example();
    user_file(home.path(), ASK_READ);
    let read = json!({"role": "coder", "content": "", "tool_calls": [
        {"name": "read_file", "arguments": {"path": "calc.py"}}
    ]});
    let env = replay(ws.path(), &[read, coder(FIX)]);
    (home, ws, env)
}

#[test]
fn an_ask_rule_on_a_tool_call_with_no_one_to_ask_refuses_naming_the_rule() {
    let (home, ws, env) = asked_to_read();
    let out = run_in(home.path(), ws.path(), &["--yes"], &env);
    let journal = journals(ws.path());
    assert!(
        journal.contains(&format!(
            "needs the user's yes ({THE_RULE}), and there is no one to ask here"
        )),
        "{}\n{journal}",
        text(&out)
    );
}

#[test]
fn an_editor_run_of_a_custom_agent_in_plan_mode_writes_nothing() {
    let ws = support::example();
    let prompt = ws.path().join("planner.md");
    std::fs::write(&prompt, "You plan; you change nothing.\n").unwrap();
    let server = ModelServer::start(vec![
        openai_text(&[FIX]),
        openai_text(&["Then the plan: fix add in calc.py."]),
    ]);
    let mut c = Client::spawn(Spawn {
        env: vec![("OPENAI_API_KEY".into(), "test-key".into())],
        user_config: Some(format!(
            "[agents.planner]\nprompt = {:?}\napproval = \"plan\"\n",
            prompt.display().to_string()
        )),
        ..Spawn::default()
    });
    // The user's own mode applies without asking; the agent's is plan, and it wins.
    initialize_auto(&mut c, ws.path(), &server);
    let started = c
        .command(
            "agent-ls.run",
            json!({"goal": "fix the failing tests", "agent": "planner"}),
        )
        .unwrap();
    let finished = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(finished["run_id"], started["run_id"], "{finished}");
    assert!(
        read(ws.path().join("calc.py")).contains("return a - b"),
        "{finished}"
    );
    let requests = server.requests();
    let second = requests
        .get(1)
        .map(|r| r.body["messages"].to_string())
        .unwrap_or_default();
    assert!(
        second.contains("plan mode (agent.approval = \\\"plan\\\") is read only"),
        "the model heard why: {second}"
    );
}

#[test]
fn an_ask_rule_on_a_tool_call_asks_on_the_terminal_and_a_yes_runs_it() {
    use std::io::Write;
    let (home, ws, env) = asked_to_read();
    // `script` gives the run a terminal, on which the test types the user's "y".
    let line = format!(
        "{} run 'fix the failing tests' --yes --workspace {}",
        support::binary().display(),
        ws.path().display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("TMPDIR", home.path().join("tmp"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs");
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let said = text(&out);
    assert!(
        said.contains(THE_RULE) && said.contains("Let the agent call `read_file` (calc.py)?"),
        "{said}"
    );
    let result = support::journaled(ws.path(), "tool_result");
    assert!(
        result
            .iter()
            .any(|r| read_it(r["data"]["text"].as_str().unwrap_or(""))),
        "the call ran: {result:?}\n{said}"
    );
}
