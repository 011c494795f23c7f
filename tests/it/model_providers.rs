//! Model providers against a scripted server on 127.0.0.1: streaming, tool calls, JSON
//! schemas and their instruction-only fallback, retries and their limits, authentication
//! failures, broken streams, fallbacks to another model, cancellation, and replay.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_ls_runtime::config::{Config, Secret, TargetConfig};
use agent_ls_runtime::model::{Message, ModelError, Models, Request, Role, ToolSpec};
use serde_json::json;
use support::model_server::{ModelServer, Reply, anthropic_stream, openai_text, openai_tool_call};
use tokio_util::sync::CancellationToken;

fn openai_config(url: &str) -> Config {
    let mut c = Config::default();
    c.model.provider = Some("openai".into());
    c.model.base_url = Some(format!("{url}/v1"));
    c.model.name = Some("test-model".into());
    c.model.api_key = Some(Secret::new("sk-test-secret-123"));
    c.model.stream_idle_secs = 1;
    c.model.timeout_secs = 20;
    c
}

fn models(c: &Config) -> Models {
    let mut m = Models::new(c, None);
    m.backoff_base = Duration::from_millis(10);
    m
}

fn ask() -> Request {
    Request {
        messages: vec![Message::system("be brief"), Message::user("hello")],
        ..Request::default()
    }
}

fn call(
    m: &Models,
    role: Role,
    req: &Request,
) -> Result<agent_ls_runtime::model::Response, ModelError> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(m.call(role, req, &CancellationToken::new(), None))
}

#[test]
fn streams_text_with_usage_and_sends_the_key() {
    let server = ModelServer::start(vec![openai_text(&["Hel", "lo ", "there"])]);
    let m = models(&openai_config(&server.url));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let on_token = move |t: &str| sink.lock().unwrap().push(t.to_string());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt
        .block_on(m.call(
            Role::Coder,
            &ask(),
            &CancellationToken::new(),
            Some(&on_token),
        ))
        .unwrap();
    assert_eq!(r.text, "Hello there");
    assert_eq!(*seen.lock().unwrap(), ["Hel", "lo ", "there"]);
    assert_eq!(
        (
            r.usage.input_tokens,
            r.usage.output_tokens,
            r.usage.estimated
        ),
        (11, 7, false)
    );
    assert_eq!(
        (r.attempts, r.provider.as_str(), r.model.as_str()),
        (1, "openai", "test-model")
    );
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(
        req.header("authorization"),
        Some("Bearer sk-test-secret-123")
    );
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.body["messages"][0]["role"], "system");
}

#[test]
fn a_429_is_retried_after_retry_after() {
    let server = ModelServer::start(vec![
        Reply::Status {
            code: 429,
            headers: vec![("Retry-After".into(), "0".into())],
            body: "{}".into(),
        },
        openai_text(&["ok"]),
    ]);
    let r = call(&models(&openai_config(&server.url)), Role::Coder, &ask()).unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("ok", 2));
    assert_eq!(server.count(), 2);
}

#[test]
fn server_errors_are_retried_up_to_the_limit() {
    let server = ModelServer::start(vec![
        Reply::status(500, "boom"),
        Reply::status(502, "boom"),
        Reply::status(503, "boom"),
        openai_text(&["fine"]),
    ]);
    let r = call(&models(&openai_config(&server.url)), Role::Coder, &ask()).unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("fine", 4));

    let server = ModelServer::start(vec![
        Reply::status(500, "a"),
        Reply::status(500, "b"),
        Reply::status(500, "c"),
        openai_text(&["late"]),
    ]);
    let mut c = openai_config(&server.url);
    c.model.max_retries = 2;
    let err = call(&models(&c), Role::Coder, &ask()).unwrap_err();
    assert!(matches!(err, ModelError::Http { status: 500, .. }), "{err}");
    assert_eq!(server.count(), 3, "one try and two retries");
}

#[test]
fn a_401_fails_at_once_naming_what_to_fix_without_the_key() {
    let server = ModelServer::start(vec![
        Reply::status(401, "{\"error\": \"invalid key sk-test-secret-123\"}"),
        openai_text(&["never"]),
    ]);
    let err = call(&models(&openai_config(&server.url)), Role::Coder, &ask()).unwrap_err();
    assert!(matches!(err, ModelError::Auth { status: 401, .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("OPENAI_API_KEY"), "{text}");
    assert!(!text.contains("sk-test-secret-123"));
    assert_eq!(server.count(), 1, "no retry");
}

#[test]
fn a_stalled_stream_is_given_up_and_retried() {
    let server = ModelServer::start(vec![
        Reply::Sse {
            events: vec![
                json!({"choices": [{"index": 0, "delta": {"content": "par"}}]}).to_string(),
            ],
            stall_after: Some(1),
        },
        openai_text(&["whole"]),
    ]);
    let started = Instant::now();
    let r = call(&models(&openai_config(&server.url)), Role::Coder, &ask()).unwrap();
    assert_eq!(
        (r.text.as_str(), r.attempts),
        ("whole", 2),
        "the partial text is discarded"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_truncated_stream_is_retried() {
    let server = ModelServer::start(vec![
        Reply::Sse {
            events: vec![
                json!({"choices": [{"index": 0, "delta": {"content": "cut"}}]}).to_string(),
            ],
            stall_after: None,
        },
        openai_text(&["complete"]),
    ]);
    let r = call(&models(&openai_config(&server.url)), Role::Coder, &ask()).unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("complete", 2));
}

#[test]
fn malformed_json_is_an_error_that_is_not_retried() {
    let server = ModelServer::start(vec![
        Reply::Sse {
            events: vec!["{not json".into()],
            stall_after: None,
        },
        openai_text(&["x"]),
    ]);
    let err = call(&models(&openai_config(&server.url)), Role::Coder, &ask()).unwrap_err();
    assert!(matches!(err, ModelError::BadAnswer { .. }), "{err}");
    assert_eq!(server.count(), 1);
}

fn edit_tool() -> ToolSpec {
    ToolSpec {
        name: "propose_edit".into(),
        description: "Propose an edit".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }
}

#[test]
fn tool_calls_are_assembled_from_fragments() {
    let server = ModelServer::start(vec![openai_tool_call(
        "propose_edit",
        &["{\"pa", "th\": \"a.", "py\"}"],
    )]);
    let req = Request {
        tools: vec![edit_tool()],
        tool_choice: Some("propose_edit".into()),
        ..ask()
    };
    let r = call(&models(&openai_config(&server.url)), Role::Coder, &req).unwrap();
    assert_eq!(r.tool_calls[0].name, "propose_edit");
    assert_eq!(r.tool_calls[0].arguments, json!({"path": "a.py"}));
    let body = &server.requests()[0].body;
    assert_eq!(body["tools"][0]["function"]["name"], "propose_edit");
    assert_eq!(body["tool_choice"]["function"]["name"], "propose_edit");
}

/// Arguments that are not JSON (cut off by the output limit) are not a failure of the model:
/// their raw text comes back as a JSON string, for the loop to send back to be mended.
#[test]
fn a_tool_call_with_invalid_arguments_comes_back_as_its_raw_text() {
    let server = ModelServer::start(vec![openai_tool_call("propose_edit", &["{\"path\": "])]);
    let req = Request {
        tools: vec![edit_tool()],
        ..ask()
    };
    let r = call(&models(&openai_config(&server.url)), Role::Coder, &req).unwrap();
    assert_eq!(r.tool_calls[0].name, "propose_edit");
    assert_eq!(r.tool_calls[0].arguments, json!("{\"path\": "));
    assert_eq!(server.count(), 1);
}

#[test]
fn a_rejected_response_format_falls_back_to_instructions() {
    let server = ModelServer::start(vec![
        Reply::status(
            400,
            "{\"error\": {\"message\": \"Unrecognized request argument: response_format\"}}",
        ),
        openai_text(&["{\"score\": 4}"]),
    ]);
    let schema = json!({"type": "object", "properties": {"score": {"type": "integer"}}});
    let req = Request {
        json_schema: Some(("evaluation".into(), schema)),
        ..ask()
    };
    let mut c = openai_config(&server.url);
    c.model.name = Some("no-schema-model".into());
    let r = call(&models(&c), Role::Evaluator, &req).unwrap();
    assert_eq!(r.text, "{\"score\": 4}");
    let reqs = server.requests();
    assert_eq!(reqs[0].body["response_format"]["type"], "json_schema");
    assert_eq!(
        reqs[1].body["response_format"]["type"], "json_object",
        "the next form keeps the schema"
    );
    let last = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["content"].as_str().unwrap().contains("JSON schema"),
        "{last}"
    );
}

#[test]
fn rejected_tools_fall_back_to_a_json_tool_call_in_text() {
    let server = ModelServer::start(vec![
        Reply::status(
            400,
            "{\"error\": \"tools are not supported by this model\"}",
        ),
        openai_text(&["{\"tool\": \"propose_edit\", \"arguments\": {\"path\": \"b.py\"}}"]),
    ]);
    let mut c = openai_config(&server.url);
    c.model.name = Some("no-tools-model".into());
    let req = Request {
        tools: vec![edit_tool()],
        ..ask()
    };
    let r = call(&models(&c), Role::Coder, &req).unwrap();
    assert_eq!(r.tool_calls[0].arguments, json!({"path": "b.py"}));
    assert!(server.requests()[1].body.get("tools").is_none());
}

#[test]
fn a_failing_model_falls_back_to_the_next_one() {
    let primary = ModelServer::start(vec![Reply::status(400, "{\"error\": \"model not found\"}")]);
    let backup = ModelServer::start(vec![openai_text(&["from backup"])]);
    let mut c = openai_config(&primary.url);
    c.model.fallback = vec![TargetConfig {
        provider: Some("ollama".into()),
        base_url: Some(format!("{}/v1", backup.url)),
        name: Some("backup-model".into()),
        api_key: None,
    }];
    let r = call(&models(&c), Role::Planner, &ask()).unwrap();
    assert_eq!(
        (r.text.as_str(), r.model.as_str(), r.attempts),
        ("from backup", "backup-model", 2)
    );
    assert_eq!(
        backup.requests()[0].header("authorization"),
        None,
        "the key is not sent to another provider"
    );
}

#[test]
fn cancelling_drops_the_request_in_flight_promptly() {
    let server = ModelServer::start(vec![Reply::Sse {
        events: vec![],
        stall_after: Some(0),
    }]);
    let mut c = openai_config(&server.url);
    c.model.stream_idle_secs = 60;
    let m = models(&c);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cancel = CancellationToken::new();
    let (result, latency) = rt.block_on(async {
        let c2 = cancel.clone();
        let fired = Arc::new(Mutex::new(None));
        let f2 = fired.clone();
        // Cancelled once the request is in flight: the server has it and stalls.
        let waiting = server.clone();
        tokio::task::spawn_blocking(move || {
            waiting.wait_for_requests(1);
            *f2.lock().unwrap() = Some(Instant::now());
            c2.cancel();
        });
        let r = m.call(Role::Coder, &ask(), &cancel, None).await;
        let fired_at = fired.lock().unwrap().expect("cancel fired");
        (r, fired_at.elapsed())
    });
    assert_eq!(result.unwrap_err(), ModelError::Cancelled);
    assert!(
        latency < Duration::from_millis(100),
        "took {latency:?} after cancel"
    );
}

#[test]
fn anthropic_streams_text_and_tool_use_with_a_system_prompt() {
    let server = ModelServer::start(vec![anthropic_stream(
        &["Sure", ", done"],
        Some(("propose_edit", &["{\"path\":", " \"c.py\"}"])),
    )]);
    let mut c = Config::default();
    c.model.provider = Some("anthropic".into());
    c.model.base_url = Some(server.url.clone());
    c.model.api_key = Some(Secret::new("ant-key-456"));
    let req = Request {
        tools: vec![edit_tool()],
        ..ask()
    };
    let r = call(&models(&c), Role::Coder, &req).unwrap();
    assert_eq!(r.text, "Sure, done");
    assert_eq!(r.tool_calls[0].arguments, json!({"path": "c.py"}));
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (21, 9));
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("ant-key-456"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.body["system"][0]["text"], "be brief");
    assert_eq!(sent.body["messages"][0]["role"], "user");
    assert_eq!(sent.body["tools"][0]["input_schema"]["required"][0], "path");
    // Cache breakpoints on what stays from call to call: the tools, the system prompt, the
    // first user message.
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(sent.body["tools"][0]["cache_control"], ephemeral);
    assert_eq!(sent.body["system"][0]["cache_control"], ephemeral);
    assert_eq!(
        sent.body["messages"][0]["content"][0]["cache_control"],
        ephemeral
    );
}

#[test]
fn a_tool_round_caches_the_conversation_so_far_within_four_breakpoints() {
    let server = ModelServer::start(vec![anthropic_stream(&["ok"], None)]);
    let mut c = Config::default();
    c.model.provider = Some("anthropic".into());
    c.model.base_url = Some(server.url.clone());
    c.model.api_key = Some(Secret::new("k"));
    let read = agent_ls_runtime::model::ToolCall {
        id: "toolu_1".into(),
        name: "propose_edit".into(),
        arguments: json!({"path": "c.py"}),
    };
    let req = Request {
        messages: vec![
            Message::system("be brief"),
            Message::user("the goal and the files"),
            Message::calls("", vec![read.clone()]),
            Message::tool_result(&read, "c.py:1: def f():"),
        ],
        tools: vec![edit_tool()],
        ..Request::default()
    };
    call(&models(&c), Role::Coder, &req).unwrap();
    let body = &server.requests()[0].body;
    let ephemeral = json!({"type": "ephemeral"});
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"][0]["cache_control"], ephemeral);
    let last = messages.last().unwrap()["content"].as_array().unwrap();
    assert_eq!(last.last().unwrap()["type"], "tool_result");
    assert_eq!(last.last().unwrap()["cache_control"], ephemeral);
    assert_eq!(body.to_string().matches("\"cache_control\"").count(), 4);
}

#[test]
fn cached_prompt_tokens_are_read_from_both_providers_usage() {
    let mut anthropic = anthropic_stream(&["ok"], None);
    if let Reply::Sse { events, .. } = &mut anthropic {
        events[0] = format!(
            "event: message_start\ndata: {}",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 10, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 90, "output_tokens": 1}}})
        );
    }
    let server = ModelServer::start(vec![anthropic]);
    let mut c = Config::default();
    c.model.provider = Some("anthropic".into());
    c.model.base_url = Some(server.url.clone());
    c.model.api_key = Some(Secret::new("k"));
    let r = call(&models(&c), Role::Coder, &ask()).unwrap();
    assert_eq!(
        (
            r.usage.input_tokens,
            r.usage.cached_tokens,
            r.usage.cache_write_tokens
        ),
        (1000, 900, 90)
    );
    let server = ModelServer::start(vec![Reply::Sse {
        events: vec![
            json!({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}).to_string(),
            json!({"choices": [], "usage": {"prompt_tokens": 500, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 384}}}).to_string(),
            "[DONE]".into(),
        ],
        stall_after: None,
    }]);
    let mut c = Config::default();
    c.model.provider = Some("openai".into());
    c.model.base_url = Some(format!("{}/v1", server.url));
    c.model.api_key = Some(Secret::new("k"));
    let r = call(&models(&c), Role::Coder, &ask()).unwrap();
    assert_eq!((r.usage.input_tokens, r.usage.cached_tokens), (500, 384));
}

#[test]
fn anthropic_json_schema_answers_come_back_as_text() {
    let server = ModelServer::start(vec![anthropic_stream(
        &[],
        Some(("verdict", &["{\"passed\": true}"])),
    )]);
    let mut c = Config::default();
    c.model.provider = Some("anthropic".into());
    c.model.base_url = Some(server.url.clone());
    c.model.api_key = Some(Secret::new("k"));
    let req = Request {
        json_schema: Some(("verdict".into(), json!({"type": "object"}))),
        ..ask()
    };
    let r = call(&models(&c), Role::Reflector, &req).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.text).unwrap(),
        json!({"passed": true})
    );
    assert_eq!(server.requests()[0].body["tool_choice"]["name"], "verdict");
}

#[test]
fn anthropic_overload_is_retried_and_401_names_the_variable() {
    let server = ModelServer::start(vec![
        Reply::status(529, "{\"type\": \"error\"}"),
        anthropic_stream(&["ok"], None),
    ]);
    let mut c = Config::default();
    c.model.provider = Some("anthropic".into());
    c.model.base_url = Some(server.url.clone());
    let m = models(&c);
    assert_eq!(call(&m, Role::Coder, &ask()).unwrap().attempts, 2);
    server.push(Reply::status(401, "{}"));
    let err = call(&m, Role::Coder, &ask()).unwrap_err();
    assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");
}

#[test]
fn prices_give_a_cost() {
    let server = ModelServer::start(vec![openai_text(&["x"])]);
    let mut c = openai_config(&server.url);
    c.prices.insert(
        "test-model".into(),
        agent_ls_runtime::config::Price {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
        },
    );
    let r = call(&models(&c), Role::Coder, &ask()).unwrap();
    let cost = r.cost_usd.unwrap();
    assert!(
        (cost - (11.0 * 1.0 + 7.0 * 2.0) / 1e6).abs() < 1e-12,
        "{cost}"
    );
}

#[test]
fn replay_answers_per_role_through_the_same_entry_point() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.jsonl"),
        "{\"role\": \"planner\", \"content\": \"the plan\"}\n",
    )
    .unwrap();
    let mut c = Config::default();
    c.model.provider = Some("replay".into());
    c.model.replay_file = Some("script.jsonl".into());
    let m = Models::new(&c, Some(dir.path()));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt
        .block_on(m.call(Role::Planner, &ask(), &CancellationToken::new(), None))
        .unwrap();
    assert_eq!(r.text, "the plan");
    let err = rt
        .block_on(m.call(Role::Planner, &ask(), &CancellationToken::new(), None))
        .unwrap_err();
    assert!(matches!(err, ModelError::ReplayExhausted { .. }));
}

#[test]
fn json_object_rejected_too_falls_back_to_instructions_only() {
    // llama-cpp-python answers an unknown response_format with a 500 that names the field.
    let server = ModelServer::start(vec![
        Reply::status(
            500,
            "{\"error\": {\"message\": \"body.response_format.type: Input should be 'text'\"}}",
        ),
        Reply::status(400, "{\"error\": \"response_format is not supported\"}"),
        openai_text(&["{}"]),
    ]);
    let mut c = openai_config(&server.url);
    c.model.name = Some("plain-model".into());
    let req = Request {
        json_schema: Some(("x".into(), json!({"type": "object"}))),
        ..ask()
    };
    call(&models(&c), Role::Evaluator, &req).unwrap();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[2].body.get("response_format").is_none());
}

#[test]
fn a_tool_name_repeated_in_every_fragment_is_kept_once() {
    let events = vec![
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "pick", "arguments": "{\"a\":"}}]}}]}).to_string(),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "pick", "arguments": " 1}"}}]}}]}).to_string(),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
        "[DONE]".to_string(),
    ];
    let server = ModelServer::start(vec![Reply::Sse {
        events,
        stall_after: None,
    }]);
    let req = Request {
        tools: vec![edit_tool()],
        ..ask()
    };
    let r = call(&models(&openai_config(&server.url)), Role::Coder, &req).unwrap();
    assert_eq!(
        (
            r.tool_calls[0].name.as_str(),
            r.tool_calls[0].arguments.clone()
        ),
        ("pick", json!({"a": 1}))
    );
}
