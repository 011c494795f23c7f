//! The Agent Client Protocol through the real binary: `agent-ls acp` driven by the official
//! TypeScript SDK (`@agentclientprotocol/sdk`) as the editor, with the replay provider as the
//! model: a fix with permission granted, one rejected, a cancel, and an undo. The client
//! offers fs/read_text_file and fs/write_text_file, so reads and writes go through it.

use crate::support;

use std::process::Command;

use serde_json::{Value, json};
use support::git::FIX_AND_CREATE;

fn deps() -> Option<std::path::PathBuf> {
    support::protocol_deps()
}

const FIX: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";

/// Runs the client in `scenario` on a copy of the example, with `user_config` as the user's
/// configuration file.
fn client(scenario: &str, user_config: &str) -> (Value, tempfile::TempDir) {
    let ws = support::example();
    let script = if scenario == "plan" {
        vec![
            json!({"role": "planner", "content": r#"{"plan_id": "p1", "tasks": [{"id": "T1", "title": "make add return the sum"}, {"id": "T2", "title": "document add"}]}"#}),
            json!({"role": "coder", "content": FIX}),
            json!({"role": "coder", "content": "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n=======\ndef add(a, b):\n    \"\"\"The sum.\"\"\"\n>>>>>>> REPLACE\n"}),
        ]
    } else if scenario == "mcp" {
        let path = ws.path().canonicalize().unwrap().join("calc.py");
        vec![
            json!({"role": "coder", "content": "", "tool_calls": [
                {"name": "mcp__fs__read_text_file", "arguments": {"path": path}}
            ]}),
            json!({"role": "coder", "content": FIX}),
        ]
    } else if scenario == "review" {
        let answer = json!({
            "findings": [
                {"title": "[P1] add ignores overflow", "body": "big sums wrap", "priority": 1,
                 "confidence": 0.9, "path": "calc.py", "start_line": 5, "end_line": 5},
                {"title": "[P3] multiply is untested", "body": "no test calls it", "priority": 3,
                 "confidence": 0.8, "path": "calc.py", "start_line": 9, "end_line": 9}
            ],
            "verdict": "incorrect", "explanation": "add needs a bound", "confidence": 0.85
        });
        vec![
            json!({"role": "coder", "content": FIX}),
            json!({"role": "reviewer", "content": format!("```json\n{answer}\n```")}),
        ]
    } else {
        vec![json!({"role": "coder", "content": FIX})]
    };
    std::fs::write(
        ws.path().join(".replay.jsonl"),
        support::replay_script(&script),
    )
    .unwrap();
    client_in(ws, scenario, user_config)
}

fn client_in(
    ws: tempfile::TempDir,
    scenario: &str,
    user_config: &str,
) -> (Value, tempfile::TempDir) {
    let deps = deps().expect("checked by the caller");
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(home.path().join("agent-ls/config.toml"), user_config).unwrap();
    let out = Command::new("node")
        .arg(deps.join("acp-client.mjs"))
        .arg(support::binary())
        .arg(ws.path().canonicalize().unwrap())
        .arg(scenario)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env(
            "ACP_MCP_FS",
            deps.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"),
        )
        .env(
            "ACP_PROMPT",
            if scenario == "plan" {
                "make add return the sum, then document add"
            } else {
                "fix the failing tests"
            },
        )
        .env("AGENT_LS_MODEL__PROVIDER", "replay")
        .env(
            "AGENT_LS_MODEL__REPLAY_FILE",
            ws.path().join(".replay.jsonl").display().to_string(),
        )
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{said}");
    let seen = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{said}", String::from_utf8_lossy(&out.stdout)));
    (seen, ws)
}

fn kinds(seen: &Value) -> Vec<String> {
    seen["updates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            format!(
                "{}{}",
                u["sessionUpdate"].as_str().unwrap_or(""),
                u["kind"]
                    .as_str()
                    .map(|k| format!(":{k}"))
                    .unwrap_or_default()
            )
        })
        .collect()
}

fn messages(seen: &Value) -> Vec<String> {
    seen["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

const NO_EVAL: &str = "[agent]\nevaluate = false\n";

#[test]
fn an_acp_client_sees_the_review_as_a_tool_call_at_its_findings_lines() {
    if deps().is_none() {
        return;
    }
    // The default review mode (advise): the replayed reviewer's findings come after the
    // tests pass, as one tool call whose locations are the lines they name.
    let (seen, ws) = client("review", NO_EVAL);
    assert_eq!(seen["stop"], "end_turn");
    let updates = seen["updates"].as_array().unwrap();
    let reviews: Vec<&Value> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call" && u["kind"] == "think")
        .collect();
    assert_eq!(reviews.len(), 1, "{:?}", kinds(&seen));
    let review = reviews[0];
    assert_eq!(review["title"], "Review: patch is incorrect (2 findings)");
    assert_eq!(review["status"], "completed");
    let calc = ws.path().canonicalize().unwrap().join("calc.py");
    assert_eq!(
        review["locations"],
        json!([{"path": calc, "line": 5}, {"path": calc, "line": 9}]),
        "{review}"
    );
    let texts: Vec<&str> = review["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["content"]["text"].as_str().unwrap())
        .collect();
    assert!(
        texts[0].starts_with("review: the patch is incorrect")
            && texts[0].contains("add needs a bound"),
        "{texts:?}"
    );
    assert_eq!(
        texts[1..],
        [
            "[P1] add ignores overflow: calc.py:5-5 (confidence 0.90)\nbig sums wrap",
            "[P3] multiply is untested: calc.py:9-9 (confidence 0.80; outside the change)\nno test calls it",
        ]
    );
    assert_eq!(review["rawOutput"]["verdict"], "incorrect");
    // After the test run that passed, before the answer; the thoughts do not repeat it.
    let k = kinds(&seen);
    let at = k.iter().position(|x| x == "tool_call:think").unwrap();
    let last_run = k.iter().rposition(|x| x == "tool_call:execute").unwrap();
    assert!(last_run < at, "{k:?}");
    let thoughts: String = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_thought_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(!thoughts.contains("add ignores overflow"), "{thoughts}");
    // The change itself went through as in advise mode: the findings never block.
    assert!(
        std::fs::read_to_string(&calc)
            .unwrap()
            .contains("return a + b")
    );
}

#[test]
fn an_acp_client_grants_permission_and_the_fix_is_written_through_it() {
    if deps().is_none() {
        return;
    }
    let (seen, ws) = client("allow", NO_EVAL);
    assert_eq!(seen["initialize"]["agentCapabilities"]["loadSession"], true);
    assert_eq!(seen["stop"], "end_turn");
    the_tool_calls_come_in_order_and_say_what_and_where(&seen);
    the_thoughts_are_prose_and_the_permission_shows_the_diff(&seen);
    the_files_go_through_the_client(&seen);
    assert!(seen["final"].as_str().unwrap().contains("return a + b"));
    assert_eq!(
        messages(&seen).last().unwrap(),
        "done: the tests pass after 1 iteration(s)"
    );
    // The same run the LSP server would make: journaled, with its step in the store.
    let runs = std::fs::read_dir(ws.path().join(".agent-ls/runs"))
        .unwrap()
        .count();
    assert_eq!(runs, 1);
}

fn the_tool_calls_come_in_order_and_say_what_and_where(seen: &Value) {
    let k = kinds(seen);
    assert_eq!(k[0], "available_commands_update");
    // The baseline run, the proposal (with its diff) before the permission, the test run after.
    let edit = k
        .iter()
        .position(|x| x == "tool_call:edit")
        .expect("an edit tool call");
    let runs: Vec<usize> = k
        .iter()
        .enumerate()
        .filter(|(_, x)| *x == "tool_call:execute")
        .map(|(i, _)| i)
        .collect();
    assert!(runs.len() == 2 && runs[0] < edit && edit < runs[1], "{k:?}");
    // Each tool call says what it does, how far it is, and where.
    let updates = seen["updates"].as_array().unwrap();
    let test_run = updates.iter().find(|u| u["kind"] == "execute").unwrap();
    let title = test_run["title"].as_str().unwrap();
    assert!(
        title.starts_with("Run the tests: ") && title.len() > "Run the tests: ".len(),
        "{title}"
    );
    assert_eq!(test_run["status"], "in_progress");
    let edit_call = updates.iter().find(|u| u["kind"] == "edit").unwrap();
    // Pending is ACP's default status, which the schema leaves out of a tool call.
    assert!(
        edit_call.get("status").is_none_or(|s| s == "pending"),
        "{edit_call}"
    );
    assert_eq!(seen["permissions"][0]["toolCall"]["status"], "pending");
    let edit_statuses: Vec<&Value> = updates
        .iter()
        .filter(|u| {
            u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == edit_call["toolCallId"]
        })
        .map(|u| &u["status"])
        .collect();
    assert_eq!(edit_statuses, [&json!("in_progress"), &json!("completed")]);
    let location = &edit_call["locations"][0];
    assert!(
        location["path"].as_str().unwrap().ends_with("/calc.py"),
        "{edit_call}"
    );
    assert_eq!(location["line"], 5, "{edit_call}");
    assert_eq!(
        seen["permissions"][0]["toolCall"]["locations"],
        edit_call["locations"]
    );
}

fn the_thoughts_are_prose_and_the_permission_shows_the_diff(seen: &Value) {
    let updates = seen["updates"].as_array().unwrap();
    // The thoughts are prose: no edit block, which the edit tool call shows.
    let thoughts: String = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_thought_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(!thoughts.contains("<<<<<<<"), "{thoughts}");
    assert!(!thoughts.contains("return a + b"), "{thoughts}");
    let permission = &seen["permissions"][0];
    assert_eq!(permission["options"][0]["kind"], "allow_once");
    let diff = &permission["toolCall"]["content"][0];
    assert_eq!(diff["type"], "diff");
    assert!(diff["newText"].as_str().unwrap().contains("return a + b"));
    assert!(diff["oldText"].as_str().unwrap().contains("return a - b"));
}

fn the_files_go_through_the_client(seen: &Value) {
    // The client read the files and wrote the change; the disk has it because the client did.
    assert!(
        seen["reads"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().ends_with("calc.py"))
    );
    assert_eq!(seen["writes"].as_array().unwrap().len(), 1);
    // Read through the client once for the turn, and once more just before the change is
    // applied (to see whether the editor changed it since), not again in every phase.
    let calc_reads = seen["reads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p.as_str().unwrap().ends_with("/calc.py"))
        .count();
    assert_eq!(calc_reads, 2, "{}", seen["reads"]);
}

#[test]
fn an_acp_client_rejects_the_change_and_nothing_is_written() {
    if deps().is_none() {
        return;
    }
    let (seen, _ws) = client("reject", NO_EVAL);
    assert_eq!(seen["stop"], "end_turn");
    assert_eq!(seen["permissions"].as_array().unwrap().len(), 1);
    assert!(seen["writes"].as_array().unwrap().is_empty());
    assert!(seen["final"].as_str().unwrap().contains("return a - b"));
    assert!(
        messages(&seen).last().unwrap().contains("rejected"),
        "{:?}",
        messages(&seen)
    );
}

#[test]
fn an_acp_client_cancels_a_run_whose_tests_hang() {
    if deps().is_none() {
        return;
    }
    let started = std::time::Instant::now();
    let (seen, _ws) = client(
        "cancel",
        "[agent]\nevaluate = false\n[test]\ncommand = [\"sleep\", \"60\"]\nallowlist = [\"sleep\"]\n",
    );
    assert_eq!(seen["stop"], "cancelled", "{seen}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert!(seen["permissions"].as_array().unwrap().is_empty());
    assert!(seen["final"].as_str().unwrap().contains("return a - b"));
}

#[test]
fn an_acp_client_undoes_and_redoes_the_step_through_its_own_fs() {
    if deps().is_none() {
        return;
    }
    let (seen, _ws) = client("undo", NO_EVAL);
    assert!(seen["afterFix"].as_str().unwrap().contains("return a + b"));
    assert_eq!(seen["undoStop"], "end_turn");
    assert_eq!(seen["redoStop"], "end_turn");
    let said = messages(&seen);
    assert_eq!(
        said[said.len() - 2..],
        ["undid step 1: calc.py", "redid step 1: calc.py"]
    );
    assert!(seen["afterUndo"].as_str().unwrap().contains("return a - b"));
    assert!(seen["final"].as_str().unwrap().contains("return a + b"));
    // The client offered fs/write_text_file: the fix, the undo and the redo all went
    // through it, so its buffers (and its own undo) saw each one.
    assert_eq!(seen["writes"].as_array().unwrap().len(), 3, "{seen}");
}

#[test]
fn the_mcp_servers_a_session_brings_are_the_runs_tools() {
    if deps().is_none() {
        return;
    }
    let (seen, _ws) = client("mcp", NO_EVAL);
    assert_eq!(seen["stop"], "end_turn");
    let updates = seen["updates"].as_array().unwrap();
    let call = updates
        .iter()
        .find(|u| {
            u["sessionUpdate"] == "tool_call"
                && u["title"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("mcp__fs__read_text_file")
        })
        .unwrap_or_else(|| panic!("no MCP tool call: {:?}", kinds(&seen)));
    let id = call["toolCallId"].clone();
    let result = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == id)
        .expect("its result");
    assert_eq!(result["status"], "completed", "{result}");
    assert!(
        result["content"].to_string().contains("return a - b"),
        "{result}"
    );
    assert!(seen["final"].as_str().unwrap().contains("return a + b"));
}

/// The example with a run made by `agent-ls run` (the fix, by the replay provider): the
/// workspace, the home it ran with, and the run's id.
fn recorded_run() -> (tempfile::TempDir, tempfile::TempDir, String) {
    let ws = support::example();
    let (home, id) = record(
        ws.path(),
        &[json!({"role": "coder", "content": FIX})],
        "fix the failing tests",
    );
    (ws, home, id)
}

/// Records a run of `goal` in `ws` with `agent-ls run --yes`, the model answering `script`;
/// its home and id.
fn record(ws: &std::path::Path, script: &[Value], goal: &str) -> (tempfile::TempDir, String) {
    std::fs::write(ws.join(".replay.jsonl"), support::replay_script(script)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = support::cli(&["run", goal, "--yes"], ws, home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "replay")
        .env("AGENT_LS_MODEL__REPLAY_FILE", ws.join(".replay.jsonl"))
        .env("AGENT_LS_AGENT__EVALUATE", "off")
        .output()
        .unwrap();
    let o: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let id = o["run_id"].as_str().unwrap().to_string();
    (home, id)
}

/// The session updates `session/load` of `id` in `ws` streams before its answer.
fn loaded(ws: &std::path::Path, home: &std::path::Path, id: &str) -> Vec<Value> {
    let cwd = ws.canonicalize().unwrap();
    let mut acp = RawAcp::start(home);
    let (answer, before) = acp.request(
        1,
        "session/load",
        json!({"sessionId": id, "cwd": cwd, "mcpServers": []}),
    );
    acp.close();
    assert!(answer.get("error").is_none(), "{answer}");
    before
        .into_iter()
        .map(|n| n["params"]["update"].clone())
        .collect()
}

#[test]
fn session_load_shows_a_recorded_run() {
    if deps().is_none() {
        return;
    }
    // A run made by `agent-ls run`, then loaded over ACP by its id.
    let (ws, _home, id) = recorded_run();
    let (seen, _ws) = client_in(ws, &format!("load:{id}"), NO_EVAL);
    let updates = seen["updates"].as_array().unwrap();
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "user_message_chunk"
                && u["content"]["text"] == "fix the failing tests"),
        "{seen}"
    );
    assert!(
        messages(&seen)
            .iter()
            .any(|m| m == &format!("run {id} ended: done")),
        "{seen}"
    );
    assert_eq!(
        kinds(&seen)
            .iter()
            .filter(|k| *k == "available_commands_update")
            .count(),
        1
    );
}

#[test]
fn a_planned_goal_streams_its_plan_with_each_tasks_status() {
    if deps().is_none() {
        return;
    }
    let (seen, _ws) = client("plan", NO_EVAL);
    assert_eq!(seen["stop"], "end_turn");
    let plans: Vec<Vec<(String, String)>> = seen["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == "plan")
        .map(|u| {
            u["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["content"].as_str().unwrap().to_string(),
                        e["status"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .collect();
    let status = |p: &Vec<(String, String)>| {
        p.iter()
            .map(|(_, s)| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    let seq: Vec<String> = plans.iter().map(status).collect();
    assert_eq!(
        seq,
        [
            "pending,pending",
            "in_progress,pending",
            "completed,in_progress",
            "completed,completed"
        ],
        "{plans:?}"
    );
    assert_eq!(plans[0][0].0, "make add return the sum");
    // The planner answers in JSON; the thoughts say the plan in a sentence instead.
    let thoughts: String = seen["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_thought_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(!thoughts.contains("plan_id"), "{thoughts}");
    assert!(
        thoughts.contains("The plan: make add return the sum; document add."),
        "{thoughts}"
    );
    let text = seen["final"].as_str().unwrap();
    assert!(
        text.contains("return a + b") && text.contains("The sum."),
        "{text}"
    );
}

/// The commands the session's `available_commands_update` notifications among `seen` offer.
pub(crate) fn offered_commands(seen: &[Value]) -> Vec<Value> {
    seen.iter()
        .map(|n| &n["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "available_commands_update")
        .flat_map(|u| {
            u["availableCommands"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// `agent-ls acp` spoken to line by line, as a host that is not the TypeScript SDK does.
pub(crate) struct RawAcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl RawAcp {
    pub(crate) fn start(home: &std::path::Path) -> RawAcp {
        RawAcp::start_with(home, &[])
    }

    /// `start`, with `env` set for the agent besides.
    pub(crate) fn start_with(home: &std::path::Path, env: &[(&str, &str)]) -> RawAcp {
        use std::process::Stdio;
        // Its stderr is kept in `home`, where a test reads what the user would see.
        let stderr = std::fs::File::create(home.join("acp.stderr")).unwrap();
        let mut child = support::agent_ls(&["acp"], home)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut acp = RawAcp {
            child,
            stdin,
            stdout,
        };
        acp.request(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        );
        acp
    }

    /// Sends request `id` and returns its answer; the notifications before it are kept in
    /// `seen`.
    pub(crate) fn request(&mut self, id: u64, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer(id)
    }

    /// Writes one message as it is (a request whose answer is read later, a notification).
    pub(crate) fn send(&mut self, message: Value) {
        use std::io::Write;
        writeln!(self.stdin, "{message}").unwrap();
    }

    /// Reads until the answer to request `id`; the messages before it are kept in `seen`.
    pub(crate) fn answer(&mut self, id: u64) -> (Value, Vec<Value>) {
        use std::io::{BufRead, Write};
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "acp ended");
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["id"] == json!(id) && value.get("method").is_none() {
                return (value, seen);
            }
            // A change's permission is granted, as the user would.
            if value["method"] == "session/request_permission" {
                let answer = json!({"jsonrpc": "2.0", "id": value["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}});
                writeln!(self.stdin, "{answer}").unwrap();
            }
            seen.push(value);
        }
    }

    /// Reads until a message `stop` accepts; every message read, that one last.
    pub(crate) fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        use std::io::BufRead;
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "acp ended");
            let value: Value = serde_json::from_str(&line).unwrap();
            let done = stop(&value);
            seen.push(value);
            if done {
                return seen;
            }
        }
    }

    /// Notifications that arrive within a short while (those that follow an answer).
    pub(crate) fn close(mut self) -> Vec<Value> {
        use std::io::BufRead;
        drop(self.stdin);
        let mut rest = Vec::new();
        let mut line = String::new();
        while self.stdout.read_line(&mut line).unwrap_or(0) > 0 {
            rest.extend(serde_json::from_str::<Value>(&line).ok());
            line.clear();
        }
        self.child.wait().unwrap();
        rest
    }
}

#[test]
fn a_session_loads_in_a_new_process_and_an_unknown_id_is_not_found() {
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    let cwd = ws.path().canonicalize().unwrap();
    let mut first = RawAcp::start(home.path());
    let (created, _) = first.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].as_str().unwrap().to_string();
    first.close();

    let mut second = RawAcp::start(home.path());
    let (loaded, _) = second.request(
        1,
        "session/load",
        json!({"sessionId": id, "cwd": cwd, "mcpServers": []}),
    );
    assert!(loaded.get("error").is_none(), "{loaded}");
    let (unknown, _) = second.request(
        2,
        "session/load",
        json!({"sessionId": "sess_00000000", "cwd": cwd, "mcpServers": []}),
    );
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");
    let (hostile, _) = second.request(
        3,
        "session/load",
        json!({"sessionId": "../../etc/passwd", "cwd": cwd, "mcpServers": []}),
    );
    assert_eq!(hostile["error"]["code"], -32002, "{hostile}");
    second.close();
    // A session not found is an ordinary answer: no SDK log line on the user's stderr.
    let stderr = std::fs::read_to_string(home.path().join("acp.stderr")).unwrap();
    assert!(!stderr.contains("WARN"), "{stderr}");
}

#[test]
fn session_load_streams_the_history_before_it_answers() {
    let (ws, home, id) = recorded_run();
    let cwd = ws.path().canonicalize().unwrap();
    let mut acp = RawAcp::start(home.path());
    let (loaded, before) = acp.request(
        1,
        "session/load",
        json!({"sessionId": id, "cwd": cwd, "mcpServers": []}),
    );
    acp.close();
    assert!(loaded.get("error").is_none(), "{loaded}");
    // ACP: the history is replayed as session/update notifications, then the answer.
    let said: Vec<&Value> = before.iter().map(|n| &n["params"]["update"]).collect();
    assert!(
        said.iter()
            .any(|u| u["sessionUpdate"] == "user_message_chunk"
                && u["content"]["text"] == "fix the failing tests"),
        "{before:?}"
    );
    assert!(
        said.iter()
            .any(|u| u["sessionUpdate"] == "agent_message_chunk"
                && u["content"]["text"] == format!("run {id} ended: done").as_str()),
        "{before:?}"
    );
}

#[test]
fn an_unknown_slash_command_lists_the_commands_and_starts_nothing() {
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    let cwd = ws.path().canonicalize().unwrap();
    let before = std::fs::read_to_string(ws.path().join("calc.py")).unwrap();
    let mut acp = RawAcp::start(home.path());
    let (created, _) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].clone();
    let (answer, seen) = acp.request(
        2,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "/bogus"}]}),
    );
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let said: String = seen
        .iter()
        .filter_map(|n| n["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(said.contains("unknown command /bogus"), "{seen:?}");
    assert!(said.contains("/undo"), "{said}");
    acp.close();
    assert_eq!(
        std::fs::read_to_string(ws.path().join("calc.py")).unwrap(),
        before
    );
    assert!(
        !ws.path().join(".agent-ls/runs").exists(),
        "no run was started"
    );
}

#[test]
fn an_untrusted_folders_ignored_settings_are_told_in_the_session_with_how_to_trust_it() {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[test]\ncommand = [\"python3\", \"-m\", \"pytest\"]\n",
    )
    .unwrap();
    // The user's own model: a replay that answers without a change, so the run ends at once.
    std::fs::write(
        ws.path().join(".replay.jsonl"),
        support::replay_script(&[json!({"role": "coder", "content": "I see no change to make."})]),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(
        home.path().join("agent-ls/config.toml"),
        format!(
            "[agent]\nevaluate = false\n[model]\nprovider = \"replay\"\nreplay_file = {:?}\n",
            ws.path().join(".replay.jsonl")
        ),
    )
    .unwrap();
    let cwd = ws.path().canonicalize().unwrap();
    let told = |notes: &[Value]| -> String {
        notes
            .iter()
            .filter(|n| n["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|n| n["params"]["update"]["content"]["text"].as_str())
            .filter(|t| t.contains("not trusted"))
            .collect()
    };
    let mut acp = RawAcp::start(home.path());
    let (created, _) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].clone();
    let (_, in_turn) = acp.request(
        2,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "fix the failing tests"}]}),
    );
    // Said when the session starts, and again in its first turn: some clients show only what
    // comes in a turn.
    let said = told(&in_turn);
    assert_eq!(said.matches("not trusted").count(), 2, "{in_turn:?}");
    assert!(said.contains("`test.command`"), "{said}");
    assert!(
        said.contains(&format!("agent-ls trust {}", cwd.display())),
        "{said}"
    );
    // The next turn does not say it again.
    let (_, second_turn) = acp.request(
        3,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "fix the failing tests"}]}),
    );
    assert_eq!(told(&second_turn), "", "{second_turn:?}");
    acp.close();
}

#[test]
fn a_folder_whose_settings_all_apply_says_nothing_of_trust() {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\n",
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = ws.path().canonicalize().unwrap();
    let mut acp = RawAcp::start(home.path());
    let (created, before) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    assert!(created.get("error").is_none(), "{created}");
    let mut notes = before;
    notes.extend(acp.close());
    assert!(
        !notes.iter().any(|n| n.to_string().contains("not trusted")),
        "{notes:?}"
    );
}

/// acpx, a headless ACP client from npm, driving `agent-ls acp` in `ws` as a user would:
/// `acpx --agent "agent-ls acp" ARGS`. acpx keeps its sessions under `home`, and the user's
/// agent-ls configuration is `home`'s too; the model is the replay in `ws`.
fn acpx(ws: &std::path::Path, home: &std::path::Path) -> Command {
    let deps = deps().expect("checked by the caller");
    let mut cmd = Command::new(deps.join("node_modules/.bin/acpx"));
    cmd.arg("--agent")
        .arg(format!("{} acp", support::binary().display()))
        // acpx keeps the agent for its next prompt; a second is enough between ours.
        .args(["--ttl", "2", "--approve-all"])
        .current_dir(ws)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env("AGENT_LS_MODEL__PROVIDER", "replay")
        .env("AGENT_LS_MODEL__REPLAY_FILE", ws.join(".replay.jsonl"))
        .stdin(std::process::Stdio::null());
    cmd
}

/// Runs acpx with `args`, which must succeed; its stdout and stderr together. Once more when
/// acpx's own queue owner (kept `--ttl` seconds after a prompt) was closing just as this call
/// reached it: acpx marks that error retryable, and on a busy machine the gap between two
/// prompts can end exactly at the owner's TTL.
fn acpx_ok(ws: &std::path::Path, home: &std::path::Path, args: &[&str]) -> String {
    acpx_ok_with(ws, home, &[], args)
}

/// `acpx_ok`, with `env` set for acpx and the agent it starts besides.
fn acpx_ok_with(
    ws: &std::path::Path,
    home: &std::path::Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> String {
    let mut said = String::new();
    for _ in 0..2 {
        let out = acpx(ws, home)
            .envs(env.iter().copied())
            .args(args)
            .output()
            .unwrap();
        said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            return said;
        }
        if !said.contains("Queue owner is shutting down") {
            break;
        }
    }
    panic!("acpx {args:?} failed:\n{said}");
}

/// A workspace copy of the example with the fix as the replayed answer, and acpx's home with
/// the user's agent-ls configuration `user_config`.
fn acpx_workspace(user_config: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".replay.jsonl"),
        support::replay_script(&[json!({"role": "coder", "content": FIX})]),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(home.path().join("agent-ls/config.toml"), user_config).unwrap();
    (ws, home)
}

#[test]
fn acpx_prompts_a_saved_session_undoes_with_undo_and_a_typo_changes_nothing() {
    if deps().is_none() {
        return;
    }
    let (ws, home) = acpx_workspace(NO_EVAL);
    let (ws, home) = (ws.path(), home.path());
    let calc = || std::fs::read_to_string(ws.join("calc.py")).unwrap();
    let created = acpx_ok(ws, home, &["sessions", "new"]);
    let id = created
        .split_whitespace()
        .find(|w| w.starts_with("sess_"))
        .unwrap_or_else(|| panic!("no session id: {created}"))
        .trim_end_matches(')')
        .to_string();
    // `prompt` resumes the saved session in a new process: agent-ls advertises
    // session/resume, which acpx prefers to session/load (it would start a new session only
    // on -32002).
    let fixed = acpx_ok(
        ws,
        home,
        &["--format", "json", "prompt", "fix the failing tests"],
    );
    assert!(
        fixed.contains("\"method\":\"session/resume\"") && fixed.contains(&id),
        "{fixed}"
    );
    assert!(
        fixed.contains("done: the tests pass after 1 iteration(s)"),
        "{fixed}"
    );
    // acpx offers fs/write_text_file: the change was written by it.
    assert!(
        fixed.contains("\"method\":\"fs/write_text_file\""),
        "{fixed}"
    );
    assert!(calc().contains("return a + b"));
    let runs = || {
        std::fs::read_dir(ws.join(".agent-ls/runs"))
            .unwrap()
            .count()
    };
    let runs_after_fix = runs();

    let typo = acpx_ok(ws, home, &["prompt", "/bogus"]);
    assert!(typo.contains("unknown command /bogus"), "{typo}");
    assert!(calc().contains("return a + b"), "/bogus changed calc.py");
    assert_eq!(runs(), runs_after_fix, "/bogus started a run");

    let undone = acpx_ok(ws, home, &["prompt", "/undo"]);
    assert!(undone.contains("undid step 1: calc.py"), "{undone}");
    assert!(calc().contains("return a - b"));
    acpx_ok(ws, home, &["sessions", "close"]);
}

#[test]
fn acpx_cancels_a_prompt_whose_tests_hang() {
    if deps().is_none() {
        return;
    }
    // The test command says its pid, then hangs.
    let (ws, home) = acpx_workspace(
        "[agent]\nevaluate = false\n[test]\ncommand = [\"sh\", \"-c\", \"echo $$ > test.pid; exec sleep 60\"]\nallowlist = [\"sh -c\"]\n",
    );
    let (ws, home) = (ws.path(), home.path());
    acpx_ok(ws, home, &["sessions", "new"]);
    let prompt = acpx(ws, home)
        .args(["prompt", "fix the failing tests"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid_file = ws.join("test.pid");
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n')) {
        assert!(
            started.elapsed() < support::DEADLINE,
            "the tests never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let test_pid = std::fs::read_to_string(&pid_file).unwrap();
    let cancel = acpx_ok(ws, home, &["cancel"]);
    assert!(cancel.contains("cancel requested"), "{cancel}");
    let out = prompt.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("[done] cancelled"), "{said}");
    assert!(
        !support::alive(&test_pid),
        "the hanging test outlived the cancel"
    );
    assert!(
        std::fs::read_to_string(ws.join("calc.py"))
            .unwrap()
            .contains("return a - b")
    );
    acpx_ok(ws, home, &["sessions", "close"]);
}

/// A copy of the example as a git repository with one commit, the model's answer
/// `FIX_AND_CREATE`.
fn example_repository() -> tempfile::TempDir {
    let ws = support::git::example_repository();
    let p = ws.path();
    std::fs::write(
        p.join(".replay.jsonl"),
        support::replay_script(&[json!({"role": "coder", "content": FIX_AND_CREATE})]),
    )
    .unwrap();
    ws
}

#[test]
fn an_acp_client_rolls_a_run_back_through_its_fs_refusing_an_unsaved_edit_unless_forced() {
    if deps().is_none() {
        return;
    }
    let ws = example_repository();
    let original = std::fs::read_to_string(ws.path().join("calc.py")).unwrap();
    let (seen, ws) = client_in(ws, "rollback", NO_EVAL);
    let commands = seen["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["sessionUpdate"] == "available_commands_update")
        .expect("the commands are advertised");
    assert!(
        commands["availableCommands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "rollback"),
        "{commands}"
    );
    let fixed = seen["afterFix"].as_str().unwrap();
    assert!(fixed.contains("return a + b"), "{seen}");
    let said = messages(&seen);
    // The unsaved edit in calc.py's buffer is a change since the run: refused, nothing
    // written.
    let refusal = &said[said.len() - 3];
    assert!(
        refusal.contains("nothing was rolled back")
            && refusal.contains("calc.py")
            && refusal.contains("/rollback force")
            && !refusal.contains("notes.py"),
        "{refusal}"
    );
    assert_eq!(seen["afterRefusal"].as_str().unwrap(), fixed);
    // Forced: calc.py written back through the client (its buffer replaced), notes.py
    // deleted on disk.
    let forced = &said[said.len() - 2];
    assert!(
        forced.starts_with("rolled back run ") && forced.ends_with(": calc.py, notes.py"),
        "{forced}"
    );
    // Again: the files hold the checkpoint's content, so nothing is refused or written.
    let again = &said[said.len() - 1];
    assert!(again.contains("rolled back already"), "{again}");
    assert_eq!(seen["againStop"], "end_turn");
    assert_eq!(
        seen["writes"].as_array().unwrap().len() as u64,
        seen["writesAfterForce"].as_u64().unwrap()
    );
    assert_eq!(seen["final"].as_str().unwrap(), original);
    assert!(!ws.path().join("notes.py").exists());
    assert_eq!(seen["bufferLeft"], false);
    let writes = seen["writes"].as_array().unwrap();
    assert!(
        writes
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .ends_with("/calc.py"),
        "{seen}"
    );
    assert_eq!(seen["refusedStop"], "end_turn");
    assert_eq!(seen["forcedStop"], "end_turn");
}

#[test]
fn acpx_rolls_a_run_back_with_rollback() {
    if deps().is_none() {
        return;
    }
    let ws = example_repository();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(home.path().join("agent-ls/config.toml"), NO_EVAL).unwrap();
    let (ws, home) = (ws.path(), home.path());
    let original = std::fs::read_to_string(ws.join("calc.py")).unwrap();
    acpx_ok(ws, home, &["sessions", "new"]);
    acpx_ok(ws, home, &["prompt", "fix the failing tests"]);
    assert!(ws.join("notes.py").exists());
    let rolled = acpx_ok(ws, home, &["prompt", "/rollback"]);
    assert!(
        rolled.contains("rolled back run ") && rolled.contains("calc.py, notes.py"),
        "{rolled}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("calc.py")).unwrap(),
        original
    );
    assert!(!ws.join("notes.py").exists());
    // /status shows the run as rolled back, not as it ended.
    let status = acpx_ok(ws, home, &["prompt", "/status"]);
    assert!(
        status.contains(" rolled back fix the failing tests"),
        "{status}"
    );
    assert!(!status.contains(" done fix the failing tests"), "{status}");
    acpx_ok(ws, home, &["sessions", "close"]);
}

/// `git ARGS` in `dir`: its output, trimmed.
fn git_out(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn an_acp_run_isolated_on_a_branch_or_in_a_worktree_says_where_it_works() {
    if deps().is_none() {
        return;
    }
    // "branch": the run's change is in the folder, on a new branch from HEAD.
    let ws = example_repository();
    let head = git_out(ws.path(), &["rev-parse", "HEAD"]);
    let config = format!("{NO_EVAL}[git]\nisolation = \"branch\"\n");
    let (seen, ws) = client_in(ws, "allow", &config);
    let said = messages(&seen).join("");
    assert!(
        said.contains("working on the new branch agent/fix-the-failing-tests"),
        "{said}"
    );
    assert!(seen["final"].as_str().unwrap().contains("return a + b"));
    assert_eq!(
        git_out(ws.path(), &["symbolic-ref", "HEAD"]),
        "refs/heads/agent/fix-the-failing-tests"
    );
    assert_eq!(git_out(ws.path(), &["rev-parse", "HEAD"]), head);

    // "worktree": the client writes into the worktree; the folder's own files stay.
    let ws = example_repository();
    let original = std::fs::read_to_string(ws.path().join("calc.py")).unwrap();
    let config = format!("{NO_EVAL}[git]\nisolation = \"worktree\"\n");
    let (seen, ws) = client_in(ws, "allow", &config);
    let said = messages(&seen).join("");
    let wt = ws
        .path()
        .canonicalize()
        .unwrap()
        .join(".agent-ls/worktrees/fix-the-failing-tests");
    assert!(
        said.contains(&format!("working in the worktree {}", wt.display())),
        "{said}"
    );
    assert_eq!(seen["final"].as_str().unwrap(), original);
    assert_eq!(git_out(ws.path(), &["status", "--porcelain"]), "");
    assert!(
        std::fs::read_to_string(wt.join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
    let writes = seen["writes"].as_array().unwrap();
    assert!(!writes.is_empty(), "{seen}");
    assert!(
        writes
            .iter()
            .all(|w| w.as_str().unwrap().starts_with(&wt.display().to_string())),
        "{seen}"
    );
}

#[test]
fn the_test_command_reproduces_the_bug_with_a_test_before_the_fix() {
    // The example's `add` subtracts; `/test` has the tester show it before the coder fixes it.
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    let test = "import unittest\n\nfrom calc import add\n\n\nclass AddTests(unittest.TestCase):\n    def test_add_sums(self):\n        self.assertEqual(add(2, 3), 5)\n";
    let tester = json!({"tests": [{"path": "test_add.py", "name": "test_add_sums",
        "kind": "example", "reason": "add must sum", "expect": "AssertionError: -1 != 5",
        "content": test}]});
    let script = ws.path().join(".replay.jsonl");
    std::fs::write(
        &script,
        support::replay_script(&[
            json!({"role": "tester", "content": tester.to_string()}),
            json!({"role": "coder", "content": FIX}),
        ]),
    )
    .unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(
        home.path().join("agent-ls/config.toml"),
        format!(
            "[model]\nprovider = \"replay\"\nreplay_file = {:?}\n\n[agent]\nevaluate = false\nreview = \"off\"\n",
            script.display().to_string()
        ),
    )
    .unwrap();
    let cwd = ws.path().canonicalize().unwrap();
    let mut acp = RawAcp::start(home.path());
    let (created, seen) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].clone();
    let (answer, mut seen) = {
        let (a, s) = acp.request(
            2,
            "session/prompt",
            json!({"sessionId": id, "prompt": [{"type": "text", "text": "/test add returns the difference"}]}),
        );
        (a, [seen, s].concat())
    };
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    seen.extend(acp.close());
    let said: String = seen
        .iter()
        .filter_map(|n| n["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(said.contains("fails on the code before the fix"), "{said}");
    // The session lists the command; the test came first, then the fix.
    assert!(
        seen.iter()
            .any(|n| n["params"]["update"]["availableCommands"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["name"] == "test"))),
        "{seen:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("test_add.py")).unwrap(),
        test
    );
    assert!(
        std::fs::read_to_string(ws.path().join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
}

#[test]
fn docs_acp_names_every_command_the_session_advertises() {
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    let cwd = ws.path().canonicalize().unwrap();
    let mut acp = RawAcp::start(home.path());
    let (_, mut after) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    after.extend(acp.close());
    let advertised: Vec<String> = offered_commands(&after)
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert!(advertised.len() >= 7, "{after:?}");
    let doc = std::fs::read_to_string(support::repo("docs/acp.md")).unwrap();
    let listed = doc
        .split("`available_commands_update`:")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .unwrap_or("");
    for name in &advertised {
        assert!(
            listed.contains(&format!("`{name}`")),
            "docs/acp.md does not list {name}: {listed}"
        );
    }
}

/// The session updates among `seen` of kind `kind`.
fn updates<'a>(seen: &'a [Value], kind: &str) -> Vec<&'a Value> {
    seen.iter()
        .map(|n| &n["params"]["update"])
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

/// The option `id` among a session's `configOptions`.
fn option<'a>(options: &'a Value, id: &str) -> &'a Value {
    options
        .as_array()
        .and_then(|o| o.iter().find(|o| o["id"] == id))
        .unwrap_or_else(|| panic!("no option {id} in {options}"))
}

/// The values a select option offers.
fn values(option: &Value) -> Vec<String> {
    option["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn sessions_are_advertised_listed_resumed_and_closed_across_processes() {
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(
        home.path().join("agent-ls/config.toml"),
        "[agents.docs]\ndescription = \"writes the docs\"\n",
    )
    .unwrap();
    let cwd = ws.path().canonicalize().unwrap();
    let mut first = RawAcp::start(home.path());
    let (init, _) = first.request(
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let caps = &init["result"]["agentCapabilities"];
    assert_eq!(caps["loadSession"], true, "{init}");
    for method in ["list", "resume", "close"] {
        assert!(caps["sessionCapabilities"][method].is_object(), "{init}");
    }
    let (created, _) = first.request(2, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].as_str().unwrap().to_string();
    let options = &created["result"]["configOptions"];
    let mode = option(options, "mode");
    assert_eq!(mode["category"], "mode");
    assert_eq!(mode["currentValue"], "build");
    assert_eq!(values(mode), ["build", "plan", "review", "docs"]);
    assert_eq!(option(options, "model")["category"], "model");
    assert_eq!(
        created["result"]["modes"]["currentModeId"], "build",
        "{created}"
    );
    let (listed, _) = first.request(3, "session/list", json!({"cwd": cwd}));
    let sessions = listed["result"]["sessions"].as_array().unwrap().clone();
    assert!(
        sessions.iter().any(|s| s["sessionId"] == id.as_str()),
        "{listed}"
    );
    assert!(sessions.iter().all(|s| s["cwd"] == json!(cwd)), "{listed}");
    // A cursor session/list never gave, and params of the wrong shape, are invalid params;
    // the server goes on serving.
    let (bad, _) = first.request(4, "session/list", json!({"cursor": "later"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let (bad, _) = first.request(5, "session/set_mode", json!({"sessionId": 7}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let (closed, _) = first.request(6, "session/close", json!({"sessionId": id}));
    assert_eq!(closed["result"], json!({}), "{closed}");
    let (again, _) = first.request(7, "session/close", json!({"sessionId": id}));
    assert_eq!(again["error"]["code"], -32602, "{again}");
    first.close();

    // A new process lists it from disk and resumes it, without replaying any history.
    let mut second = RawAcp::start(home.path());
    let (listed, _) = second.request(1, "session/list", json!({"cwd": cwd}));
    assert!(
        listed["result"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["sessionId"] == id.as_str() && s["updatedAt"].is_string()),
        "{listed}"
    );
    let (resumed, before) = second.request(
        2,
        "session/resume",
        json!({"sessionId": id, "cwd": cwd, "mcpServers": []}),
    );
    assert_eq!(
        option(&resumed["result"]["configOptions"], "mode")["currentValue"],
        "build",
        "{resumed}"
    );
    assert!(
        updates(&before, "user_message_chunk").is_empty(),
        "{before:?}"
    );
    let (unknown, _) = second.request(
        3,
        "session/resume",
        json!({"sessionId": "sess_00000000", "cwd": cwd}),
    );
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");
    second.close();
}

#[test]
fn the_mode_and_model_chosen_are_what_the_next_prompt_runs_with_and_its_usage_is_told() {
    use support::model_server::{ModelServer, openai_text};
    let server = ModelServer::answering(|_| openai_text(&[FIX]));
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(
        home.path().join("agent-ls/config.toml"),
        format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nname = \"stub-a\"\n\
             [prices.stub-b]\ninput_per_mtok = 1000.0\noutput_per_mtok = 2000.0\n\
             [agent]\nevaluate = false\nreview = \"off\"\n",
            server.url
        ),
    )
    .unwrap();
    let cwd = ws.path().canonicalize().unwrap();
    let mut acp = RawAcp::start_with(home.path(), &[("OPENAI_API_KEY", "test-key")]);
    let (created, _) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].as_str().unwrap().to_string();
    let model = option(&created["result"]["configOptions"], "model");
    assert_eq!(model["currentValue"], "stub-a", "{created}");
    assert_eq!(values(model), ["stub-a", "stub-b"]);
    let (set, _) = acp.request(
        2,
        "session/set_config_option",
        json!({"sessionId": id, "configId": "model", "value": "stub-b"}),
    );
    assert_eq!(
        option(&set["result"]["configOptions"], "model")["currentValue"],
        "stub-b",
        "{set}"
    );
    let (moded, _) = acp.request(
        3,
        "session/set_mode",
        json!({"sessionId": id, "modeId": "review"}),
    );
    assert_eq!(moded["result"], json!({}), "{moded}");
    let (unknown, _) = acp.request(
        4,
        "session/set_config_option",
        json!({"sessionId": id, "configId": "mode", "value": "ship"}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(
        unknown["error"]["data"]
            .as_str()
            .unwrap()
            .contains("build, plan, review"),
        "{unknown}"
    );
    let (unknown, _) = acp.request(
        5,
        "session/set_model",
        json!({"sessionId": id, "modelId": "stub-b"}),
    );
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let (answer, seen) = acp.request(
        6,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "review calc.py"}]}),
    );
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let sent = server.requests();
    assert!(!sent.is_empty());
    assert!(sent.iter().all(|r| r.body["model"] == "stub-b"), "{sent:?}");
    // The review agent ran it: the journal names it.
    let journal = std::fs::read_dir(ws.path().join(".agent-ls/runs"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect::<String>();
    assert!(journal.contains(r#""agent":"review""#), "{journal}");
    let usage = updates(&seen, "usage_update");
    let last = usage
        .last()
        .unwrap_or_else(|| panic!("no usage_update: {seen:?}"));
    assert!(last["used"].as_u64().unwrap() > 0, "{last}");
    assert_eq!(last["size"], 32000, "{last}");
    assert_eq!(last["cost"]["currency"], "USD", "{last}");
    assert!(last["cost"]["amount"].as_f64().unwrap() > 0.0, "{last}");
    let info = updates(&seen, "session_info_update");
    assert!(
        info.iter()
            .any(|u| u["title"] == "review calc.py" && u["updatedAt"].is_string()),
        "{seen:?}"
    );
    acp.close();

    // Loaded in a new process: the conversation again, and the choices kept.
    let mut again = RawAcp::start_with(home.path(), &[("OPENAI_API_KEY", "test-key")]);
    let (loaded, before) = again.request(
        1,
        "session/load",
        json!({"sessionId": id, "cwd": cwd, "mcpServers": []}),
    );
    again.close();
    assert_eq!(
        loaded["result"]["modes"]["currentModeId"], "review",
        "{loaded}"
    );
    assert_eq!(
        option(&loaded["result"]["configOptions"], "model")["currentValue"],
        "stub-b"
    );
    let goals = updates(&before, "user_message_chunk");
    assert_eq!(goals.len(), 1, "{before:?}");
    assert_eq!(goals[0]["content"]["text"], "review calc.py");
    assert!(
        !updates(&before, "agent_message_chunk").is_empty(),
        "{before:?}"
    );
}

#[test]
fn cancel_request_of_a_pending_prompt_answers_it_cancelled_and_stops_the_run() {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".replay.jsonl"),
        support::replay_script(&[json!({"role": "coder", "content": FIX})]),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(
        home.path().join("agent-ls/config.toml"),
        "[agent]\nevaluate = false\n[test]\ncommand = [\"sh\", \"-c\", \"echo $$ > test.pid; exec sleep 60\"]\nallowlist = [\"sh -c\"]\n",
    )
    .unwrap();
    let cwd = ws.path().canonicalize().unwrap();
    let replay = ws.path().join(".replay.jsonl").display().to_string();
    let mut acp = RawAcp::start_with(
        home.path(),
        &[
            ("AGENT_LS_MODEL__PROVIDER", "replay"),
            ("AGENT_LS_MODEL__REPLAY_FILE", &replay),
        ],
    );
    let (created, _) = acp.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let id = created["result"]["sessionId"].as_str().unwrap().to_string();
    acp.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params":
        {"sessionId": id, "prompt": [{"type": "text", "text": "fix the failing tests"}]}}),
    );
    acp.until(|m| {
        m["params"]["update"]["sessionUpdate"] == "tool_call"
            && m["params"]["update"]["kind"] == "execute"
    });
    let pid_file = ws.path().join("test.pid");
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n')) {
        assert!(
            started.elapsed() < support::DEADLINE,
            "the tests never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let test_pid = std::fs::read_to_string(&pid_file).unwrap();
    let asked = std::time::Instant::now();
    acp.send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}}));
    let (answer, _) = acp.answer(2);
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    // The server goes on serving, and the run's test process is gone.
    let (listed, _) = acp.request(3, "session/list", json!({"cwd": cwd}));
    assert!(listed["result"]["sessions"].is_array(), "{listed}");
    acp.close();
    assert!(
        !support::alive(&test_pid),
        "the hanging test outlived the cancel"
    );
}

#[test]
fn session_load_replays_the_runs_tool_calls_change_and_test_runs_with_their_final_status() {
    let ws = support::example();
    let read = json!({"role": "coder", "content": "", "tool_calls": [
        {"name": "read_file", "arguments": {"path": "calc.py"}}
    ]});
    let (home, id) = record(
        ws.path(),
        &[read, json!({"role": "coder", "content": FIX})],
        "fix the failing tests",
    );
    let said = loaded(ws.path(), home.path(), &id);
    let kind = |k: &str| {
        said.iter()
            .filter(|u| u["sessionUpdate"] == k)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        kind("user_message_chunk")[0]["content"]["text"],
        "fix the failing tests"
    );
    // Each tool call, then its final status under the same id.
    let final_status = |call: &Value| {
        said.iter()
            .filter(|u| u["sessionUpdate"] == "tool_call_update")
            .filter(|u| u["toolCallId"] == call["toolCallId"])
            .filter_map(|u| u["status"].as_str())
            .next_back()
            .or(call["status"].as_str())
            .unwrap_or("pending")
            .to_string()
    };
    let calls = kind("tool_call");
    let read = calls
        .iter()
        .find(|c| c["title"] == "read_file calc.py")
        .unwrap_or_else(|| panic!("{said:?}"));
    assert_eq!(final_status(read), "completed");
    let edit = calls
        .iter()
        .find(|c| c["kind"] == "edit")
        .unwrap_or_else(|| panic!("{said:?}"));
    assert!(
        edit["content"].to_string().contains("return a + b"),
        "{edit}"
    );
    assert_eq!(final_status(edit), "completed", "{said:?}");
    let tests: Vec<String> = calls
        .iter()
        .filter(|c| c["kind"] == "execute")
        .map(|c| final_status(c))
        .collect();
    // The baseline fails, the run after the fix passes.
    assert_eq!(
        tests.first().map(String::as_str),
        Some("failed"),
        "{said:?}"
    );
    assert_eq!(
        tests.last().map(String::as_str),
        Some("completed"),
        "{said:?}"
    );
    let messages: Vec<&str> = kind("agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(
        messages.iter().any(|m| m.starts_with("done")),
        "{messages:?}"
    );
    assert_eq!(
        messages.last(),
        Some(&format!("run {id} ended: done").as_str())
    );
}

#[test]
fn session_load_replays_a_planned_runs_plan_completed() {
    let ws = support::example();
    let (home, id) = record(
        ws.path(),
        &[
            json!({"role": "planner", "content": r#"{"plan_id": "p1", "tasks": [{"id": "T1", "title": "make add return the sum"}, {"id": "T2", "title": "document add"}]}"#}),
            json!({"role": "coder", "content": FIX}),
            json!({"role": "coder", "content": "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n=======\ndef add(a, b):\n    \"\"\"The sum.\"\"\"\n>>>>>>> REPLACE\n"}),
        ],
        "make add return the sum, then document add",
    );
    let said = loaded(ws.path(), home.path(), &id);
    let plans: Vec<&Value> = said
        .iter()
        .filter(|u| u["sessionUpdate"] == "plan")
        .collect();
    let last = plans.last().unwrap_or_else(|| panic!("no plan: {said:?}"));
    let entries: Vec<(&str, &str)> = last["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["content"].as_str().unwrap(),
                e["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("make add return the sum", "completed"),
            ("document add", "completed")
        ],
        "{said:?}"
    );
}

#[test]
fn a_rolled_back_run_loads_as_rolled_back() {
    let ws = example_repository();
    let (home, id) = record(
        ws.path(),
        &[json!({"role": "coder", "content": FIX_AND_CREATE})],
        "fix the failing tests",
    );
    let out = support::in_workspace(&["rollback"], ws.path(), home.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = loaded(ws.path(), home.path(), &id);
    let messages: Vec<&str> = said
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(
        messages.contains(&format!("run {id} ended: rolled back").as_str()),
        "{messages:?}"
    );
    assert!(
        !messages.iter().any(|m| m.ends_with("ended: done")),
        "{messages:?}"
    );
}

#[test]
fn acpx_sets_the_model_and_the_mode_the_next_prompt_runs_with() {
    if deps().is_none() {
        return;
    }
    use support::model_server::{ModelServer, openai_text};
    let server = ModelServer::answering(|_| openai_text(&[FIX]));
    let (ws, home) = acpx_workspace(&format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nname = \"stub-a\"\napi_key = \"test-key\"\n\
         [prices.stub-b]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n\
         [agent]\nevaluate = false\nreview = \"off\"\n",
        server.url
    ));
    let (ws, home) = (ws.path(), home.path());
    // The stub, not the replay acpx's agent is otherwise given.
    let openai = [("AGENT_LS_MODEL__PROVIDER", "openai")];
    let acpx_ok = |args: &[&str]| acpx_ok_with(ws, home, &openai, args);
    acpx_ok(&["sessions", "new"]);
    acpx_ok(&["set", "model", "stub-b"]);
    acpx_ok(&["set-mode", "review"]);
    let refused = acpx(ws, home)
        .envs(openai)
        .args(["set-mode", "ship"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr).to_string()
        + &String::from_utf8_lossy(&refused.stdout);
    assert!(!refused.status.success(), "{said}");
    // acpx shows the code, not the error's data (the raw test above reads that).
    assert!(said.contains("-32602"), "{said}");
    acpx_ok(&["prompt", "review calc.py"]);
    let sent = server.requests();
    assert!(!sent.is_empty());
    assert!(sent.iter().all(|r| r.body["model"] == "stub-b"), "{sent:?}");
    let journal = std::fs::read_dir(ws.join(".agent-ls/runs"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect::<String>();
    assert!(journal.contains(r#""agent":"review""#), "{journal}");
    assert!(
        std::fs::read_to_string(ws.join("calc.py"))
            .unwrap()
            .contains("return a - b"),
        "the review agent changed calc.py"
    );
    acpx_ok(&["sessions", "close"]);
}

/// acpx's own session commands against agent-ls as a new user runs them: `sessions list` asks
/// the agent (`session/list`) and finds the session a prompt ran in, with its title, also
/// after acpx forgot its own records; `set-mode plan` is taken; `sessions close` ends it, and a
/// new acpx process loads the old session by its id.
#[test]
fn acpx_lists_closes_and_loads_agent_ls_sessions() {
    if deps().is_none() {
        return;
    }
    let (ws, home) = acpx_workspace(NO_EVAL);
    let (ws, home) = (ws.path(), home.path());
    acpx_ok(ws, home, &["sessions", "new"]);
    acpx_ok(ws, home, &["set-mode", "plan"]);
    acpx_ok(ws, home, &["set-mode", "build"]);
    acpx_ok(ws, home, &["prompt", "fix the failing tests"]);
    let listed = acpx_ok(ws, home, &["sessions", "list"]);
    assert!(listed.contains("fix the failing tests"), "{listed}");
    // One session a line: its id, title, folder and time, tab-separated.
    let id = listed
        .lines()
        .find(|l| l.contains("fix the failing tests"))
        .and_then(|l| l.split('\t').next())
        .unwrap_or_else(|| panic!("no session id in:\n{listed}"))
        .to_string();
    acpx_ok(ws, home, &["sessions", "close"]);
    // A fresh acpx home: acpx has no record of its own, the agent still has the session.
    let fresh = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(fresh.path().join("agent-ls")).unwrap();
    std::fs::copy(
        home.join("agent-ls/config.toml"),
        fresh.path().join("agent-ls/config.toml"),
    )
    .unwrap();
    let again = acpx_ok(ws, fresh.path(), &["sessions", "list"]);
    assert!(again.contains(&id), "{again}");
    let said = loaded(ws, home, &id);
    assert!(
        said.iter()
            .any(|u| u.to_string().contains("fix the failing tests")),
        "{said:?}"
    );
}
