//! MCP through the real binary: `agent-ls mcp` driven by the official TypeScript SDK
//! (`@modelcontextprotocol/sdk`), and the loop calling a real MCP server from npm
//! (`@modelcontextprotocol/server-filesystem`) through its MCP client. scripts/test installs
//! tests/mcp's packages and sets AGENT_LS_REQUIRE_PROTOCOL_TESTS, so CI always runs these.

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use support::git::git;

#[test]
fn the_official_sdk_uses_agent_ls_tools_and_its_edit_is_undone_by_agent_ls_undo() {
    let Some(deps) = support::protocol_deps() else {
        return;
    };
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("node")
        .arg(deps.join("mcp-client.mjs"))
        .arg(support::binary())
        .arg(ws.path())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{said}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {said}"));
    assert_eq!(r["server"]["name"], "agent-ls");
    assert_eq!(
        r["tools"],
        serde_json::json!([
            "read_file",
            "outline",
            "read_symbol",
            "list_files",
            "find_files",
            "grep",
            "get_diagnostics",
            "run_tests",
            "apply_edit",
            "checkpoint",
            "rollback",
            "run"
        ])
    );
    let text = |k: &str| {
        r[k]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(text("grep"), "calc.py:4: def add(a, b):");
    assert!(text("read").starts_with("     4| def add(a, b):\n     5|     return a - b\n"));
    assert_eq!(r["outside"]["isError"], true);
    // run_tests answers with the parsed failures as structured content.
    let tests = &r["tests"]["structuredContent"];
    assert_eq!(tests["state"], "failed");
    assert_eq!(
        tests["failures"][0]["test_id"],
        "test_calc.CalcTests.test_add"
    );
    assert_eq!(tests["failures"][0]["file"], "test_calc.py");
    assert_eq!(tests["failures"][0]["line"], 8);
    assert!(text("diagnostics").contains("test_calc.py:8: [test_calc.CalcTests.test_add]"));
    // A dry run writes nothing; the edit (indented otherwise) is located and written as a step.
    assert_eq!(r["dry"]["structuredContent"]["written"], false);
    assert_eq!(r["edit"]["structuredContent"]["step"], 1);
    assert_eq!(r["refused"]["isError"], true);
    assert!(text("refused").contains("protected"), "{}", text("refused"));
    assert!(!ws.path().join(".git/hooks/pre-commit").exists());
    assert_eq!(r["after"]["structuredContent"]["state"], "passed");
    let calc = std::fs::read_to_string(ws.path().join("calc.py")).unwrap();
    assert!(calc.contains("    return a + b\n"), "{calc}");
    // `agent-ls undo` reverts the MCP client's step.
    let undo = support::in_workspace(&["undo"], ws.path(), home.path())
        .output()
        .unwrap();
    assert!(
        undo.status.success(),
        "{}",
        String::from_utf8_lossy(&undo.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&undo.stdout),
        "undid step 1: calc.py\n"
    );
    let calc = std::fs::read_to_string(ws.path().join("calc.py")).unwrap();
    assert!(calc.contains("    return a - b\n"), "{calc}");
    let again = support::in_workspace(&["undo"], ws.path(), home.path())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
}

/// `agent-ls run` with `home` as the user's folders and the model at `url`, an
/// OpenAI-compatible test server.
fn run_agent(ws: &Path, home: &Path, url: &str) -> std::process::Output {
    support::cli(&["run", "fix the failing tests", "--yes"], ws, home)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{url}/v1"))
        .env("OPENAI_API_KEY", "test-key")
        .output()
        .unwrap()
}

const FIX: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";

#[test]
fn the_loop_calls_the_tools_of_a_real_mcp_server_from_npm() {
    use support::model_server::{ModelServer, openai_text, openai_tool_call};
    let Some(deps) = support::protocol_deps() else {
        return;
    };
    let ws = support::example();
    let root = ws.path().canonicalize().unwrap();
    let home = tempfile::tempdir().unwrap();
    // The user's file names the server (a workspace file would need the folder trusted).
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(
        home.path().join("agent-ls/config.toml"),
        format!(
            "[agent]\nevaluate = false\n[mcp.servers.fs]\ncommand = \"node\"\nargs = [{:?}, {:?}]\n",
            deps.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
                .display()
                .to_string(),
            root.display().to_string()
        ),
    )
    .unwrap();
    let path = root.join("calc.py").display().to_string();
    let server = ModelServer::start(vec![
        openai_tool_call(
            "mcp__fs__read_text_file",
            &[&serde_json::json!({"path": path}).to_string()],
        ),
        openai_text(&[FIX]),
    ]);
    let out = run_agent(ws.path(), home.path(), &server.url);
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {said}"));
    assert_eq!(o["status"], "done", "{o} {said}");
    let requests = server.requests();
    let tools: Vec<String> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(String::from))
        .collect();
    assert!(tools.contains(&"grep".to_string()), "{tools:?}");
    assert!(
        tools.contains(&"mcp__fs__read_text_file".to_string()),
        "{tools:?}"
    );
    assert!(
        tools.contains(&"mcp__fs__list_directory".to_string()),
        "{tools:?}"
    );
    let result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(result["role"], "tool");
    assert!(
        result["content"].as_str().unwrap().contains("return a - b"),
        "{result}"
    );
}

#[test]
fn a_crashing_mcp_server_is_restarted_once_then_its_tools_are_withdrawn() {
    use support::model_server::{ModelServer, openai_text, openai_tool_call};
    let Some(deps) = support::protocol_deps() else {
        return;
    };
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
    std::fs::write(
        home.path().join("agent-ls/config.toml"),
        format!(
            "[agent]\nevaluate = false\n[mcp.servers.crash]\ncommand = \"node\"\nargs = [{:?}]\n[mcp.servers.missing]\ncommand = \"/nonexistent/mcp-server\"\n",
            deps.join("crashing-server.mjs").display().to_string()
        ),
    )
    .unwrap();
    let server = ModelServer::start(vec![
        openai_tool_call("mcp__crash__boom", &["{}"]),
        openai_tool_call("grep", &[r#"{"pattern": "def add"}"#]),
        openai_text(&[FIX]),
    ]);
    let out = run_agent(ws.path(), home.path(), &server.url);
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {said}"));
    // The built-in tools kept working and the run ended well.
    assert_eq!(o["status"], "done", "{o} {said}");
    assert!(said.contains("`missing` is not available"), "{said}");
    // Restarted once after the first crash; the second withdrew its tools.
    assert!(said.contains("crashed again"), "{said}");
    let requests = server.requests();
    let boom = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        boom["content"].as_str().unwrap().contains("withdrawn"),
        "{boom}"
    );
    // After the withdrawal its tools are no longer offered.
    let offered: Vec<String> = requests[2].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(String::from))
        .collect();
    assert!(
        !offered.iter().any(|t| t.starts_with("mcp__crash")),
        "{offered:?}"
    );
    assert!(
        std::fs::read_to_string(ws.path().join("calc.py"))
            .unwrap()
            .contains("a + b")
    );
}

/// `agent-ls mcp` spoken to line by line, as hosts that are not the TypeScript SDK do; a
/// request that is a JSON string is sent as its raw text.
fn raw_session(ws: &std::path::Path, requests: &[Value]) -> Vec<Value> {
    use std::io::{BufRead, Write};
    let home = tempfile::tempdir().unwrap();
    let mut mcp = support::in_workspace(&["mcp"], ws, home.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = mcp.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(mcp.stdout.take().unwrap());
    let mut answers = Vec::new();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    for (i, request) in std::iter::once(&init).chain(requests).enumerate() {
        // A string is a line sent as it is (one that is not JSON).
        match request.as_str() {
            Some(raw) => writeln!(stdin, "{raw}").unwrap(),
            None => writeln!(stdin, "{request}").unwrap(),
        }
        if i == 0 {
            writeln!(
                stdin,
                "{}",
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
            )
            .unwrap();
        }
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        answers.push(serde_json::from_str(&line).unwrap());
    }
    drop(stdin);
    mcp.wait().unwrap();
    answers.remove(0);
    answers
}

#[test]
fn every_tool_is_annotated_and_the_structured_ones_have_an_output_schema() {
    let ws = support::example();
    let answers = raw_session(
        ws.path(),
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "apply_edit", "arguments": {}}}),
        ],
    );
    let tools = answers[0]["result"]["tools"].as_array().unwrap().clone();
    assert!(tools.len() >= 7, "{tools:?}");
    for t in &tools {
        let a = &t["annotations"];
        assert!(a["readOnlyHint"].is_boolean(), "{t}");
        assert!(a["idempotentHint"].is_boolean(), "{t}");
        assert!(a["destructiveHint"].is_boolean(), "{t}");
    }
    let named = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap().clone();
    assert_eq!(named("read_file")["annotations"]["readOnlyHint"], true);
    assert_eq!(named("apply_edit")["annotations"]["readOnlyHint"], false);
    assert_eq!(named("apply_edit")["annotations"]["destructiveHint"], true);
    for structured in ["run_tests", "apply_edit"] {
        assert_eq!(named(structured)["outputSchema"]["type"], "object");
    }
    let missing = &answers[1]["result"];
    assert_eq!(missing["isError"], true, "{missing}");
    assert!(
        missing["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("`edits` is required")),
        "{missing}"
    );
}

#[test]
fn a_line_that_is_not_json_gets_a_parse_error_and_the_server_keeps_serving() {
    let ws = support::example();
    let answers = raw_session(
        ws.path(),
        &[
            json!("this is not json"),
            json!("{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": "),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ],
    );
    for bad in &answers[..2] {
        assert_eq!(bad["error"]["code"], -32700, "{bad}");
        // JSON-RPC: the id could not be read, so it is null (present, not left out).
        assert!(bad.get("id").is_some_and(Value::is_null), "{bad}");
    }
    assert!(
        answers[2]["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{}",
        answers[2]
    );
}

/// The official MCP Inspector's CLI (`mcp-inspector --cli`) against `agent-ls mcp` in `ws`,
/// each call a fresh server as the Inspector starts it; the answer's JSON, and its stderr.
fn inspector(deps: &Path, ws: &Path, home: &Path, args: &[&str]) -> (Value, String) {
    let out = std::process::Command::new(deps.join("node_modules/.bin/mcp-inspector"))
        .arg("--cli")
        .arg(support::binary())
        .args(["mcp", "--workspace"])
        .arg(ws)
        .args(args)
        .current_dir(ws)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "inspector {args:?}: {stderr}");
    let answer = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (answer, stderr)
}

/// The twelve tools, each with an object schema and the three hints a client shows.
fn every_tool_is_listed_with_its_schema_and_annotations(listed: &Value) {
    let tools = listed["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "apply_edit",
            "checkpoint",
            "find_files",
            "get_diagnostics",
            "grep",
            "list_files",
            "outline",
            "read_file",
            "read_symbol",
            "rollback",
            "run",
            "run_tests"
        ]
    );
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        for hint in ["readOnlyHint", "destructiveHint", "idempotentHint"] {
            assert!(t["annotations"][hint].is_boolean(), "{t}");
        }
    }
}

#[test]
fn the_mcp_inspector_lists_the_tools_with_schemas_and_annotations_and_calls_each() {
    let Some(deps) = support::protocol_deps() else {
        return;
    };
    let ws = support::example();
    let home = tempfile::tempdir().unwrap();
    let (ws, home) = (ws.path(), home.path());
    // --strict: the Inspector also checks that the schemas are portable to every client.
    let (listed, warned) = inspector(&deps, ws, home, &["--method", "tools/list", "--strict"]);
    assert!(!warned.contains("Warning"), "{warned}");
    every_tool_is_listed_with_its_schema_and_annotations(&listed);
    let fix = "edits=calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let call = |tool: &str, args: &[&str]| -> Value {
        let mut argv = vec!["--method", "tools/call", "--tool-name", tool];
        for a in args {
            argv.extend(["--tool-arg", a]);
        }
        let (answer, _) = inspector(&deps, ws, home, &argv);
        assert_eq!(answer["isError"], false, "{tool}: {answer}");
        answer
    };
    let text = |answer: &Value| answer["content"][0]["text"].as_str().unwrap().to_string();
    assert!(text(&call("read_file", &["path=calc.py"])).contains("return a - b"));
    assert!(text(&call("list_files", &[])).contains("test_calc.py"));
    assert!(text(&call("find_files", &["glob=*.py"])).contains("calc.py"));
    assert!(text(&call("grep", &["pattern=def add"])).contains("calc.py:4"));
    let failing = call("run_tests", &[]);
    assert_eq!(failing["structuredContent"]["state"], "failed", "{failing}");
    assert!(
        failing["structuredContent"]["failures"]
            .to_string()
            .contains("test_add"),
        "{failing}"
    );
    // Each Inspector call is a new server, which knows of no run yet.
    assert!(!text(&call("get_diagnostics", &[])).is_empty());
    let dry = call("apply_edit", &[fix, "dry_run=true"]);
    assert_eq!(dry["structuredContent"]["written"], false, "{dry}");
    let applied = call("apply_edit", &[fix]);
    assert_eq!(applied["structuredContent"]["step"], 1, "{applied}");
    let passing = call("run_tests", &[]);
    assert_eq!(passing["structuredContent"]["state"], "passed", "{passing}");
    // The git tools, in a repository: a checkpoint, a file created, a rollback to it (a
    // new server each time, so the checkpoint is named).
    git(ws, &["init", "-q"]);
    let cp = call("checkpoint", &[]);
    let id = cp["structuredContent"]["checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(ws.join("later.py"), "X = 1\n").unwrap();
    let back = call("rollback", &[&format!("run={id}")]);
    assert_eq!(
        back["structuredContent"]["files"],
        json!(["later.py"]),
        "{back}"
    );
    assert!(!ws.join("later.py").exists());
}

#[test]
fn the_official_sdk_takes_a_checkpoint_and_rolls_the_workspace_back_to_it() {
    let Some(deps) = support::protocol_deps() else {
        return;
    };
    let ws = support::git::example_repository();
    let p = ws.path();
    // An uncommitted edit of the user's: the checkpoint keeps it, the rollback restores it.
    let calc = std::fs::read_to_string(p.join("calc.py")).unwrap() + "# mine\n";
    std::fs::write(p.join("calc.py"), &calc).unwrap();
    let test_calc = std::fs::read(p.join("test_calc.py")).unwrap();
    let index = git(p, &["ls-files", "--stage"]);
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("node")
        .arg(deps.join("mcp-git-client.mjs"))
        .arg(support::binary())
        .arg(p)
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{said}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {said}"));

    let hints = |name: &str| {
        let t = r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no tool {name}: {}", r["tools"]))
            .clone();
        (
            t["annotations"]["readOnlyHint"].clone(),
            t["annotations"]["destructiveHint"].clone(),
        )
    };
    assert_eq!(hints("checkpoint"), (json!(false), json!(false)));
    assert_eq!(hints("rollback"), (json!(false), json!(true)));

    let cp = &r["checkpoint"]["structuredContent"];
    let id = cp["checkpoint"].as_str().expect("a checkpoint id");
    assert!(id.starts_with("mcp_"), "{cp}");
    assert_eq!(
        git(
            p,
            &["rev-parse", &format!("refs/agent-ls/checkpoints/{id}")]
        )
        .trim(),
        cp["commit"].as_str().unwrap()
    );
    assert_eq!(r["edit"]["structuredContent"]["written"], true);

    // Everything changed since the checkpoint, by apply_edit or the caller's own tools, is
    // back; the ignored build output, the index and HEAD are untouched.
    let back = &r["rollback"]["structuredContent"];
    assert_eq!(back["run"], id, "{}", r["rollback"]);
    assert_eq!(
        back["files"],
        json!(["calc.py", "scratch.py", "test_calc.py"])
    );
    assert_eq!(std::fs::read_to_string(p.join("calc.py")).unwrap(), calc);
    assert_eq!(std::fs::read(p.join("test_calc.py")).unwrap(), test_calc);
    assert!(!p.join("scratch.py").exists());
    assert_eq!(
        std::fs::read_to_string(p.join("build/out.o")).unwrap(),
        "built\n"
    );
    assert_eq!(git(p, &["ls-files", "--stage"]), index);
    assert_eq!(git(p, &["status", "--porcelain"]), " M calc.py\n");

    assert_eq!(r["unknown"]["isError"], true);
    assert_eq!(r["gone"]["isError"], true);
    let gone = r["gone"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(gone.contains("no checkpoint mcp_00000000"), "{gone}");
}

#[test]
fn mcp_rollback_of_an_agent_ls_run_refuses_a_later_edit_unless_forced() {
    let Some(deps) = support::protocol_deps() else {
        return;
    };
    let ws = support::git::example_repository();
    let home = tempfile::tempdir().unwrap();
    let (p, home) = (ws.path(), home.path());
    let original = std::fs::read(p.join("calc.py")).unwrap();
    let fix = support::git::FIX_AND_CREATE;
    let script = p.join(".replay.jsonl");
    std::fs::write(
        &script,
        support::replay_script(&[json!({"role": "coder", "content": fix})]),
    )
    .unwrap();
    let run = support::in_workspace(
        &["run", "fix the failing tests", "--yes", "--json"],
        p,
        home,
    )
    .env("AGENT_LS_MODEL__PROVIDER", "replay")
    .env("AGENT_LS_MODEL__REPLAY_FILE", &script)
    .output()
    .unwrap();
    let o: Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&run.stderr)));
    assert_eq!(o["status"], "done", "{o}");
    let edited = std::fs::read_to_string(p.join("calc.py")).unwrap() + "# mine\n";
    std::fs::write(p.join("calc.py"), &edited).unwrap();

    // Each call a session of its own, as a host that restarts the server would make it.
    let call = |args: Value| -> Value {
        let out = Command::new("node")
            .arg(deps.join("mcp-calls.mjs"))
            .arg(support::binary())
            .arg(p)
            .arg(json!([["rollback", args]]).to_string())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{said}");
        let r: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {said}"));
        r[0].clone()
    };
    let refused = call(json!({}));
    assert_eq!(refused["isError"], true, "{refused}");
    let said = refused["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        said.contains("calc.py") && said.contains("force: true") && !said.contains("notes.py"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(p.join("calc.py")).unwrap(), edited);
    assert!(p.join("notes.py").exists());

    let forced = call(json!({"force": true}));
    assert_ne!(forced["isError"], true, "{forced}");
    assert_eq!(forced["structuredContent"]["run"], o["run_id"]);
    assert_eq!(
        forced["structuredContent"]["files"],
        json!(["calc.py", "notes.py"])
    );
    assert_eq!(std::fs::read(p.join("calc.py")).unwrap(), original);
    assert!(!p.join("notes.py").exists());
}

/// A tool call line for `raw_session`.
fn call(id: u32, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
}

#[test]
fn the_tools_answer_as_annotated_and_as_their_output_schemas_say() {
    let ws = support::git::example_repository();
    let fix =
        "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let answers = raw_session(
        ws.path(),
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            call(2, "run_tests", json!({})),
            call(3, "get_diagnostics", json!({"path": "calc.py"})),
            call(4, "checkpoint", json!({})),
            call(5, "apply_edit", json!({"edits": fix, "dry_run": true})),
            call(6, "apply_edit", json!({"edits": fix})),
            call(7, "apply_edit", json!({"edits": fix})),
            call(8, "rollback", json!({})),
        ],
    );
    let tools = answers[0]["result"]["tools"].as_array().unwrap().clone();
    let named = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap().clone();
    // A checkpoint writes git refs: not read-only in MCP's sense.
    assert_eq!(named("checkpoint")["annotations"]["readOnlyHint"], false);
    let result = |i: usize| answers[i]["result"].clone();
    // The failure is located in test_calc.py; asking for calc.py finds it all the same.
    let diagnostics = result(2)["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        diagnostics.contains("calc.py") && diagnostics.contains("test_add"),
        "{diagnostics}"
    );
    assert!(
        !diagnostics.contains("no failures are known"),
        "{diagnostics}"
    );
    let dry = result(4);
    assert_eq!(dry["structuredContent"]["step"], Value::Null, "{dry}");
    assert_eq!(result(5)["structuredContent"]["step"], 1);
    // The same edit again: idempotent, so a success that says nothing changed.
    let again = result(6);
    assert_eq!(again["isError"], false, "{again}");
    assert_eq!(
        again["structuredContent"]["already_applied"], true,
        "{again}"
    );
    assert!(again.to_string().contains("already in place"), "{again}");
    // Every structured answer holds only what its tool's outputSchema declares, and all it
    // requires.
    for (i, tool) in [
        (1, "run_tests"),
        (3, "checkpoint"),
        (4, "apply_edit"),
        (6, "apply_edit"),
        (7, "rollback"),
    ] {
        let r = result(i);
        assert_eq!(r["isError"], false, "{tool}: {r}");
        let schema = named(tool)["outputSchema"].clone();
        let declared = schema["properties"].as_object().unwrap();
        for key in r["structuredContent"].as_object().unwrap().keys() {
            assert!(
                declared.contains_key(key),
                "{tool} answers {key}, undeclared: {r}"
            );
        }
        for key in schema["required"].as_array().unwrap() {
            let key = key.as_str().unwrap();
            assert!(
                r["structuredContent"].get(key).is_some(),
                "{tool} lacks {key}: {r}"
            );
        }
    }
}
