//! The stdio transport: it frames the client's bytes, parses each message once, and routes
//! it. Document notifications (`didOpen`, `didChange`, `didClose`, `didSave`, configuration
//! changes and progress cancels) go straight to the session in wire order; answers to our own
//! requests go to the outbox that sent them; every other message goes on to tower-lsp.
//! Malformed input is answered here, because tower-lsp's reader stops for good at the first
//! message it cannot decode (tokio-util's `FramedRead` ends the stream after an error).
//!
//! It must not hold state of its own beyond the bytes of the message being read, and it
//! never waits on the session.

use std::borrow::Cow;
use std::io::Read;
use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, de::IgnoredAny};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tower_lsp_server::jsonrpc::{Id, Request};
use tower_lsp_server::ls_types::{
    DidChangeConfigurationParams, DidChangeTextDocumentParams, DidCloseTextDocumentParams,
    DidSaveTextDocumentParams, Uri, WorkDoneProgressCancelParams,
};
use tracing::{error, warn};

use super::json_text;
use super::outbox::Outbox;

/// Larger messages are refused rather than buffered; no editor sends documents this big.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// A header block longer than this without its blank line is an error, not a reason to wait.
const MAX_HEADER_BYTES: usize = 8 * 1024;
/// Bytes read from stdin at a time.
const READ_CHUNK: usize = 1024 * 1024;

/// A document or workspace notification, parsed, on its way to the session.
#[derive(Debug)]
pub enum Notice {
    Opened(Opened),
    Changed(DidChangeTextDocumentParams),
    Closed(DidCloseTextDocumentParams),
    Saved(DidSaveTextDocumentParams),
    Configuration(DidChangeConfigurationParams),
    ProgressCancel(WorkDoneProgressCancelParams),
}

/// `textDocument/didOpen`.
#[derive(Debug)]
pub struct Opened {
    pub uri: Uri,
    pub version: i32,
    pub text: String,
}

/// The notifications the transport hands to the session itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoticeKind {
    Open,
    Change,
    Close,
    Save,
    Configuration,
    ProgressCancel,
}

impl NoticeKind {
    fn of(method: &str) -> Option<NoticeKind> {
        Some(match method {
            "textDocument/didOpen" => NoticeKind::Open,
            "textDocument/didChange" => NoticeKind::Change,
            "textDocument/didClose" => NoticeKind::Close,
            "textDocument/didSave" => NoticeKind::Save,
            "workspace/didChangeConfiguration" => NoticeKind::Configuration,
            // tower-lsp 0.23 has no handler for it; it is the cancel button of our progress.
            "window/workDoneProgress/cancel" => NoticeKind::ProgressCancel,
            _ => return None,
        })
    }
}

/// A body past this size gets an allocation of its own that is freed when it is handled.
const LARGE_BODY_BYTES: usize = 1024 * 1024;

/// What the framer made of the next message in the input.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A complete message body, not yet checked.
    Message(Bytes),
    /// Input that is not a message, with the error response it deserves.
    Malformed { reason: String, response: Value },
}

/// Where the framer is in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Body {
        length: usize,
    },
    /// A message too large to take is skipped without being buffered.
    Skip {
        left: usize,
    },
    /// After a header error the body length is unknown: skip to the next `Content-Length`.
    Resync,
}

/// Splits a byte stream into `Content-Length` frames. Pure: the caller feeds bytes in.
pub struct Framer {
    buf: BytesMut,
    state: State,
}

impl Default for Framer {
    fn default() -> Self {
        Framer {
            buf: BytesMut::with_capacity(64 * 1024),
            state: State::Header,
        }
    }
}

impl Framer {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, or `None` until more bytes arrive.
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            match self.state {
                State::Skip { left } => {
                    let n = left.min(self.buf.len());
                    self.buf.advance(n);
                    if left > n {
                        self.state = State::Skip { left: left - n };
                        return None;
                    }
                    self.state = State::Header;
                }
                State::Resync => match find_content_length(&self.buf) {
                    Some(at) => {
                        self.buf.advance(at);
                        self.state = State::Header;
                    }
                    None => {
                        // Keep a tail in case the header name is split across reads.
                        let keep = self.buf.len().min(13);
                        self.buf.advance(self.buf.len() - keep);
                        return None;
                    }
                },
                State::Body { length } => {
                    if self.buf.len() < length {
                        self.buf.reserve(length - self.buf.len());
                        return None;
                    }
                    let body = self.buf.split_to(length).freeze();
                    if length > LARGE_BODY_BYTES {
                        // The rest of the input moves to a buffer of its own, so the body's
                        // allocation is freed with the body instead of living on under it.
                        let mut rest = BytesMut::with_capacity(64 * 1024);
                        rest.extend_from_slice(&self.buf);
                        self.buf = rest;
                    }
                    self.state = State::Header;
                    return Some(Frame::Message(body));
                }
                State::Header => {
                    let window = &self.buf[..self.buf.len().min(MAX_HEADER_BYTES + 4)];
                    let Some(header_end) = HEADER_END.find(window) else {
                        if self.buf.len() > MAX_HEADER_BYTES + 3 {
                            // Nothing past the limit is kept: the rest is skipped up to the
                            // next header.
                            self.buf.clear();
                            self.state = State::Resync;
                            return Some(parse_error(format!(
                                "a header block of more than {MAX_HEADER_BYTES} bytes without a blank line"
                            )));
                        }
                        return None;
                    };
                    let length = content_length(&self.buf[..header_end]);
                    self.buf.advance(header_end + 4);
                    match length {
                        Err(reason) => {
                            self.state = State::Resync;
                            return Some(parse_error(reason.to_string()));
                        }
                        Ok(length) if length > MAX_MESSAGE_BYTES => {
                            self.state = State::Skip { left: length };
                            return Some(Frame::Malformed {
                                reason: format!(
                                    "message of {length} bytes is over the {MAX_MESSAGE_BYTES}-byte limit"
                                ),
                                response: error_response(
                                    Value::Null,
                                    -32600,
                                    "Invalid Request: message too large",
                                ),
                            });
                        }
                        Ok(length) => self.state = State::Body { length },
                    }
                }
            }
        }
    }
}

fn parse_error(reason: String) -> Frame {
    Frame::Malformed {
        reason,
        response: error_response(Value::Null, -32700, "Parse error: bad message header"),
    }
}

/// A header block that does not give one readable `Content-Length`.
#[derive(Debug, thiserror::Error)]
enum BadHeader {
    #[error("header line without a colon: {0:?}")]
    NoColon(String),
    #[error("two Content-Length headers")]
    TwoLengths,
    #[error("Content-Length is not a number: {0:?}")]
    NotANumber(String),
    #[error("no Content-Length header")]
    NoLength,
}

/// The `Content-Length` of a header block; exactly one is required.
fn content_length(header: &[u8]) -> Result<usize, BadHeader> {
    let mut length = None;
    for line in header.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = memchr::memchr(b':', line) else {
            return Err(BadHeader::NoColon(
                String::from_utf8_lossy(line).into_owned(),
            ));
        };
        let (name, value) = (line[..colon].trim_ascii(), line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-length") {
            if length.is_some() {
                return Err(BadHeader::TwoLengths);
            }
            let parsed = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or_else(|| {
                    BadHeader::NotANumber(String::from_utf8_lossy(value).into_owned())
                })?;
            length = Some(parsed);
        }
    }
    length.ok_or(BadHeader::NoLength)
}

/// What to do with one message body.
#[derive(Debug)]
pub enum Route {
    /// A document notification for the session.
    Notice(Notice),
    /// A request or another notification, for tower-lsp's router.
    Forward(Request),
    /// The client's answer to one of our requests.
    Answer {
        id: Value,
        answer: Result<Value, Value>,
    },
    /// Answer the client with this and go on.
    Reply(Value),
    /// Nothing to answer (a malformed notification or response); log why.
    Drop(String),
    /// A `didOpen`, whose text is taken from the body after routing (see [`OpenedAt::take`]).
    Open(OpenedAt),
}

/// A `didOpen` whose text is still the JSON string literal at `literal` in its body.
#[derive(Debug)]
pub struct OpenedAt {
    uri: Uri,
    version: i32,
    literal: Range<usize>,
}

impl OpenedAt {
    /// The notice, with the text unescaped in the body's own allocation when nothing else
    /// holds it: a large document costs its text once, not body plus copies.
    pub fn take(self, body: Bytes) -> Result<Notice, json_text::Unescape> {
        Ok(Notice::Opened(Opened {
            uri: self.uri,
            version: self.version,
            text: json_text::text_of(body, self.literal)?,
        }))
    }
}

/// What a document notification's params parsed into: the notice, or a `didOpen` whose text
/// still lies in the body.
enum Parsed<'a> {
    Notice(Notice),
    Open {
        uri: Uri,
        version: i32,
        text: &'a RawValue,
    },
}

impl Parsed<'_> {
    fn route(self, body: &str) -> Route {
        match self {
            Parsed::Notice(n) => Route::Notice(n),
            Parsed::Open { uri, version, text } => {
                // `text` borrows from `body`: its place there is where its bytes start.
                let start = text.get().as_ptr() as usize - body.as_ptr() as usize;
                Route::Open(OpenedAt {
                    uri,
                    version,
                    literal: start..start + text.get().len(),
                })
            }
        }
    }
}

/// Parses a body once and decides where it goes. A well-formed message takes one pass; only
/// a malformed one is looked at again, to say precisely what is wrong with it.
pub fn route(body: &[u8]) -> Route {
    // One SIMD pass proves the body is UTF-8, so the parser need not check each string.
    let Ok(text) = simdutf8::basic::from_utf8(body) else {
        return explain(body, "the message is not UTF-8");
    };
    match serde_json::from_str::<Envelope<'_>>(text) {
        Ok(envelope) => envelope.route(text),
        Err(fast) => explain(body, &fast.to_string()),
    }
}

/// The parts of a JSON-RPC message the transport looks at; `params` of a document
/// notification are parsed into their type in the same pass when `method` comes first, as
/// clients write it.
#[derive(Default)]
struct Envelope<'a> {
    version_ok: bool,
    id: Option<&'a RawValue>,
    method: Option<Cow<'a, str>>,
    params: Option<&'a RawValue>,
    notice: Option<Parsed<'a>>,
    result: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
}

impl<'a> Envelope<'a> {
    /// Where the message goes; `body` is the text the envelope was parsed from.
    fn route(self, body: &str) -> Route {
        let invalid = |id: Value, why: &str| {
            Route::Reply(error_response(
                id,
                -32600,
                &format!("Invalid Request: {why}"),
            ))
        };
        let id = match self.id.map(id_value) {
            None => None,
            Some(Ok(id)) => Some(id),
            Some(Err(())) => {
                return invalid(Value::Null, "\"id\" must be a number or a string");
            }
        };
        if !self.version_ok {
            return invalid(id.unwrap_or(Value::Null), "\"jsonrpc\" must be \"2.0\"");
        }
        match (self.method, id) {
            (Some(method), None) => match NoticeKind::of(&method) {
                Some(kind) => match self.notice {
                    Some(parsed) => parsed.route(body),
                    None => {
                        let raw = self.params.map_or("null", RawValue::get);
                        match notice_from_str(kind, raw) {
                            Ok(parsed) => parsed.route(body),
                            Err(e) => Route::Drop(format!("ignored malformed {method}: {e}")),
                        }
                    }
                },
                None => forward(method, None, self.params),
            },
            // tower-lsp swallows the error for unknown `$/` methods, which is right for
            // notifications but leaves a request unanswered; the specification says to answer
            // it with MethodNotFound. Every `$/` method the protocol defines is a notification.
            (Some(method), Some(id)) if method.starts_with("$/") => Route::Reply(error_response(
                id,
                -32601,
                &format!("Method not found: {method}"),
            )),
            (Some(method), Some(id)) => forward(method, Some(id), self.params),
            (None, Some(id)) => match (self.result, self.error) {
                (Some(result), None) => Route::Answer {
                    id,
                    answer: Ok(serde_json::from_str(result.get()).unwrap_or(Value::Null)),
                },
                (None, Some(error)) => {
                    let error: Value = serde_json::from_str(error.get()).unwrap_or(Value::Null);
                    if error["code"].is_i64() && error["message"].is_string() {
                        Route::Answer {
                            id,
                            answer: Err(error),
                        }
                    } else {
                        Route::Drop("malformed error response from the client".into())
                    }
                }
                (None, None) => invalid(
                    id,
                    "a message needs a \"method\" (request) or a \"result\"/\"error\" (response)",
                ),
                // Nothing to answer: answering a response would start a loop.
                (Some(_), Some(_)) => {
                    Route::Drop("a response with both result and error from the client".into())
                }
            },
            (None, None) => Route::Drop("a message with neither method nor id".into()),
        }
    }
}

/// A message for tower-lsp: its params are parsed here, once, into the value its router
/// takes.
fn forward(method: Cow<'_, str>, id: Option<Value>, params: Option<&RawValue>) -> Route {
    let params = match params.map(|raw| serde_json::from_str::<Value>(raw.get())) {
        None => None,
        Some(Ok(v)) => Some(lenient(&method, v)),
        // Too deep for the parser (over 128 levels), say: a request is still answered.
        Some(Err(e)) => {
            return match id {
                Some(id) => {
                    Route::Reply(error_response(id, -32602, &format!("Invalid params: {e}")))
                }
                None => Route::Drop(format!("params that do not parse: {e}")),
            };
        }
    };
    let mut request = Request::build(method.into_owned());
    if let Some(id) = id {
        match serde_json::from_value::<Id>(id) {
            Ok(id) => request = request.id(id),
            Err(e) => return Route::Drop(format!("an id tower-lsp cannot take: {e}")),
        }
    }
    if let Some(v) = params {
        request = request.params(v);
    }
    Route::Forward(request.finish())
}

/// Params as clients that follow only the specification send them: `workspace/executeCommand`
/// with `"arguments": null` (the natural call in Emacs Lisp, eglot) means no arguments.
fn lenient(method: &str, mut params: Value) -> Value {
    if method == "workspace/executeCommand"
        && let Some(fields) = params.as_object_mut()
        && fields.get("arguments").is_some_and(Value::is_null)
    {
        fields.insert("arguments".into(), Value::Array(Vec::new()));
    }
    params
}

/// An id as JSON-RPC allows it here: an integer or a string (or null, which the specification
/// discourages but tower-lsp accepts).
fn id_value(raw: &RawValue) -> Result<Value, ()> {
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::String(s)) => Ok(Value::String(s)),
        Ok(Value::Number(n)) if n.is_i64() => Ok(Value::Number(n)),
        Ok(Value::Null) => Ok(Value::Null),
        _ => Err(()),
    }
}

impl<'de> Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(EnvelopeVisitor)
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC message object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Envelope<'de>, M::Error> {
        let mut e = Envelope::default();
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match key.0.as_ref() {
                "jsonrpc" => e.version_ok = map.next_value::<Str<'de>>()?.0 == "2.0",
                "id" => e.id = Some(map.next_value()?),
                "method" => e.method = Some(map.next_value::<Str<'de>>()?.0),
                "params" => match e.method.as_deref().and_then(NoticeKind::of) {
                    Some(kind) => e.notice = Some(map.next_value_seed(NoticeSeed(kind))?),
                    None => e.params = Some(map.next_value()?),
                },
                "result" => e.result = Some(map.next_value()?),
                "error" => e.error = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(e)
    }
}

/// A string that borrows from the input when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// Parses a document notification's params into its type.
struct NoticeSeed(NoticeKind);

impl<'de> DeserializeSeed<'de> for NoticeSeed {
    type Value = Parsed<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Parsed<'de>, D::Error> {
        let notice = match self.0 {
            NoticeKind::Open => {
                let p = OpenParams::deserialize(d)?;
                let OpenItem { uri, version, text } = p.text_document;
                if !text.get().starts_with('"') {
                    return Err(de::Error::custom("text: expected a string"));
                }
                return Ok(Parsed::Open { uri, version, text });
            }
            NoticeKind::Change => Notice::Changed(Deserialize::deserialize(d)?),
            NoticeKind::Close => Notice::Closed(Deserialize::deserialize(d)?),
            NoticeKind::Save => Notice::Saved(Deserialize::deserialize(d)?),
            NoticeKind::Configuration => Notice::Configuration(Deserialize::deserialize(d)?),
            NoticeKind::ProgressCancel => Notice::ProgressCancel(Deserialize::deserialize(d)?),
        };
        Ok(Parsed::Notice(notice))
    }
}

fn notice_from_str(kind: NoticeKind, raw: &str) -> Result<Parsed<'_>, serde_json::Error> {
    let mut d = serde_json::Deserializer::from_str(raw);
    let notice = NoticeSeed(kind).deserialize(&mut d)?;
    d.end()?;
    Ok(notice)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OpenParams<'a> {
    #[serde(borrow)]
    text_document: OpenItem<'a>,
}

/// The text stays a literal in the body here; it is unescaped once the body is free.
#[derive(Deserialize)]
struct OpenItem<'a> {
    uri: Uri,
    version: i32,
    #[serde(borrow)]
    text: &'a RawValue,
}

/// Says what is wrong with a body the fast parse refused: not JSON (-32700), not a JSON-RPC
/// 2.0 message (-32600, with its id when that is a string or an integer, else null), or a
/// notification whose params do not fit its method (logged and dropped, since a notification
/// gets no answer).
fn explain(body: &[u8], fast_error: &str) -> Route {
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Route::Reply(with_reason(
                error_response(Value::Null, -32700, "Parse error"),
                &format!("invalid JSON: {e}"),
            ));
        }
    };
    let invalid = |id: Value, reason: &str| {
        Route::Reply(error_response(
            id,
            -32600,
            &format!("Invalid Request: {reason}"),
        ))
    };
    let Some(obj) = value.as_object() else {
        return invalid(
            Value::Null,
            "a message must be a JSON object (batches are not part of LSP)",
        );
    };
    let id = match obj.get("id") {
        None | Some(Value::Null) => Value::Null,
        Some(v @ Value::String(_)) => v.clone(),
        Some(Value::Number(n)) if n.is_i64() => Value::Number(n.clone()),
        Some(_) => return invalid(Value::Null, "\"id\" must be a number or a string"),
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid(id, "\"jsonrpc\" must be \"2.0\"");
    }
    match obj.get("method") {
        Some(Value::String(m)) if !obj.contains_key("id") => {
            Route::Drop(format!("ignored malformed {m} notification: {fast_error}"))
        }
        Some(Value::String(_)) => invalid(id, fast_error),
        Some(_) => invalid(id, "\"method\" must be a string"),
        None if obj.contains_key("id")
            && !obj.contains_key("result")
            && !obj.contains_key("error") =>
        {
            invalid(
                id,
                "a message needs a \"method\" (request) or a \"result\"/\"error\" (response)",
            )
        }
        None => Route::Drop(format!("malformed message from the client: {fast_error}")),
    }
}

/// Logs the reason beside the reply; the reply itself stays as the specification words it.
fn with_reason(response: Value, reason: &str) -> Value {
    warn!("malformed message from the client: {reason}");
    response
}

fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The searchers the framer uses on every read, built once.
static HEADER_END: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\r\n\r\n"));

/// Where the next `Content-Length` header name starts, in any case: header names are
/// case-insensitive, and a client that writes `content-length` must not lose every message
/// after one malformed header.
fn find_content_length(buf: &[u8]) -> Option<usize> {
    const NAME: &[u8] = b"content-length";
    memchr::memchr2_iter(b'c', b'C', buf).find(|&at| {
        buf.get(at..at + NAME.len())
            .is_some_and(|name| name.eq_ignore_ascii_case(NAME))
    })
}

pub fn frame_bytes(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// Reads the client's bytes on the calling thread (a blocking loop, so a large message costs
/// no hop through the async runtime per read) and routes each message as `route` says:
/// document notices to `notices`, in batches (all those of one read, handed over before any
/// message that follows them goes elsewhere, so the order holds and a burst of typing wakes
/// the session once), answers to the outbox, replies out through the outbox, and the rest to
/// `forward`, which says whether to go on (not after `exit`). Returns then, or at the end of
/// the input.
pub fn pump_input(
    mut input: impl Read,
    notices: impl Fn(Vec<Notice>),
    outbox: &Outbox,
    mut forward: impl FnMut(Request) -> bool,
) {
    let mut framer = Framer::default();
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut batch: Vec<Notice> = Vec::new();
    let flush = |batch: &mut Vec<Notice>| {
        if !batch.is_empty() {
            notices(std::mem::take(batch));
        }
    };
    loop {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                error!("reading stdin failed: {e}");
                break;
            }
        };
        framer.push(&chunk[..n]);
        while let Some(frame) = framer.next_frame() {
            match frame {
                Frame::Malformed { reason, response } => {
                    warn!("malformed message from the client: {reason}");
                    outbox.frame(response.to_string().into_bytes());
                }
                Frame::Message(body) => match route(&body) {
                    Route::Notice(n) => batch.push(n),
                    Route::Open(at) => match at.take(body) {
                        Ok(n) => batch.push(n),
                        Err(e) => warn!("ignored malformed textDocument/didOpen: {e}"),
                    },
                    Route::Forward(request) => {
                        flush(&mut batch);
                        if !forward(request) {
                            return;
                        }
                    }
                    Route::Answer { id, answer } => {
                        flush(&mut batch);
                        if !outbox.answer(&id, answer) {
                            warn!("an answer from the client to no request of ours (id {id})");
                        }
                    }
                    Route::Reply(response) => outbox.frame(response.to_string().into_bytes()),
                    Route::Drop(why) => warn!("{why}"),
                },
            }
        }
        flush(&mut batch);
    }
    flush(&mut batch);
}

/// Lets the client write up to 1 MiB into stdin before it waits on us (Linux pipes hold
/// 64 KiB by default), so a large document crosses in a few reads.
pub fn widen_stdin_pipe() {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsFd;
        let stdin = std::io::stdin();
        let _ = nix::fcntl::fcntl(
            stdin.as_fd(),
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(READ_CHUNK as nix::libc::c_int),
        );
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn after_a_bad_header_the_next_one_is_found_in_any_case() {
        let mut f = Framer::default();
        f.push(b"Content-Length: nope\r\n\r\n{}garbage content-length: 2\r\n\r\n{}");
        assert!(matches!(f.next_frame(), Some(Frame::Malformed { .. })));
        match f.next_frame() {
            Some(Frame::Message(body)) => assert_eq!(&body[..], b"{}"),
            other => panic!("the lower-case header was lost: {other:?}"),
        }
    }
    use super::*;

    fn frames(input: &[u8]) -> Vec<Frame> {
        let mut f = Framer::default();
        f.push(input);
        std::iter::from_fn(|| f.next_frame()).collect()
    }

    fn msg(body: &str) -> Vec<u8> {
        frame_bytes(body.as_bytes())
    }

    fn reply_code(r: &Route) -> Option<(i64, Value)> {
        match r {
            Route::Reply(v) => Some((v["error"]["code"].as_i64()?, v["id"].clone())),
            _ => None,
        }
    }

    #[test]
    fn well_formed_messages_pass_whole_even_when_split() {
        let input = [
            msg(r#"{"jsonrpc":"2.0","method":"a"}"#),
            msg(r#"{"jsonrpc":"2.0","id":1,"result":null}"#),
        ]
        .concat();
        let mut f = Framer::default();
        let mut out = Vec::new();
        for b in &input {
            f.push(std::slice::from_ref(b));
            out.extend(std::iter::from_fn(|| f.next_frame()));
        }
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|f| matches!(f, Frame::Message(_))));
    }

    #[test]
    fn a_large_body_leaves_the_rest_of_the_input_whole() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","method":"a","params":"{}"}}"#,
            "x".repeat(LARGE_BODY_BYTES + 10)
        );
        let small = r#"{"jsonrpc":"2.0","method":"b"}"#;
        let input = [msg(&big), msg(small), msg(small)].concat();
        let mut f = Framer::default();
        let mut out = Vec::new();
        // The second message arrives in the same read as the end of the first.
        for chunk in input.chunks(700_000) {
            f.push(chunk);
            out.extend(std::iter::from_fn(|| f.next_frame()));
        }
        let bodies: Vec<&[u8]> = out
            .iter()
            .map(|f| match f {
                Frame::Message(b) => &b[..],
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(bodies, [big.as_bytes(), small.as_bytes(), small.as_bytes()]);
    }

    #[test]
    fn a_bad_content_length_is_a_parse_error_and_the_next_message_still_reads() {
        let input = [
            b"Content-Length: nope\r\n\r\n{}".to_vec(),
            msg(r#"{"jsonrpc":"2.0","method":"a"}"#),
        ]
        .concat();
        let out = frames(&input);
        assert!(
            matches!(&out[0], Frame::Malformed { response: r, .. } if r["error"]["code"] == -32700)
        );
        assert!(matches!(&out[1], Frame::Message(_)));
    }

    #[test]
    fn two_content_lengths_are_a_parse_error() {
        let mut input = b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}".to_vec();
        input.extend(msg(r#"{"jsonrpc":"2.0","id":7,"method":"b"}"#));
        let out = frames(&input);
        assert!(
            matches!(&out[0], Frame::Malformed { response: r, .. } if r["error"]["code"] == -32700),
            "{out:?}"
        );
        assert!(
            matches!(&out[1], Frame::Message(b) if b.as_ref() == br#"{"jsonrpc":"2.0","id":7,"method":"b"}"#),
            "{out:?}"
        );
    }

    #[test]
    fn a_header_without_its_blank_line_is_refused_after_8_kib_and_not_buffered() {
        let mut f = Framer::default();
        f.push(b"Content-Length: 10\r\nX-Junk: ");
        let mut refused = 0;
        for _ in 0..64 {
            f.push(&[b'a'; 1024]);
            while let Some(frame) = f.next_frame() {
                assert!(
                    matches!(&frame, Frame::Malformed { response: r, .. } if r["error"]["code"] == -32700)
                );
                refused += 1;
            }
            assert!(f.buf.len() <= MAX_HEADER_BYTES + 4, "{}", f.buf.len());
        }
        assert_eq!(refused, 1);
        f.push(&msg(r#"{"jsonrpc":"2.0","method":"a"}"#));
        assert!(matches!(f.next_frame(), Some(Frame::Message(_))));
    }

    #[test]
    fn a_message_over_the_limit_is_skipped_without_being_kept() {
        let mut f = Framer::default();
        let length = MAX_MESSAGE_BYTES + 10;
        f.push(format!("Content-Length: {length}\r\n\r\n").as_bytes());
        assert!(matches!(f.next_frame(), Some(Frame::Malformed { .. })));
        let chunk = vec![b'x'; 1 << 20];
        let mut left = length;
        while left > 0 {
            let n = left.min(chunk.len());
            f.push(&chunk[..n]);
            left -= n;
            assert!(f.next_frame().is_none());
            assert!(f.buf.len() <= chunk.len());
        }
        f.push(&msg(r#"{"jsonrpc":"2.0","method":"a"}"#));
        assert!(matches!(f.next_frame(), Some(Frame::Message(_))));
    }

    #[test]
    fn invalid_json_is_a_parse_error() {
        assert_eq!(
            reply_code(&route(b"{not json")),
            Some((-32700, Value::Null))
        );
    }

    #[test]
    fn wrong_envelopes_are_invalid_requests_with_their_id_or_null() {
        for body in [
            r#"{"jsonrpc":"2.0","id":4,"method":7}"#,
            r#"{"jsonrpc":"1.0","id":4,"method":"x"}"#,
            r#"{"id":4}"#,
        ] {
            assert_eq!(
                reply_code(&route(body.as_bytes())),
                Some((-32600, json!(4))),
                "{body}"
            );
        }
        for body in [
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            "[1,2]",
        ] {
            assert_eq!(
                reply_code(&route(body.as_bytes())),
                Some((-32600, Value::Null)),
                "{body}"
            );
        }
    }

    #[test]
    fn a_malformed_response_from_the_client_is_dropped_without_an_answer() {
        assert!(matches!(
            route(br#"{"jsonrpc":"2.0","id":4,"error":"oops"}"#),
            Route::Drop(_)
        ));
    }

    #[test]
    fn document_notifications_are_parsed_in_one_pass_whatever_the_key_order() {
        let open = r#"{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":"file:///a.rs","languageId":"rust","version":3,"text":"a\n\u00e9b"}}}"#;
        let reordered = r#"{"params":{"textDocument":{"uri":"file:///a.rs","languageId":"rust","version":3,"text":"a\n\u00e9b"}},"method":"textDocument/didOpen","jsonrpc":"2.0"}"#;
        for body in [open, reordered] {
            match route(body.as_bytes()) {
                Route::Open(at) => match at.take(Bytes::from(body.as_bytes().to_vec())) {
                    Ok(Notice::Opened(o)) => {
                        assert_eq!(o.version, 3);
                        assert_eq!(o.text, "a\néb");
                    }
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            }
        }
        // A body still shared (a small one inside the framer's buffer) is read from a copy.
        let shared = Bytes::from(open.as_bytes().to_vec());
        let keep = shared.clone();
        match route(&shared) {
            Route::Open(at) => match at.take(shared) {
                Ok(Notice::Opened(o)) => assert_eq!(o.text, "a\néb"),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        assert_eq!(keep, open.as_bytes(), "the shared body is left as it was");
        let not_text = r#"{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":"file:///a.rs","languageId":"rust","version":3,"text":5}}}"#;
        assert!(matches!(route(not_text.as_bytes()), Route::Drop(_)));
        let bad =
            r#"{"jsonrpc":"2.0","method":"textDocument/didChange","params":{"textDocument":{}}}"#;
        assert!(matches!(route(bad.as_bytes()), Route::Drop(_)));
    }

    #[test]
    fn answers_requests_and_other_notifications_are_told_apart() {
        assert!(matches!(
            route(br#"{"jsonrpc":"2.0","id":3,"result":{"applied":true}}"#),
            Route::Answer { answer: Ok(_), .. }
        ));
        assert!(matches!(
            route(br#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"a":1}}"#),
            Route::Forward(r) if r.method() == "initialize" && r.id().is_some() && r.params().is_some()
        ));
        assert!(matches!(
            route(br#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#),
            Route::Forward(r) if r.id().is_none()
        ));
        assert_eq!(
            reply_code(&route(
                br#"{"jsonrpc":"2.0","id":"x","method":"$/unknown"}"#
            )),
            Some((-32601, json!("x")))
        );
    }
}
