//! The OpenAI-compatible client against a real model: SmolLM2-135M on llama.cpp, served on
//! 127.0.0.1 by tests/model-server, started by scripts/test (which sets AGENT_LS_REAL_MODEL_URL). The model is tiny,
//! so these tests check structure (streamed tokens, a forced tool call, JSON that parses),
//! not the quality of the answers.

use agent_ls_runtime::config::Config;
use agent_ls_runtime::model::{Message, Models, Request, Response, Role, ToolSpec};
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The server's URL, or `None` to skip when it is not required (a plain `cargo test`);
/// scripts/test requires it, so CI always runs these.
fn server() -> Option<String> {
    match std::env::var("AGENT_LS_REAL_MODEL_URL") {
        Ok(url) => Some(url),
        Err(_) if std::env::var("AGENT_LS_REQUIRE_REAL_MODEL").is_ok() => {
            panic!("AGENT_LS_REAL_MODEL_URL is not set; scripts/test starts the model server")
        }
        Err(_) => {
            eprintln!("skipped: no real model server (scripts/test starts one)");
            None
        }
    }
}

fn models(url: &str) -> Models {
    let mut c = Config::default();
    c.model.provider = Some("ollama".into());
    c.model.base_url = Some(url.to_string());
    c.model.name = Some("SmolLM2-135M-Instruct".into());
    c.model.max_tokens = 48;
    c.model.timeout_secs = 120;
    c.model.stream_idle_secs = 60;
    Models::new(&c, None)
}

/// The server runs one generation at a time and queues the rest, and each answer is given a
/// time limit, so these tests take turns rather than wait in its queue.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn call(m: &Models, req: &Request, on_token: Option<&(dyn Fn(&str) + Send + Sync)>) -> Response {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(m.call(Role::Coder, req, &CancellationToken::new(), on_token))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn streams_tokens_from_a_real_model() {
    let Some(url) = server() else { return };
    let pieces = Arc::new(Mutex::new(0usize));
    let p = pieces.clone();
    let on_token = move |_: &str| *p.lock().unwrap() += 1;
    let req = Request {
        messages: vec![
            Message::system("You are terse."),
            Message::user("Name a colour."),
        ],
        ..Request::default()
    };
    let r = call(&models(&url), &req, Some(&on_token));
    assert!(!r.text.trim().is_empty());
    assert!(*pieces.lock().unwrap() >= 2, "the answer arrived in pieces");
    assert!(r.usage.output_tokens > 0);
}

#[test]
fn a_forced_tool_call_comes_back_as_a_tool_call() {
    let Some(url) = server() else { return };
    let tool = ToolSpec {
        name: "pick_file".into(),
        description: "Pick the file to edit.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string", "maxLength": 30}}, "required": ["path"]}),
    };
    let req = Request {
        messages: vec![Message::user(
            "Which file holds the add function? It is calc.py.",
        )],
        tools: vec![tool],
        tool_choice: Some("pick_file".into()),
        ..Request::default()
    };
    let r = call(&models(&url), &req, None);
    assert_eq!(r.tool_calls.len(), 1, "{r:?}");
    assert_eq!(r.tool_calls[0].name, "pick_file");
    assert!(
        r.tool_calls[0].arguments.is_object(),
        "{:?}",
        r.tool_calls[0].arguments
    );
}

#[test]
fn a_json_schema_answer_parses() {
    let Some(url) = server() else { return };
    let schema = json!({
        "type": "object",
        "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "reason": {"type": "string", "maxLength": 40}},
        "required": ["score", "reason"]
    });
    let req = Request {
        messages: vec![Message::user(
            "Rate the code `def add(a, b): return a + b` from 1 to 5.",
        )],
        json_schema: Some(("evaluation".into(), schema)),
        max_tokens: Some(64),
        ..Request::default()
    };
    let r = call(&models(&url), &req, None);
    let v: serde_json::Value =
        serde_json::from_str(&r.text).unwrap_or_else(|e| panic!("{e}: {:?}", r.text));
    assert!(v["score"].is_i64(), "{v}");
    assert!(v["reason"].is_string(), "{v}");
}

/// The loop with the real model: its first call of the turn must call grep (agent.first_tool),
/// the real model answers with a grep call, and the loop runs it and sends the result back.
/// The model is too small to fix anything, so the run's end is not checked: the journal is.
/// The run is stopped (SIGTERM, as a user's Ctrl-C) once the second coder call is journaled:
/// what follows (a refused answer, its repair request) is a minute of CPU on CI's 2 cores and
/// proves nothing here.
#[test]
fn the_real_model_calls_a_tool_that_the_loop_runs() {
    let Some(url) = server() else { return };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ws = tempfile::tempdir().unwrap();
    for f in ["calc.py", "test_calc.py"] {
        std::fs::copy(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples/calc")
                .join(f),
            ws.path().join(f),
        )
        .unwrap();
    }
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\nmax_tool_steps = 1\nmax_retries = 0\nmax_iterations = 1\nfirst_tool = \"grep\"\n[model]\nmax_tokens = 160\n",
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agent-ls"))
        .args([
            "run",
            "fix the failing tests",
            "--dry-run",
            "--json",
            "--workspace",
        ])
        .arg(ws.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "ollama")
        .env("AGENT_LS_MODEL__BASE_URL", &url)
        .env("AGENT_LS_MODEL__NAME", "SmolLM2-135M-Instruct")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .unwrap();
    let coder_calls = |lines: &[serde_json::Value]| {
        lines
            .iter()
            .filter(|l| l["role"] == "coder" && l["type"] == "model_call")
            .count()
    };
    // Generous: only a hung model server reaches it (each call has the model's own timeout).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    let lines = loop {
        // Nothing to read until the run has opened its journal.
        let lines = if ws.path().join(".agent-ls/runs").is_dir() {
            crate::support::journal(ws.path())
        } else {
            Vec::new()
        };
        let ended = child.try_wait().unwrap().is_some();
        if ended || coder_calls(&lines) >= 2 || std::time::Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .ok();
    child.wait().unwrap();
    let said = std::fs::read_to_string(stderr.path()).unwrap_or_default();
    let call = lines
        .iter()
        .find(|l| l["type"] == "tool_call")
        .unwrap_or_else(|| panic!("no tool call in the journal: {said}"));
    assert_eq!(call["data"]["name"], "grep");
    assert!(call["data"]["arguments"]["pattern"].is_string(), "{call}");
    let result = lines
        .iter()
        .find(|l| l["type"] == "tool_result")
        .expect("the loop ran the call");
    assert_eq!(result["data"]["name"], "grep");
    // The result went back to the model: a second coder call followed the first.
    assert!(coder_calls(&lines) >= 2, "{said}");
}

/// The tester's request as the loop makes it (its built-in prompt, a bug to reproduce, the
/// files), answered by the real model, and read by the loop's parser. The model is too small
/// to write a good test: its answer may be refused, with a typed error that the repair request
/// names; what must work is the wire and the reading.
#[test]
fn the_real_model_answers_a_tester_request_that_the_loop_reads() {
    use agent_ls_core::agent::prompts::Prompts;
    use agent_ls_core::agent::tester;
    let Some(url) = server() else { return };
    let files = "Files:\ncsvline.py\n```\ndef parse(line):\n    fields = line.split(\",\")\n    if line.endswith(\",\"):\n        fields = fields[:-1]\n    return fields\n```\n";
    let messages = tester::prompt(
        Prompts::default().get("tester"),
        (
            tester::Mode::Reproduce,
            "parse drops the last field when the line ends with a comma",
            "",
        ),
        files,
        &[],
    );
    let req = Request {
        messages,
        max_tokens: Some(160),
        ..Request::default()
    };
    let m = models(&url);
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt
        .block_on(m.call(Role::Tester, &req, &CancellationToken::new(), None))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!r.text.trim().is_empty(), "an empty answer");
    match tester::parse_tests(&r.text) {
        Ok(tests) => assert!(
            tests
                .iter()
                .all(|t| !t.path.is_empty() && !t.expect.is_empty()),
            "{tests:?}"
        ),
        Err(e) => {
            let repair = tester::repair(&e);
            assert!(repair.content.contains(&e.to_string()), "{repair:?}");
        }
    }
}

/// Inline completion's `openai` provider against the real model's `/v1/completions`
/// (tests/model-server): a request in that wire format is answered with text, which the
/// core's cut keeps to what fits at the cursor. SmolLM2 has no FIM tokens, so the server
/// continues the prefix; what it writes is not checked, only that it is there.
#[test]
fn inline_completion_gets_text_from_the_real_models_completions_endpoint() {
    let Some(url) = server() else { return };
    let mut c = Config::default();
    c.completion.base_url = Some(url);
    c.completion.model = "SmolLM2-135M-Instruct".into();
    c.completion.max_tokens = 24;
    c.completion.timeout_ms = 60_000;
    let completer = agent_ls_runtime::completion::Completer::from_config(&c)
        .expect("a completer for a configured server");
    let cx = agent_ls_core::completion::Context {
        path: "main.py".into(),
        prefix: "def add(a, b):\n    ".into(),
        suffix: "\n\nprint(add(1, 2))\n".into(),
        snippets: Vec::new(),
    };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let raw = rt
        .block_on(completer.complete(&cx))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!raw.trim().is_empty(), "{raw:?}");
}
