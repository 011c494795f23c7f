//! OpenAI-compatible chat completions (OpenAI, Ollama, llama.cpp's server, vLLM, LM Studio):
//! streaming, tool calls, `response_format` with a JSON schema, and a fallback to
//! instruction-only JSON when a server rejects `response_format` or tools.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Value, json};

use super::http::{Answer, Call, Streamed, bad_answer};
use super::sse::{Limits, read_capped};
use super::{Message, ModelError, Request, Response, Speaker, Target, ToolCall, Usage};

/// Servers that rejected native JSON schemas or tools, so later calls go straight to the
/// instruction-only form instead of failing first every time.
static DOWNGRADED: Mutex<BTreeMap<String, Mode>> = Mutex::new(BTreeMap::new());

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    schema: SchemaMode,
    native_tools: bool,
}

/// How a JSON schema is asked for, from the most to the least exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SchemaMode {
    /// `response_format: {"type": "json_schema", ...}` (OpenAI, vLLM, LM Studio, Ollama).
    JsonSchema,
    /// `response_format: {"type": "json_object", "schema": ...}` with the schema also in a
    /// system message (llama-cpp-python, which rejects "json_schema" but constrains
    /// "json_object" output to the schema).
    JsonObject,
    /// Only the system message.
    Instructions,
}

impl SchemaMode {
    fn next(self) -> Option<SchemaMode> {
        match self {
            SchemaMode::JsonSchema => Some(SchemaMode::JsonObject),
            SchemaMode::JsonObject => Some(SchemaMode::Instructions),
            SchemaMode::Instructions => None,
        }
    }
}

pub(super) async fn complete(call: Call<'_>, request: &Request) -> Result<Response, ModelError> {
    let (http, target, max_tokens) = (call.http, call.target, call.max_tokens);
    let (idle, on_token) = (call.idle, call.on_token);
    let key = format!("{} {}", target.base_url, target.model);
    let mut mode = DOWNGRADED
        .lock()
        .ok()
        .and_then(|m| m.get(&key).copied())
        .unwrap_or(Mode {
            schema: SchemaMode::JsonSchema,
            native_tools: true,
        });
    let limits = Limits::for_answer(max_tokens, idle);
    loop {
        let started = Instant::now();
        let body = build_body(target, request, max_tokens, mode);
        let builder = http
            .post(format!("{}/chat/completions", target.base_url))
            .json(&body);
        let response = match super::http::send(builder, target, limits).await? {
            Ok(response) => response,
            Err(refused) => {
                if let Some(next) = simpler_mode(mode, request, &refused) {
                    tracing::warn!(model = %target.label(), "the server rejected a native feature; using instructions instead");
                    if let Ok(mut m) = DOWNGRADED.lock() {
                        m.insert(key.clone(), next);
                    }
                    mode = next;
                    continue;
                }
                return Err(refused.into_error(target));
            }
        };
        let is_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        let mut answer = if is_stream {
            read_stream(target, Streamed::new(response, limits, target, on_token)).await?
        } else {
            let text = read_capped(response, limits, target.label()).await?;
            read_whole(target, &text)?
        };
        if !mode.native_tools && !request.tools.is_empty() {
            answer.tool_calls = tool_call_from_text(target, &answer.text)?;
        }
        let usage = answer
            .usage
            .unwrap_or_else(|| super::estimate_usage(request, &answer.text));
        return Ok(answer.into_response(target, usage, started));
    }
}

/// A server that does not know response_format or tools says so, with a 400 or 422 (or,
/// llama-cpp-python, a 500 naming the field): the form to ask again in, if one is left.
fn simpler_mode(mode: Mode, request: &Request, refused: &super::http::Refused) -> Option<Mode> {
    if !matches!(refused.status, 400 | 422 | 500) {
        return None;
    }
    let lower = refused.text.to_lowercase();
    let schema_next = mode.schema.next().filter(|_| request.json_schema.is_some());
    let wants_tools = !request.tools.is_empty() && mode.native_tools;
    let names_schema = lower.contains("response_format") || lower.contains("json_schema");
    if let Some(schema) = schema_next.filter(|_| names_schema) {
        Some(Mode { schema, ..mode })
    } else if wants_tools && lower.contains("tool") {
        Some(Mode {
            native_tools: false,
            ..mode
        })
    } else {
        None
    }
}

/// The chat completions body: the conversation, then what the mode asks for the schema and
/// the tools (native fields, or system messages that say the form to answer in).
fn build_body(target: &Target, request: &Request, max_tokens: u32, mode: Mode) -> Value {
    let mut messages: Vec<Value> = request.messages.iter().map(|m| message(m, mode)).collect();
    let mut body = json!({
        "model": target.model,
        "messages": [],
        "max_tokens": max_tokens,
        "temperature": 0.2,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some((name, schema)) = &request.json_schema {
        ask_schema(&mut body, &mut messages, (name, schema), mode);
    }
    if !request.tools.is_empty() {
        offer_tools(&mut body, &mut messages, request, mode);
    }
    body["messages"] = Value::Array(messages);
    body
}

/// One message of the conversation; without native tools, calls and results are text.
fn message(m: &Message, mode: Mode) -> Value {
    match m.speaker {
        Speaker::System => json!({"role": "system", "content": m.content}),
        Speaker::User => json!({"role": "user", "content": m.content}),
        Speaker::Assistant if m.tool_calls.is_empty() => {
            json!({"role": "assistant", "content": m.content})
        }
        // Content is a string even when empty: llama.cpp's Python server refuses null
        // beside tool calls, and OpenAI takes both.
        Speaker::Assistant if mode.native_tools => json!({
            "role": "assistant",
            "content": m.content,
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.to_string()}
            })).collect::<Vec<_>>(),
        }),
        // The text protocol answers one call at a time, as the object it asked for.
        Speaker::Assistant => {
            let calls: Vec<String> = m
                .tool_calls
                .iter()
                .map(|c| json!({"tool": c.name, "arguments": c.arguments}).to_string())
                .collect();
            json!({"role": "assistant", "content": calls.join("\n")})
        }
        Speaker::Tool => match (&m.answers, mode.native_tools) {
            (Some((id, _)), true) => {
                json!({"role": "tool", "tool_call_id": id, "content": m.content})
            }
            (answers, _) => json!({"role": "user", "content": format!(
                "Result of {}:\n{}",
                answers.as_ref().map_or("the tool", |(_, name)| name.as_str()),
                m.content
            )}),
        },
    }
}

/// Asks for an answer that matches the schema `(name, schema)`, in the mode's form.
fn ask_schema(
    body: &mut Value,
    messages: &mut Vec<Value>,
    (name, schema): (&str, &Value),
    mode: Mode,
) {
    match mode.schema {
        SchemaMode::JsonSchema => {
            body["response_format"] =
                json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema}});
        }
        SchemaMode::JsonObject | SchemaMode::Instructions => {
            if mode.schema == SchemaMode::JsonObject {
                body["response_format"] = json!({"type": "json_object", "schema": schema});
            }
            messages.push(json!({"role": "system", "content": format!(
                "Answer with only one JSON object, no prose and no code fence, that matches this JSON schema:\n{schema}"
            )}));
        }
    }
}

/// Offers the request's tools: as `tools` (with the forced choice), or, without native
/// tools, as a system message that lists them and says how to call one.
fn offer_tools(body: &mut Value, messages: &mut Vec<Value>, request: &Request, mode: Mode) {
    if mode.native_tools {
        body["tools"] = Value::Array(
            request
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                .collect(),
        );
        if let Some(name) = &request.tool_choice {
            body["tool_choice"] = json!({"type": "function", "function": {"name": name}});
        }
        return;
    }
    let list: Vec<String> = request
        .tools
        .iter()
        .map(|t| {
            format!(
                "- {}: {} Arguments schema: {}",
                t.name, t.description, t.parameters
            )
        })
        .collect();
    messages.push(json!({"role": "system", "content": format!(
        "To call a tool, answer with only one JSON object {{\"tool\": NAME, \"arguments\": {{...}}}} and nothing else. Tools:\n{}",
        list.join("\n")
    )}));
}

/// An OpenAI usage object, with the prompt tokens its prompt cache served.
fn usage_of(u: &Value) -> Usage {
    Usage {
        input_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
        cached_tokens: u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
        ..Usage::default()
    }
}

async fn read_stream(target: &Target, mut stream: Streamed<'_>) -> Result<Answer, ModelError> {
    let mut usage = None;
    let (mut finished, mut done, mut cut_off) = (false, false, false);
    while let Some(event) = stream.next().await? {
        if event.data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let chunk: Value = serde_json::from_str(&event.data)
            .map_err(|e| bad_answer(target, format!("a stream event is not JSON ({e})")))?;
        if let Some(err) = chunk.get("error") {
            return Err(bad_answer(target, err.to_string()));
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            usage = Some(usage_of(u));
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        if choice["finish_reason"].is_string() {
            finished = true;
            cut_off |= choice["finish_reason"] == "length";
        }
        let delta = &choice["delta"];
        if let Some(piece) = delta["content"].as_str().filter(|s| !s.is_empty()) {
            stream.push_text(piece);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(0);
            let entry = stream.calls.entry(index).or_default();
            if let Some(id) = call["id"].as_str() {
                entry.id = id.to_string();
            }
            // The name comes once (OpenAI) or again with every fragment (llama-cpp-python).
            if let Some(name) = call["function"]["name"]
                .as_str()
                .filter(|_| entry.name.is_empty())
            {
                entry.name = name.to_string();
            }
            if let Some(args) = call["function"]["arguments"].as_str() {
                entry.arguments.push_str(args);
            }
        }
    }
    if !done && !finished {
        return Err(ModelError::Truncated {
            provider: target.label(),
            reason: "the stream ended without a finish reason or [DONE]".into(),
        });
    }
    let mut answer = stream.finish(target, usage)?;
    answer.cut_off = cut_off;
    Ok(answer)
}

fn read_whole(target: &Target, body: &str) -> Result<Answer, ModelError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| bad_answer(target, format!("the answer is not JSON ({e})")))?;
    let message = &v["choices"][0]["message"];
    if message.is_null() {
        return Err(bad_answer(target, "no choices[0].message"));
    }
    let tool_calls = message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            super::http::tool_call(
                target,
                c["id"].as_str().unwrap_or_default().to_string(),
                c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                c["function"]["arguments"].as_str().unwrap_or("{}"),
            )
        })
        .collect::<Result<_, _>>()?;
    let usage = v.get("usage").filter(|u| !u.is_null()).map(usage_of);
    Ok(Answer {
        text: message["content"].as_str().unwrap_or_default().to_string(),
        tool_calls,
        usage,
        cut_off: v["choices"][0]["finish_reason"] == "length",
        bad_bytes: Vec::new(),
    })
}

/// The instruction-only form of a tool call: `{"tool": NAME, "arguments": {...}}` as text.
fn tool_call_from_text(_target: &Target, text: &str) -> Result<Vec<ToolCall>, ModelError> {
    let trimmed = text
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim();
    let Ok(v) = serde_json::from_str::<Value>(trimmed) else {
        return Ok(Vec::new());
    };
    let Some(name) = v["tool"].as_str().or(v["name"].as_str()) else {
        return Ok(Vec::new());
    };
    // Arguments that do not parse stay their raw text, for the loop to have mended.
    let arguments = match &v["arguments"] {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v["arguments"].clone()),
        other => other.clone(),
    };
    Ok(vec![ToolCall {
        id: "call_0".into(),
        name: name.to_string(),
        arguments,
    }])
}
