//! A scripted HTTP server on 127.0.0.1 that stands in for a model provider: it plays OpenAI
//! and Anthropic wire formats from a script of replies and injects faults (status codes,
//! stalled and truncated streams, malformed JSON). Every request it gets is recorded.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A plain response.
    Status {
        code: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// A server-sent event stream: each item is one event's `data:` (or a full event when it
    /// starts with "event:"). `stall_after` sends that many events then hangs; `truncate`
    /// closes the connection after the events.
    Sse {
        events: Vec<String>,
        stall_after: Option<usize>,
    },
    /// A 200 whose body is these bytes as they are (not UTF-8, say), of this content type.
    Bytes { content_type: String, body: Vec<u8> },
}

impl Reply {
    pub fn status(code: u16, body: &str) -> Reply {
        Reply::Status {
            code,
            headers: vec![],
            body: body.into(),
        }
    }

    pub fn json(body: Value) -> Reply {
        Reply::Status {
            code: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Answers a request from its body, when the script has no reply left: a stand-in model that
/// reacts to what it was sent.
pub type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Clone)]
pub struct ModelServer {
    pub url: String,
    script: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Recorder>,
}

/// The requests received, and a signal for whoever waits for one.
#[derive(Default)]
struct Recorder {
    list: Mutex<Vec<Recorded>>,
    arrived: Condvar,
}

impl ModelServer {
    pub fn start(script: Vec<Reply>) -> ModelServer {
        ModelServer::serving(script, None)
    }

    /// A server whose every answer `respond` makes from the request's body.
    pub fn answering(respond: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> ModelServer {
        ModelServer::serving(Vec::new(), Some(Arc::new(respond)))
    }

    fn serving(script: Vec<Reply>, respond: Option<Responder>) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let requests = Arc::new(Recorder::default());
        {
            let (script, requests) = (script.clone(), requests.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let (script, requests) = (script.clone(), requests.clone());
                    let respond = respond.clone();
                    std::thread::spawn(move || serve(stream, &script, &requests, respond));
                }
            });
        }
        ModelServer {
            url,
            script,
            requests,
        }
    }

    pub fn push(&self, reply: Reply) {
        self.script.lock().unwrap().push_back(reply);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.list.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.requests.list.lock().unwrap().len()
    }

    /// Waits until the server has received `n` requests (or fails the test after 30 s).
    pub fn wait_for_requests(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut list = self.requests.list.lock().unwrap();
        while list.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the model server got {} of {n} requests",
                list.len()
            );
            list = self.requests.arrived.wait_timeout(list, left).unwrap().0;
        }
    }
}

fn serve(
    stream: TcpStream,
    script: &Mutex<VecDeque<Reply>>,
    requests: &Recorder,
    respond: Option<Responder>,
) {
    let Some(request) = read_request(&stream) else {
        return;
    };
    let scripted = script.lock().unwrap().pop_front();
    let reply = scripted
        .or_else(|| respond.map(|f| f(&request.body)))
        .unwrap_or_else(|| Reply::status(500, "the test script has no more replies"));
    requests.list.lock().unwrap().push(request);
    requests.arrived.notify_all();
    match reply {
        Reply::Status {
            code,
            headers,
            body,
        } => write_status(stream, code, &headers, &body),
        Reply::Sse {
            events,
            stall_after,
        } => write_events(stream, &events, stall_after),
        Reply::Bytes { content_type, body } => write_bytes(stream, &content_type, &body),
    }
}

/// One HTTP/1.1 request off the connection: its line, its headers, and its body as JSON (null
/// when it is not); None when the client closed first.
fn read_request(stream: &TcpStream) -> Option<Recorded> {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return None;
    }
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    Some(Recorded {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

/// A whole answer with `code`, JSON unless `headers` name another type.
fn write_status(mut out: TcpStream, code: u16, headers: &[(String, String)], body: &str) {
    let mut head = format!(
        "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let _ = out.write_all(format!("{head}\r\n{body}").as_bytes());
}

/// A 200 with `body` byte for byte.
fn write_bytes(mut out: TcpStream, content_type: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(body);
}

/// A server-sent event stream of `events`, going silent for a minute before event
/// `stall_after` (or after the last, when it is the count) as a stalled server does.
fn write_events(mut out: TcpStream, events: &[String], stall_after: Option<usize>) {
    let _ = out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    );
    for (i, e) in events.iter().enumerate() {
        if stall_after == Some(i) {
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        let frame = if e.starts_with("event:") {
            format!("{e}\n\n")
        } else {
            format!("data: {e}\n\n")
        };
        if out.write_all(frame.as_bytes()).is_err() {
            return;
        }
        let _ = out.flush();
    }
    if stall_after == Some(events.len()) {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// An OpenAI stream whose `name` call stops at the output limit (`finish_reason: length`)
/// after `arguments`, as a model cut off mid-call sends it.
pub fn openai_cut_off_call(name: &str, arguments: &str) -> Reply {
    let call = |f: Value| json!({"choices": [{"index": 0, "delta": {"tool_calls": [f]}}]});
    let events = vec![
        call(json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": ""}})).to_string(),
        call(json!({"index": 0, "function": {"arguments": arguments}})).to_string(),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}).to_string(),
        "[DONE]".into(),
    ];
    Reply::Sse {
        events,
        stall_after: None,
    }
}

/// An OpenAI stream that says `text` with the bytes `bad` where `@BAD@` stands: bytes that
/// are not UTF-8, as a broken proxy or a model server's tokenizer may send.
pub fn openai_text_with_bytes(text: &str, bad: &[u8]) -> Reply {
    let piece =
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    let mut body = Vec::new();
    for event in [piece.to_string(), end.to_string(), "[DONE]".into()] {
        body.extend_from_slice(b"data: ");
        let mut parts = event.split("@BAD@");
        body.extend_from_slice(parts.next().unwrap_or_default().as_bytes());
        for rest in parts {
            body.extend_from_slice(bad);
            body.extend_from_slice(rest.as_bytes());
        }
        body.extend_from_slice(b"\n\n");
    }
    Reply::Bytes {
        content_type: "text/event-stream".into(),
        body,
    }
}

/// Everything a request's messages say, as a stand-in model reads it: each message's text
/// and the arguments of its tool calls (the benches' scripted models decide from it).
pub fn conversation(body: &Value) -> String {
    let mut out = String::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        if let Some(c) = m["content"].as_str() {
            out.push_str(c);
        }
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            out.push_str(c["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    out
}

/// An OpenAI chat stream that says `pieces` and finishes, with usage.
pub fn openai_text(pieces: &[&str]) -> Reply {
    let mut events: Vec<String> = pieces
        .iter()
        .map(|p| {
            json!({"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": null}]})
                .to_string()
        })
        .collect();
    events
        .push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string());
    events.push(
        json!({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7}}).to_string(),
    );
    events.push("[DONE]".into());
    Reply::Sse {
        events,
        stall_after: None,
    }
}

/// An OpenAI stream with one tool call whose arguments arrive in `fragments`.
pub fn openai_tool_call(name: &str, fragments: &[&str]) -> Reply {
    openai_tool_call_as("call_1", name, fragments)
}

/// As `openai_tool_call`, with the call's id.
pub fn openai_tool_call_as(id: &str, name: &str, fragments: &[&str]) -> Reply {
    let mut events = vec![json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}}]}).to_string()];
    for f in fragments {
        events.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": f}}]}}]}).to_string());
    }
    events.push(
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
    );
    events.push("[DONE]".into());
    Reply::Sse {
        events,
        stall_after: None,
    }
}

/// An Anthropic message stream with text pieces and optionally one tool use.
pub fn anthropic_stream(pieces: &[&str], tool: Option<(&str, &[&str])>) -> Reply {
    let mut events = vec![
        format!(
            "event: message_start\ndata: {}",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 21, "output_tokens": 1}}})
        ),
        format!(
            "event: content_block_start\ndata: {}",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        ),
    ];
    for p in pieces {
        events.push(format!("event: content_block_delta\ndata: {}", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}})));
    }
    events.push(format!(
        "event: content_block_stop\ndata: {}",
        json!({"type": "content_block_stop", "index": 0})
    ));
    if let Some((name, parts)) = tool {
        events.push(format!("event: content_block_start\ndata: {}", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": name, "input": {}}})));
        for p in parts {
            events.push(format!("event: content_block_delta\ndata: {}", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": p}})));
        }
        events.push(format!(
            "event: content_block_stop\ndata: {}",
            json!({"type": "content_block_stop", "index": 1})
        ));
    }
    events.push(format!("event: message_delta\ndata: {}", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}})));
    events.push(format!(
        "event: message_stop\ndata: {}",
        json!({"type": "message_stop"})
    ));
    Reply::Sse {
        events,
        stall_after: None,
    }
}
