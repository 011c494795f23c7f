//! The Anthropic Messages API: streaming, tool use and system prompts. A JSON-schema answer
//! is asked for as a forced call of a tool whose input schema is the schema.

use std::time::Instant;

use serde_json::{Value, json};

use super::http::{Answer, Call, PartialCall, Streamed, bad_answer};
use super::sse::Limits;
use super::{ModelError, Request, Response, Speaker, Target, Usage};

const VERSION: &str = "2023-06-01";

pub(super) async fn complete(call: Call<'_>, request: &Request) -> Result<Response, ModelError> {
    let (http, target, max_tokens) = (call.http, call.target, call.max_tokens);
    let (idle, on_token) = (call.idle, call.on_token);
    let started = Instant::now();
    let schema_tool = request.json_schema.as_ref().map(|(name, _)| sanitize(name));
    let body = build_body(target, request, max_tokens, schema_tool.as_deref());
    let builder = http
        .post(format!("{}/v1/messages", target.base_url))
        .header("anthropic-version", VERSION)
        .json(&body);
    let limits = Limits::for_answer(max_tokens, idle);
    // A refusal's text is only shown. 529 is Anthropic's "overloaded", a transient server error.
    let response = super::http::send(builder, target, limits)
        .await?
        .map_err(|refused| refused.into_error(target))?;
    let mut answer = read_stream(target, Streamed::new(response, limits, target, on_token)).await?;
    // The schema answer came as the forced tool's input: hand it back as the text.
    if let Some(name) = &schema_tool
        && let Some(pos) = answer.tool_calls.iter().position(|c| &c.name == name)
    {
        let call = answer.tool_calls.remove(pos);
        answer.text = call.arguments.to_string();
    }
    let usage = answer.usage.unwrap_or_default();
    Ok(answer.into_response(target, usage, started))
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

/// The Messages API body: the system prompts joined, the conversation, the tools (with the
/// schema's tool forced), and the prompt cache's breakpoints.
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
    let mut messages = conversation(request);
    let (mut tools, tool_choice) = tools(request, schema_tool);
    // Prompt cache breakpoints on the parts that stay the same from call to call, in the
    // order the cache reads them: the tools, the system prompt, the fixed context (the first
    // user message), and the conversation so far (its last block), which the next tool round
    // extends. Four is Anthropic's limit.
    let cache = json!({"type": "ephemeral"});
    if let Some(last) = tools.last_mut() {
        last["cache_control"] = cache.clone();
    }
    breakpoint(messages.first_mut(), &cache);
    if messages.len() > 1 {
        breakpoint(messages.last_mut(), &cache);
    }
    let mut body = json!({
        "model": target.model,
        "max_tokens": max_tokens,
        "messages": messages,
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] =
            json!([{"type": "text", "text": system.join("\n\n"), "cache_control": cache}]);
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if let Some(choice) = tool_choice {
        body["tool_choice"] = choice;
    }
    body
}

/// The conversation but its system prompts, as Anthropic's user and assistant messages: an
/// assistant's tool calls as `tool_use` blocks, their results as `tool_result` blocks.
fn conversation(request: &Request) -> Vec<Value> {
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
                    // A call whose arguments were cut off is kept as its raw text (the repair
                    // names it); Anthropic takes only an object as `input`, so it goes back
                    // as an empty one, and the tool result says what was wrong.
                    let input = if c.arguments.is_object() {
                        c.arguments.clone()
                    } else {
                        json!({})
                    };
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input})
                }));
                messages.push(json!({"role": "assistant", "content": blocks}));
            }
            Speaker::Tool => {
                let block = json!({"type": "tool_result",
                    "tool_use_id": m.answers.as_ref().map_or("", |(id, _)| id.as_str()),
                    "content": m.content});
                push_tool_result(&mut messages, block);
            }
            Speaker::Assistant => messages.push(json!({"role": "assistant", "content": m.content})),
            Speaker::User | Speaker::System => {
                messages.push(json!({"role": "user", "content": m.content}))
            }
        }
    }
    messages
}

/// Adds a tool's result: the results of one turn's calls go back together, in one user
/// message.
fn push_tool_result(messages: &mut Vec<Value>, block: Value) {
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

/// The request's tools and the forced choice; a JSON schema is one more tool, forced.
fn tools(request: &Request, schema_tool: Option<&str>) -> (Vec<Value>, Option<Value>) {
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
    (tools, tool_choice)
}

/// Marks a message's last content block as a cache breakpoint (a text content becomes one
/// text block to carry it).
fn breakpoint(message: Option<&mut Value>, cache: &Value) {
    let Some(m) = message else { return };
    if let Some(text) = m["content"].as_str().map(String::from) {
        if text.is_empty() {
            return;
        }
        m["content"] = json!([{"type": "text", "text": text}]);
    }
    if let Some(last) = m["content"].as_array_mut().and_then(|b| b.last_mut()) {
        last["cache_control"] = cache.clone();
    }
}

/// Reads the streamed answer up to `message_stop`: text blocks are passed on as text; only
/// tool-use blocks are kept, as calls.
async fn read_stream(target: &Target, mut stream: Streamed<'_>) -> Result<Answer, ModelError> {
    let mut usage = Usage::default();
    let (mut stopped, mut cut_off) = (false, false);
    while let Some(event) = stream.next().await? {
        let data: Value = match serde_json::from_str(&event.data) {
            Ok(v) => v,
            Err(_) if event.event == "ping" => continue,
            Err(e) => {
                return Err(bad_answer(
                    target,
                    format!("a stream event is not JSON ({e})"),
                ));
            }
        };
        match data["type"].as_str().unwrap_or(event.event.as_str()) {
            "message_start" => prompt_usage(&mut usage, &data["message"]["usage"]),
            "content_block_start" => start_block(&mut stream, &data),
            "content_block_delta" => delta(&mut stream, &data),
            "message_delta" => {
                cut_off |= data["delta"]["stop_reason"] == "max_tokens";
                if let Some(n) = data["usage"]["output_tokens"].as_u64() {
                    usage.output_tokens = n;
                }
            }
            "message_stop" => {
                stopped = true;
                break;
            }
            "error" => return Err(stream_error(target, &data)),
            _ => {}
        }
    }
    if !stopped {
        return Err(ModelError::Truncated {
            provider: target.label(),
            reason: "the stream ended before message_stop".into(),
        });
    }
    let mut answer = stream.finish(target, Some(usage))?;
    answer.cut_off = cut_off;
    Ok(answer)
}

/// The prompt's usage from `message_start`: Anthropic counts the cached prompt apart; the
/// total is the prompt's size.
fn prompt_usage(usage: &mut Usage, u: &Value) {
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    usage.cached_tokens = n("cache_read_input_tokens");
    usage.cache_write_tokens = n("cache_creation_input_tokens");
    usage.input_tokens = n("input_tokens") + usage.cached_tokens + usage.cache_write_tokens;
}

/// `content_block_start`: a tool-use block begins a call at its index.
fn start_block(stream: &mut Streamed<'_>, data: &Value) {
    let index = data["index"].as_u64().unwrap_or(0);
    let block = &data["content_block"];
    if block["type"] == "tool_use" {
        stream.calls.insert(
            index,
            PartialCall {
                id: block["id"].as_str().unwrap_or_default().into(),
                name: block["name"].as_str().unwrap_or_default().into(),
                arguments: String::new(),
            },
        );
    }
}

/// `content_block_delta`: a piece of text, or a fragment of a call's JSON input.
fn delta(stream: &mut Streamed<'_>, data: &Value) {
    let index = data["index"].as_u64().unwrap_or(0);
    let delta = &data["delta"];
    if let Some(piece) = delta["text"].as_str() {
        stream.push_text(piece);
    } else if let Some(part) = delta["partial_json"].as_str()
        && let Some(call) = stream.calls.get_mut(&index)
    {
        call.arguments.push_str(part);
    }
}

/// An `error` event: an overload mid-stream is worth a retry like a 529.
fn stream_error(target: &Target, data: &Value) -> ModelError {
    let kind = data["error"]["type"].as_str().unwrap_or("error");
    let message = data["error"]["message"].as_str().unwrap_or_default();
    if kind == "overloaded_error" || kind == "api_error" {
        ModelError::Truncated {
            provider: target.label(),
            reason: format!("{kind}: {message}"),
        }
    } else {
        bad_answer(target, format!("{kind}: {message}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_ls_core::conversation::{Message, ToolCall};

    #[test]
    fn a_cut_off_tool_call_goes_back_with_an_object_as_its_input() {
        let mut call = Message::assistant("");
        call.tool_calls = vec![ToolCall {
            id: "c1".into(),
            name: "edit_file".into(),
            arguments: Value::String("{\"path\": \"calc.py\", \"sea".into()),
        }];
        let request = Request {
            messages: vec![Message::user("fix it"), call],
            ..Default::default()
        };
        let messages = conversation(&request);
        let block = &messages[1]["content"][0];
        assert_eq!(block["type"], "tool_use");
        assert_eq!(block["input"], json!({}));
    }
}
