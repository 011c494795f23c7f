//! The Anthropic Messages API: streaming, tool use and system prompts. A JSON-schema answer
//! is asked for as a forced call of a tool whose input schema is the schema.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::sse::{Events, Limits, read_capped};
use super::{ModelError, OnToken, Request, Response, Speaker, Target, ToolCall, Usage};

const VERSION: &str = "2023-06-01";

pub async fn complete(
    http: &reqwest::Client,
    target: &Target,
    request: &Request,
    max_tokens: u32,
    idle: Duration,
    on_token: Option<OnToken<'_>>,
) -> Result<Response, ModelError> {
    let started = Instant::now();
    let schema_tool = request.json_schema.as_ref().map(|(name, _)| sanitize(name));
    let body = build_body(target, request, max_tokens, schema_tool.as_deref());
    let mut builder = http
        .post(format!("{}/v1/messages", target.base_url))
        .header("anthropic-version", VERSION)
        .json(&body);
    if let Some(k) = target.api_key.as_ref().filter(|k| !k.is_empty()) {
        builder = builder.header("x-api-key", k.expose());
    }
    let limits = Limits::for_answer(max_tokens, idle);
    let response = builder
        .send()
        .await
        .map_err(|e| super::connect_error(target, &e))?;
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        let retry_after = super::retry_after(response.headers());
        // An error's text is read with the same bounds as an answer: it is only shown.
        let text = read_capped(response, limits, target.label())
            .await
            .unwrap_or_default();
        // 529 is Anthropic's "overloaded", a transient server error.
        return Err(super::status_error(target, status, &text, retry_after));
    }
    let mut answer = read_stream(target, response, limits, on_token).await?;
    // The schema answer came as the forced tool's input: hand it back as the text.
    if let Some(name) = &schema_tool
        && let Some(pos) = answer.tool_calls.iter().position(|c| &c.name == name)
    {
        let call = answer.tool_calls.remove(pos);
        answer.text = call.arguments.to_string();
    }
    let usage = answer.usage;
    Ok(Response {
        text: answer.text,
        tool_calls: answer.tool_calls,
        usage,
        provider: target.provider.clone(),
        model: target.model.clone(),
        duration_ms: started.elapsed().as_millis() as u64,
        attempts: 1,
        cost_usd: None,
    })
}

/// Tool names allow letters, digits, `_` and `-`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn build_body(
    target: &Target,
    request: &Request,
    max_tokens: u32,
    schema_tool: Option<&str>,
) -> Value {
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.speaker == Speaker::System)
        .map(|m| m.content.as_str())
        .collect();
    let mut messages: Vec<Value> = Vec::new();
    for m in request
        .messages
        .iter()
        .filter(|m| m.speaker != Speaker::System)
    {
        match m.speaker {
            Speaker::Assistant if !m.tool_calls.is_empty() => {
                let mut blocks: Vec<Value> = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                blocks.extend(m.tool_calls.iter().map(|c| {
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
                }));
                messages.push(json!({"role": "assistant", "content": blocks}));
            }
            Speaker::Tool => {
                let block = json!({"type": "tool_result",
                    "tool_use_id": m.answers.as_ref().map_or("", |(id, _)| id.as_str()),
                    "content": m.content});
                // The results of one turn's calls go back together, in one user message.
                match messages.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["content"]
                                .as_array()
                                .is_some_and(|b| b.iter().all(|b| b["type"] == "tool_result")) =>
                    {
                        if let Some(blocks) = last["content"].as_array_mut() {
                            blocks.push(block);
                        }
                    }
                    _ => messages.push(json!({"role": "user", "content": [block]})),
                }
            }
            Speaker::Assistant => messages.push(json!({"role": "assistant", "content": m.content})),
            Speaker::User | Speaker::System => {
                messages.push(json!({"role": "user", "content": m.content}))
            }
        }
    }
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect();
    let mut tool_choice = request
        .tool_choice
        .as_ref()
        .map(|n| json!({"type": "tool", "name": n}));
    if let (Some(name), Some((_, schema))) = (schema_tool, &request.json_schema) {
        tools.push(json!({"name": name, "description": "Give the answer as this tool's input.", "input_schema": schema}));
        tool_choice = Some(json!({"type": "tool", "name": name}));
    }
    let mut body = json!({
        "model": target.model,
        "max_tokens": max_tokens,
        "messages": messages,
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if let Some(choice) = tool_choice {
        body["tool_choice"] = choice;
    }
    body
}

struct Answer {
    text: String,
    tool_calls: Vec<ToolCall>,
    usage: Usage,
}

#[derive(Default)]
struct Block {
    id: String,
    name: String,
    json: String,
    is_tool: bool,
}

async fn read_stream(
    target: &Target,
    response: reqwest::Response,
    limits: Limits,
    on_token: Option<OnToken<'_>>,
) -> Result<Answer, ModelError> {
    let mut events = Events::new(response, limits, target.label());
    let mut text = String::new();
    let mut blocks: BTreeMap<u64, Block> = BTreeMap::new();
    let mut usage = Usage::default();
    let mut stopped = false;
    loop {
        let Some(event) = events.next().await? else {
            break;
        };
        let data: Value = match serde_json::from_str(&event.data) {
            Ok(v) => v,
            Err(_) if event.event == "ping" => continue,
            Err(e) => {
                return Err(ModelError::BadAnswer {
                    provider: target.label(),
                    reason: format!("a stream event is not JSON ({e})"),
                });
            }
        };
        match data["type"].as_str().unwrap_or(event.event.as_str()) {
            "message_start" => {
                usage.input_tokens = data["message"]["usage"]["input_tokens"]
                    .as_u64()
                    .unwrap_or(0);
            }
            "content_block_start" => {
                let index = data["index"].as_u64().unwrap_or(0);
                let block = &data["content_block"];
                blocks.insert(
                    index,
                    Block {
                        id: block["id"].as_str().unwrap_or_default().into(),
                        name: block["name"].as_str().unwrap_or_default().into(),
                        json: String::new(),
                        is_tool: block["type"] == "tool_use",
                    },
                );
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().unwrap_or(0);
                let delta = &data["delta"];
                if let Some(piece) = delta["text"].as_str() {
                    text.push_str(piece);
                    if let Some(f) = on_token {
                        f(piece);
                    }
                } else if let Some(part) = delta["partial_json"].as_str()
                    && let Some(b) = blocks.get_mut(&index)
                {
                    b.json.push_str(part);
                }
            }
            "message_delta" => {
                if let Some(n) = data["usage"]["output_tokens"].as_u64() {
                    usage.output_tokens = n;
                }
            }
            "message_stop" => {
                stopped = true;
                break;
            }
            "error" => {
                let kind = data["error"]["type"].as_str().unwrap_or("error");
                let message = data["error"]["message"].as_str().unwrap_or_default();
                // An overload mid-stream is worth a retry like a 529.
                return Err(if kind == "overloaded_error" || kind == "api_error" {
                    ModelError::Truncated {
                        provider: target.label(),
                        reason: format!("{kind}: {message}"),
                    }
                } else {
                    ModelError::BadAnswer {
                        provider: target.label(),
                        reason: format!("{kind}: {message}"),
                    }
                });
            }
            _ => {}
        }
    }
    if !stopped {
        return Err(ModelError::Truncated {
            provider: target.label(),
            reason: "the stream ended before message_stop".into(),
        });
    }
    let tool_calls = blocks
        .into_values()
        .filter(|b| b.is_tool)
        .map(|b| {
            let raw = if b.json.trim().is_empty() {
                "{}"
            } else {
                b.json.as_str()
            };
            serde_json::from_str(raw)
                .map(|arguments| ToolCall {
                    id: b.id.clone(),
                    name: b.name.clone(),
                    arguments,
                })
                .map_err(|e| ModelError::InvalidToolCall {
                    provider: target.label(),
                    tool: b.name.clone(),
                    reason: e.to_string(),
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(Answer {
        text,
        tool_calls,
        usage,
    })
}
