//! What the two HTTP providers (openai.rs, anthropic.rs) and `doctor` share: the key in the
//! provider's header, one request sent with a failed status or a dropped connection turned
//! into a `ModelError` the same way, a tool call's JSON arguments read, and the `Response`
//! built from an answer. The wire formats themselves stay in each provider's file, and the
//! choice between them in `model::complete`: this file names neither, so they import it
//! one way.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::sse::{Event, Events, Limits, read_capped};
use super::types::{Kind, ModelError, OnToken, Response, Target, Usage, redact};
use crate::config::Secret;
use agent_ls_core::conversation::ToolCall;

/// A builder of an HTTP client whose TLS runs on rustls's ring provider. reqwest is built
/// without a provider of its own (its default, aws-lc-rs, needs cmake and a long C build; see
/// docs/architecture.md) and panics on building a client while none is installed, so every
/// client starts here. A provider installed already, by a host embedding the runtime, is kept.
pub(crate) fn client_builder() -> reqwest::ClientBuilder {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // An error only says that a provider is installed already, which is all this needs.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

/// One request to a model over HTTP, all but the request itself.
pub(crate) struct Call<'a> {
    pub http: &'a reqwest::Client,
    pub target: &'a Target,
    pub max_tokens: u32,
    /// The longest the answer's stream may stay silent.
    pub idle: Duration,
    pub on_token: Option<OnToken<'a>>,
}

/// Adds the target's API key (when it has a non-empty one) in its provider's header.
pub(crate) fn authorize(
    builder: reqwest::RequestBuilder,
    target: &Target,
) -> reqwest::RequestBuilder {
    match target.api_key.as_ref().filter(|k| !k.is_empty()) {
        Some(k) if target.kind == Kind::Anthropic => builder.header("x-api-key", k.expose()),
        Some(k) => builder.bearer_auth(k.expose()),
        None => builder,
    }
}

/// A status outside 200-299, with what the server said: a provider may read the text first
/// (openai.rs asks again in a simpler form) before it becomes an error with `into_error`.
pub(crate) struct Refused {
    pub status: u16,
    pub text: String,
    retry_after: Option<Duration>,
}

impl Refused {
    pub fn into_error(self, target: &Target) -> ModelError {
        status_error(target, self.status, &self.text, self.retry_after)
    }
}

/// Sends a request: a connection that fails is an error; a refused request is `Ok(Err(_))`,
/// its text read with the same bounds as an answer (it is only shown).
pub(crate) async fn send(
    builder: reqwest::RequestBuilder,
    target: &Target,
    limits: Limits,
) -> Result<Result<reqwest::Response, Refused>, ModelError> {
    let response = authorize(builder, target)
        .send()
        .await
        .map_err(|e| connect_error(target, &e))?;
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(Ok(response));
    }
    let retry_after = retry_after(response.headers());
    let text = read_capped(response, limits, target.label())
        .await
        .unwrap_or_default();
    Ok(Err(Refused {
        status,
        text,
        retry_after,
    }))
}

/// The answer as a `Response` of one attempt; `Models::call` fills in the attempts, the
/// whole duration and the cost.
pub(crate) fn answered(
    target: &Target,
    text: String,
    tool_calls: Vec<ToolCall>,
    usage: Usage,
    started: Instant,
) -> Response {
    Response {
        text,
        tool_calls,
        usage,
        provider: target.provider.clone(),
        model: target.model.clone(),
        duration_ms: started.elapsed().as_millis() as u64,
        attempts: 1,
        cost_usd: None,
        cached: None,
        cut_off: false,
        bad_bytes: Vec::new(),
    }
}

/// A tool call whose arguments came as JSON text (empty text is `{}`). Arguments that do not
/// parse (cut off by the output limit, or broken) are handed on as the JSON string of their
/// raw text: the agent loop sends them back to the model to be mended (docs/repairs.md),
/// where an error here would end the run.
pub(crate) fn tool_call(
    _target: &Target,
    id: String,
    name: String,
    arguments: &str,
) -> Result<ToolCall, ModelError> {
    let args = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    let arguments =
        serde_json::from_str(args).unwrap_or_else(|_| serde_json::Value::String(args.into()));
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
}

/// A tool call as it streams in, keyed by index in `Streamed`: the id and name once, the
/// arguments as fragments of a JSON string.
#[derive(Default)]
pub(crate) struct PartialCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A streamed answer being read: its events, the text so far (passed on to `on_token` piece
/// by piece) and its tool calls by index.
pub(crate) struct Streamed<'a> {
    events: Events,
    pub text: String,
    pub calls: BTreeMap<u64, PartialCall>,
    on_token: Option<OnToken<'a>>,
}

impl<'a> Streamed<'a> {
    pub fn new(
        response: reqwest::Response,
        limits: Limits,
        target: &Target,
        on_token: Option<OnToken<'a>>,
    ) -> Self {
        Streamed {
            events: Events::new(response, limits, target.label()),
            text: String::new(),
            calls: BTreeMap::new(),
            on_token,
        }
    }

    /// The next server-sent event; `None` when the stream ended.
    pub async fn next(&mut self) -> Result<Option<Event>, ModelError> {
        self.events.next().await
    }

    pub fn push_text(&mut self, piece: &str) {
        self.text.push_str(piece);
        if let Some(f) = self.on_token {
            f(piece);
        }
    }

    /// The answer: the text, and the tool calls in index order with their arguments parsed.
    pub fn finish(self, target: &Target, usage: Option<Usage>) -> Result<Answer, ModelError> {
        let tool_calls = self
            .calls
            .into_values()
            .map(|c| tool_call(target, c.id, c.name, &c.arguments))
            .collect::<Result<_, _>>()?;
        Ok(Answer {
            text: self.text,
            tool_calls,
            usage,
            cut_off: false,
            bad_bytes: self.events.bad_bytes(),
        })
    }
}

/// An answer as read off the wire, before it becomes a `Response`.
pub(crate) struct Answer {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// `None` when the server reported none.
    pub usage: Option<Usage>,
    /// It stopped at the output limit.
    pub cut_off: bool,
    /// Its bytes that were not UTF-8 (`Events::bad_bytes`).
    pub bad_bytes: Vec<String>,
}

impl Answer {
    /// The `Response` of this answer, its text and calls as `answered` makes them.
    pub fn into_response(self, target: &Target, usage: Usage, started: Instant) -> Response {
        let mut r = answered(target, self.text, self.tool_calls, usage, started);
        r.cut_off = self.cut_off;
        r.bad_bytes = self.bad_bytes;
        r
    }
}

/// An answer that cannot be read.
pub(crate) fn bad_answer(target: &Target, reason: impl Into<String>) -> ModelError {
    ModelError::BadAnswer {
        provider: target.label(),
        reason: reason.into(),
    }
}

/// Reads `Retry-After` (seconds) from a response.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .map(Duration::from_secs_f64)
}

/// An error for a failed HTTP status, with the key's source named for 401/403.
fn status_error(
    target: &Target,
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
) -> ModelError {
    let secrets: Vec<&Secret> = target.api_key.iter().collect();
    let body = redact(&body.chars().take(500).collect::<String>(), &secrets);
    if status == 401 || status == 403 {
        let fix = if target.api_key.is_none() {
            format!("no API key is set: {}", target.key_hint)
        } else {
            format!("check the API key: {}", target.key_hint)
        };
        return ModelError::Auth {
            provider: target.label(),
            status,
            fix,
        };
    }
    ModelError::Http {
        provider: target.label(),
        status,
        body,
        retry_after,
    }
}

pub(crate) fn connect_error(target: &Target, e: &reqwest::Error) -> ModelError {
    connect_failure(target, e, true)
}

/// `connect_error`, with the pointer to `agent-ls doctor` only when `suggest_doctor`: doctor
/// itself says it without sending the user to run what they are running.
pub(crate) fn connect_failure(
    target: &Target,
    e: &reqwest::Error,
    suggest_doctor: bool,
) -> ModelError {
    let secrets: Vec<&Secret> = target.api_key.iter().collect();
    let mut reason = redact(&format!("{e}{}", e.source_chain()), &secrets);
    // The default for a new user with no key set: say what to configure, not only what failed.
    if target.provider == "ollama" {
        reason.push_str(
            "; start Ollama (`ollama serve`, then `ollama pull` the model), or set OPENAI_API_KEY or \
             ANTHROPIC_API_KEY, or choose a model with model.provider and model.base_url",
        );
        if suggest_doctor {
            reason.push_str("; `agent-ls doctor` checks the setup");
        }
    }
    if e.is_timeout() {
        return ModelError::Timeout {
            provider: target.label(),
            seconds: 0,
        };
    }
    ModelError::Connect {
        provider: target.label(),
        url: target.base_url.clone(),
        reason,
    }
}

trait SourceChain {
    fn source_chain(&self) -> String;
}

impl SourceChain for reqwest::Error {
    fn source_chain(&self) -> String {
        let mut out = String::new();
        let mut cur = std::error::Error::source(self);
        while let Some(e) = cur {
            out.push_str(&format!(": {e}"));
            cur = e.source();
        }
        out
    }
}
