//! Inline completion (`textDocument/inlineCompletion`, docs/completion.md) driven over stdio
//! against a stub fill-in-the-middle server on 127.0.0.1 that records every request: off by
//! default, each provider's request shape, the cut, the typed-prefix cache, cancellation by a
//! newer request and by `$/cancelRequest`, stale answers dropped, secret files never sent,
//! bad answers survived, and an untrusted workspace file naming no server.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::model_server::{ModelServer, Reply};
use crate::support::{Client, Spawn, file_uri, workspace};

const PY: &str = "def add(a, b):\n    \n\nprint(add(1, 2))\n";

/// A server on a workspace holding `main.py` (and `files`), with `[completion]` set by the
/// user's file as `completion` says.
fn start(completion: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, Client, Value) {
    let mut all = vec![("main.py", PY)];
    all.extend_from_slice(files);
    let ws = workspace(&all);
    std::fs::create_dir_all(ws.path().join(".agent-ls")).unwrap();
    let mut c = Client::spawn(Spawn {
        user_config: Some(completion.to_string()),
        ..Default::default()
    });
    // As every editor that takes an edit-carrying code action declares (a client that does
    // not gets the agent's actions as plain commands, and no next-edit action).
    let caps = json!({"textDocument": {"codeAction": {"codeActionLiteralSupport":
        {"codeActionKind": {"valueSet": ["quickfix", "refactor.rewrite"]}}}}});
    let init = c.initialize(ws.path(), caps, Value::Null);
    (ws, c, init)
}

fn config(server: &ModelServer, provider: &str) -> String {
    format!(
        "[completion]\nprovider = \"{provider}\"\nbase_url = \"{}\"\nmodel = \"fim\"\ntimeout_ms = 3000\n",
        server.url
    )
}

fn ask(c: &mut Client, uri: &str, line: u32, character: u32) -> Value {
    let id = send(c, uri, line, character);
    c.wait_response(&id).expect("inlineCompletion answers")
}

fn send(c: &mut Client, uri: &str, line: u32, character: u32) -> Value {
    c.send_request(
        "textDocument/inlineCompletion",
        json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": character},
               "context": {"triggerKind": 2}}),
    )
}

fn texts(answer: &Value) -> Vec<String> {
    answer
        .as_array()
        .expect("an array of items")
        .iter()
        .map(|i| i["insertText"].as_str().unwrap().to_string())
        .collect()
}

fn openai(text: &str) -> Reply {
    Reply::json(json!({"choices": [{"text": text}]}))
}

fn main_uri(ws: &tempfile::TempDir) -> String {
    file_uri(&ws.path().join("main.py"))
}

#[test]
fn off_by_default_no_capability_and_an_empty_answer() {
    let ws = workspace(&[("main.py", PY)]);
    let mut c = Client::spawn(Spawn::default());
    let init = c.initialize(ws.path(), json!({}), Value::Null);
    assert!(
        init["capabilities"]
            .get("inlineCompletionProvider")
            .is_none(),
        "{init}"
    );
    let uri = main_uri(&ws);
    c.open(&uri, PY);
    assert_eq!(ask(&mut c, &uri, 1, 4), json!([]));
}

#[test]
fn a_suggestion_is_cut_where_the_suffix_takes_over_and_accepting_it_is_counted() {
    let server = ModelServer::start(vec![openai("return a + b\n\nprint(add(1, 2))\n")]);
    let (ws, mut c, init) = start(&config(&server, "openai"), &[]);
    assert_eq!(
        init["capabilities"]["inlineCompletionProvider"],
        json!(true)
    );
    let uri = main_uri(&ws);
    c.open(&uri, PY);
    let answer = ask(&mut c, &uri, 1, 4);
    assert_eq!(texts(&answer), vec!["return a + b"]);
    let item = &answer[0];
    assert_eq!(item["range"]["start"], json!({"line": 1, "character": 4}));
    assert_eq!(item["range"]["end"], json!({"line": 1, "character": 4}));
    let body = &server.requests()[0].body;
    assert_eq!(body["prompt"], "def add(a, b):\n    ");
    assert_eq!(body["suffix"], "\n\nprint(add(1, 2))\n");
    // The client runs the item's command once it inserted it.
    let cmd = &item["command"];
    assert_eq!(cmd["command"], "agent-ls.completionAccepted");
    c.command("agent-ls.completionAccepted", cmd["arguments"][0].clone())
        .expect("the accept command runs");
    let journal = ws.path().join(".agent-ls/completions.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&journal)
        .unwrap_or_default()
        .contains("accepted")
    {
        assert!(Instant::now() < deadline, "no accepted event journaled");
        c.pump(Duration::from_millis(20));
    }
    let home = tempfile::tempdir().unwrap();
    let out = crate::support::in_workspace(&["stats", "--json"], ws.path(), home.path())
        .output()
        .unwrap();
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["completions"]["shown"], 1, "{stats}");
    assert_eq!(stats["completions"]["accepted"], 1, "{stats}");
}

#[test]
fn each_provider_sends_its_own_request_shape() {
    let cases: [(&str, Reply, &str); 5] = [
        ("openai", openai("x"), "/v1/completions"),
        ("llama-cpp", Reply::json(json!({"content": "x"})), "/infill"),
        (
            "ollama",
            Reply::json(json!({"response": "x"})),
            "/api/generate",
        ),
        (
            "mistral",
            Reply::json(json!({"choices": [{"message": {"content": "x"}}]})),
            "/v1/fim/completions",
        ),
        ("template", openai("x"), "/v1/completions"),
    ];
    for (provider, reply, path) in cases {
        let server = ModelServer::start(vec![reply]);
        let (ws, mut c, _) = start(&config(&server, provider), &[]);
        let uri = main_uri(&ws);
        c.open(&uri, PY);
        assert_eq!(texts(&ask(&mut c, &uri, 1, 4)), vec!["x"], "{provider}");
        let r = &server.requests()[0];
        assert_eq!(r.path, path, "{provider}");
        let b = &r.body;
        match provider {
            "llama-cpp" => {
                assert_eq!(b["input_prefix"], "def add(a, b):\n    ");
                assert_eq!(b["input_suffix"], "\n\nprint(add(1, 2))\n");
                assert!(b["input_extra"].is_array());
            }
            "ollama" => {
                assert_eq!(
                    (&b["prompt"], &b["raw"]),
                    (&json!("def add(a, b):\n    "), &json!(false))
                );
                assert_eq!(b["suffix"], "\n\nprint(add(1, 2))\n");
            }
            "template" => {
                assert_eq!(
                    b["prompt"],
                    "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>"
                );
                assert!(b.get("suffix").is_none());
            }
            _ => {
                assert_eq!(b["prompt"], "def add(a, b):\n    ", "{provider}");
                assert_eq!(b["suffix"], "\n\nprint(add(1, 2))\n", "{provider}");
            }
        }
    }
}

#[test]
fn typing_the_start_of_the_suggestion_is_answered_from_the_cache() {
    let server = ModelServer::start(vec![openai("return a + b")]);
    let (ws, mut c, _) = start(&config(&server, "openai"), &[]);
    let uri = main_uri(&ws);
    c.open(&uri, PY);
    assert_eq!(texts(&ask(&mut c, &uri, 1, 4)), vec!["return a + b"]);
    c.edit(&uri, 2, (1, 4), (1, 4), "ret");
    let answer = ask(&mut c, &uri, 1, 7);
    assert_eq!(texts(&answer), vec!["urn a + b"]);
    assert_eq!(
        answer[0]["range"]["start"],
        json!({"line": 1, "character": 7})
    );
    assert_eq!(server.count(), 1, "no second model call");
}

/// A stub that counts the requests it started and answers each after `delay`, the n-th
/// with `answers[n]`.
fn slow(delay: Duration, answers: &'static [&'static str]) -> (ModelServer, Arc<AtomicUsize>) {
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let server = ModelServer::answering(move |_| {
        let n = s.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(if n == 0 { delay } else { Duration::ZERO });
        openai(answers[n.min(answers.len() - 1)])
    });
    (server, started)
}

fn wait_started(c: &mut Client, started: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while started.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "the stub got no request {n}");
        c.pump(Duration::from_millis(10));
    }
}

#[test]
fn a_newer_keystroke_cancels_the_older_request_and_a_stale_answer_is_never_returned() {
    let (server, started) = slow(Duration::from_millis(1500), &["STALE", "return a + b"]);
    let (ws, mut c, _) = start(&config(&server, "openai"), &[]);
    let uri = main_uri(&ws);
    c.open(&uri, PY);
    let older = send(&mut c, &uri, 1, 4);
    wait_started(&mut c, &started, 1);
    c.edit(&uri, 2, (1, 4), (1, 4), "r");
    let newer = send(&mut c, &uri, 1, 5);
    assert_eq!(
        c.wait_response(&older).unwrap(),
        json!([]),
        "the older one is cancelled"
    );
    let fresh = c.wait_response(&newer).unwrap();
    assert_eq!(texts(&fresh), vec!["return a + b"]);
    // The stale text is never shown, not even from the cache.
    let again = ask(&mut c, &uri, 1, 5);
    assert!(!again.to_string().contains("STALE"), "{again}");
    drop(server);
}

#[test]
fn a_change_while_the_model_answers_drops_its_answer() {
    let (server, started) = slow(Duration::from_millis(800), &["STALE"]);
    let (ws, mut c, _) = start(&config(&server, "openai"), &[]);
    let uri = main_uri(&ws);
    c.open(&uri, PY);
    let id = send(&mut c, &uri, 1, 4);
    wait_started(&mut c, &started, 1);
    c.edit(&uri, 2, (3, 0), (3, 0), "# moved on\n");
    assert_eq!(c.wait_response(&id).unwrap(), json!([]));
    drop(server);
}

#[test]
fn cancel_request_answers_the_pending_request_at_once() {
    let (server, started) = slow(Duration::from_secs(5), &["late"]);
    let (ws, mut c, _) = start(&config(&server, "openai"), &[]);
    let uri = main_uri(&ws);
    c.open(&uri, PY);
    let id = send(&mut c, &uri, 1, 4);
    wait_started(&mut c, &started, 1);
    let asked = Instant::now();
    c.notify("$/cancelRequest", json!({"id": id}));
    let err = c.wait_response(&id).unwrap_err();
    assert_eq!(err["code"], -32800, "{err}");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
    drop(server);
}

#[test]
fn secret_files_never_reach_the_model() {
    let server = ModelServer::answering(|_| openai("x"));
    let env = "API_TOKEN=sk-very-secret-123\n";
    let (ws, mut c, _) = start(
        &config(&server, "llama-cpp"),
        &[(".env", env), ("certs/tls.pem", "PEM")],
    );
    let env_uri = file_uri(&ws.path().join(".env"));
    c.open(&env_uri, env);
    assert_eq!(ask(&mut c, &env_uri, 0, 4), json!([]));
    let pem_uri = file_uri(&ws.path().join("certs/tls.pem"));
    c.open(&pem_uri, "PEM");
    assert_eq!(ask(&mut c, &pem_uri, 0, 1), json!([]));
    assert_eq!(server.count(), 0, "nothing was sent for a secret file");
    // Nor as another file's context.
    let uri = main_uri(&ws);
    c.open(&uri, "API_TOKEN = load()\n");
    ask(&mut c, &uri, 1, 0);
    let sent = server.requests()[0].body.to_string();
    assert!(!sent.contains("very-secret"), "{sent}");
}

#[test]
fn a_malformed_or_endless_answer_gives_an_empty_list_and_the_server_keeps_serving() {
    let server = ModelServer::start(vec![
        Reply::status(200, "<html>not a completion</html>"),
        Reply::json(json!({"choices": []})),
        Reply::Sse {
            events: vec![],
            stall_after: Some(0),
        },
        openai("return a + b"),
    ]);
    let completion = config(&server, "openai").replace("timeout_ms = 3000", "timeout_ms = 700");
    let (ws, mut c, _) = start(&completion, &[]);
    let uri = main_uri(&ws);
    c.open(&uri, PY);
    assert_eq!(ask(&mut c, &uri, 1, 4), json!([]));
    assert_eq!(ask(&mut c, &uri, 1, 4), json!([]));
    let endless = Instant::now();
    assert_eq!(ask(&mut c, &uri, 1, 4), json!([]));
    assert!(endless.elapsed() < Duration::from_secs(5));
    assert_eq!(texts(&ask(&mut c, &uri, 1, 4)), vec!["return a + b"]);
}

#[test]
fn an_untrusted_workspace_file_cannot_name_the_server() {
    let server = ModelServer::answering(|_| openai("x"));
    let ws_file = format!("[completion]\nbase_url = \"{}\"\n", server.url);
    let ws = workspace(&[("main.py", PY), (".agent-ls.toml", ws_file.as_str())]);
    let mut c = Client::spawn(Spawn::default());
    let init = c.initialize(ws.path(), json!({}), Value::Null);
    assert!(
        init["capabilities"]
            .get("inlineCompletionProvider")
            .is_none(),
        "{init}"
    );
    let uri = main_uri(&ws);
    c.open(&uri, PY);
    assert_eq!(ask(&mut c, &uri, 1, 4), json!([]));
    assert_eq!(server.count(), 0);
}

/// Runs tests/e2e/neovim_completion.lua's `name` scenario in headless Neovim 0.12 with the
/// plugin, against `server`; its checks, or nothing when no Neovim is installed.
fn nvim_scenario(name: &str, server: &ModelServer, ws: &tempfile::TempDir) -> Vec<Value> {
    let Ok(nvim) = std::env::var("AGENT_LS_TEST_NVIM") else {
        assert!(
            std::env::var("AGENT_LS_REQUIRE_REAL_MODEL").is_err(),
            "AGENT_LS_TEST_NVIM is not set; scripts/test installs Neovim"
        );
        eprintln!("skipped: no Neovim (scripts/test installs one)");
        return Vec::new();
    };
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("config/agent-ls");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), self::config(server, "openai")).unwrap();
    let result = state.path().join("result.jsonl");
    let mut child = std::process::Command::new(nvim)
        .args(["--headless", "-u", "NONE", "-i", "NONE", "-n"])
        .args(["-c", "luafile tests/e2e/neovim_completion.lua"])
        .env("XDG_CONFIG_HOME", state.path().join("config"))
        .env("XDG_STATE_HOME", state.path().join("state"))
        .env("XDG_DATA_HOME", state.path().join("data"))
        .env("RESULT", &result)
        .env("SCENARIO", name)
        .env("WORKSPACE", ws.path().canonicalize().unwrap())
        .env("PLUGIN", crate::support::repo("editors/neovim"))
        .env("AGENT_LS", env!("CARGO_BIN_EXE_agent-ls"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&result).unwrap_or_else(|e| {
        panic!(
            "no results ({e}); nvim said: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The workspace of a Neovim scenario: `main.py` in a checkout with agent-ls's state folder.
fn nvim_workspace() -> tempfile::TempDir {
    let ws = workspace(&[("main.py", PY)]);
    for dir in [".git", ".agent-ls"] {
        std::fs::create_dir(ws.path().join(dir)).unwrap();
    }
    ws
}

fn assert_all(results: &[Value], want: usize) {
    let failed: Vec<_> = results.iter().filter(|r| r["ok"] != true).collect();
    assert!(
        failed.is_empty(),
        "failed checks: {failed:#?}\nall: {results:#?}"
    );
    if !results.is_empty() {
        assert_eq!(results.len(), want, "{results:#?}");
    }
}

/// The stub's answer to a request whose prompt ends with `r` (the user typed on) or not.
fn fim_answer(body: &Value) -> Reply {
    let typed = body["prompt"].as_str().is_some_and(|p| p.ends_with('r'));
    openai(if typed { "eturn a + b" } else { "return a + b" })
}

#[test]
fn neovim_shows_a_suggestion_and_tab_accepts_it() {
    let server = ModelServer::answering(fim_answer);
    let ws = nvim_workspace();
    assert_all(&nvim_scenario("accept", &server, &ws), 4);
}

#[test]
fn neovim_never_shows_an_answer_that_came_after_the_user_typed_on() {
    let first = Arc::new(AtomicUsize::new(0));
    let ws = nvim_workspace();
    let marks = ws.path().to_path_buf();
    let server = ModelServer::answering(move |body| {
        if first.fetch_add(1, Ordering::SeqCst) > 0 {
            return fim_answer(body);
        }
        // The first request is held, and says so through files the scenario watches.
        let _ = std::fs::write(marks.join(".stub-1"), "");
        std::thread::sleep(Duration::from_millis(1000));
        let _ = std::fs::write(marks.join(".stub-done-1"), "");
        openai("STALE_TEXT")
    });
    assert_all(&nvim_scenario("stale", &server, &ws), 6);
}

const SHAPES: &str = "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n";

/// A stub for both models: the chat model predicts the rename's other use, the FIM model
/// completes with nothing useful.
fn next_edit_server() -> ModelServer {
    ModelServer::answering(|body| {
        if body.get("messages").is_some() {
            let content = r#"{"old": "print(area(2, 3))", "new": "print(surface(2, 3))"}"#;
            return Reply::json(
                json!({"choices": [{"message": {"role": "assistant", "content": content}}]}),
            );
        }
        openai("")
    })
}

#[test]
fn the_next_edit_is_predicted_from_the_recent_edits_and_offered_not_applied() {
    let server = next_edit_server();
    let completion = format!(
        "{}next_edit = true\n[model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nname = \"chat\"\n",
        config(&server, "openai"),
        server.url
    );
    let (ws, mut c, _) = start(&completion, &[("shapes.py", SHAPES)]);
    let uri = file_uri(&ws.path().join("shapes.py"));
    c.open(&uri, SHAPES);
    // The user renames the definition: "area" becomes "surface".
    c.edit(&uri, 2, (0, 4), (0, 8), "surface");
    // An inline completion request starts the prediction.
    ask(&mut c, &uri, 0, 11);
    let chat = |s: &ModelServer| {
        s.requests()
            .into_iter()
            .find(|r| r.path.ends_with("/chat/completions"))
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let action = loop {
        let actions = c
            .request(
                "textDocument/codeAction",
                json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 2, "character": 0},
                       "end": {"line": 2, "character": 0}}, "context": {"diagnostics": []}}),
            )
            .unwrap();
        let found = actions
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["title"] == "Agent: apply the suggested next edit")
            .cloned();
        if let Some(a) = found {
            break a;
        }
        assert!(Instant::now() < deadline, "no next-edit action: {actions}");
        c.pump(Duration::from_millis(50));
    };
    let sent = chat(&server)
        .expect("the chat model was asked")
        .body
        .to_string();
    assert!(sent.contains("typed \\\"surface\\\""), "{sent}");
    let edit = &action["edit"]["changes"][&uri][0];
    assert_eq!(edit["newText"], "print(surface(2, 3))");
    assert_eq!(edit["range"]["start"], json!({"line": 4, "character": 0}));
    assert_eq!(edit["range"]["end"], json!({"line": 4, "character": 17}));
    // Offered inline too, at or below the cursor's line; never applied by the server.
    let items = ask(&mut c, &uri, 2, 0);
    let inline = items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["insertText"] == "print(surface(2, 3))")
        .unwrap_or_else(|| panic!("no next-edit item: {items}"));
    assert_eq!(inline["range"]["start"]["line"], 4);
    assert!(
        c.server_requests
            .iter()
            .all(|r| r["method"] != "workspace/applyEdit")
    );
    // Once the file no longer holds the text, nothing is offered.
    c.edit(&uri, 3, (4, 0), (4, 17), "print(surface(2, 3))");
    let items = ask(&mut c, &uri, 2, 0);
    assert!(!items.to_string().contains("surface(2, 3)"), "{items}");
}
