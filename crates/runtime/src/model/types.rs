//! What every provider speaks and every caller sees: the request, the answer and its usage,
//! the error, the target a call goes to, and the redaction of secrets from text. Below
//! everything else in `model/`: the wire formats, the cache and `Models` use these, and this
//! file uses none of them.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::config::Secret;
use agent_ls_core::cache::HitKind;
use agent_ls_core::conversation::{Message, ToolCall, ToolSpec};

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Request {
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    /// Force a call of this tool.
    pub tool_choice: Option<String>,
    /// Ask for a JSON answer that matches this schema (name, schema).
    pub json_schema: Option<(String, Value)>,
    pub max_tokens: Option<u32>,
    /// The call edits nothing: a turn offered only the reading tools. The coder's read-only
    /// turn (an explanation) may then be answered from the response cache (docs/cache.md).
    pub reading_only: bool,
    /// The user's words in the messages (the run's goal): a near-duplicate request words them
    /// differently (docs/cache.md).
    pub question: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// The prompt's tokens, those read from the provider's prompt cache and written to it
    /// included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The server did not report usage, so it was estimated from the text (4 bytes a token).
    #[serde(default)]
    pub estimated: bool,
    /// Of the prompt's tokens, those the provider read from its prompt cache (Anthropic's
    /// `cache_read_input_tokens`, OpenAI's `prompt_tokens_details.cached_tokens`).
    #[serde(default)]
    pub cached_tokens: u64,
    /// Of the prompt's tokens, those written to the cache (Anthropic's
    /// `cache_creation_input_tokens`).
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    pub(crate) fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.estimated |= other.estimated;
        self.cached_tokens += other.cached_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub provider: String,
    pub model: String,
    pub duration_ms: u64,
    /// Attempts this answer took, retries and fallbacks included.
    pub attempts: u32,
    /// US dollars, when prices are configured for the model.
    pub cost_usd: Option<f64>,
    /// Answered from the response cache: no model was called, nothing was spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<Cached>,
    /// The answer stopped at its output limit (`finish_reason: length`, Anthropic's
    /// `stop_reason: max_tokens`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_off: bool,
    /// The answer's bytes that were not UTF-8, in hex (one entry a run of them): each stands
    /// as U+FFFD in the text, and an edit that would write one is refused naming them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad_bytes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Error)]
pub enum ModelError {
    #[error("{provider} refused the credentials (HTTP {status}): {fix}")]
    Auth {
        provider: String,
        status: u16,
        fix: String,
    },
    #[error("{provider} failed with HTTP {status}: {body}")]
    Http {
        provider: String,
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    #[error("cannot reach {provider} at {url}: {reason}")]
    Connect {
        provider: String,
        url: String,
        reason: String,
    },
    #[error("{provider} did not answer within {seconds} s")]
    Timeout { provider: String, seconds: u64 },
    #[error("{provider}'s answer stopped before it was complete: {reason}")]
    Truncated { provider: String, reason: String },
    #[error("{provider} sent an answer that cannot be read: {reason}")]
    BadAnswer { provider: String, reason: String },
    #[error("{provider} called tool `{tool}` with arguments that are not valid JSON: {reason}")]
    InvalidToolCall {
        provider: String,
        tool: String,
        reason: String,
    },
    #[error("the replay script {file} has no more answers for the {role} role")]
    ReplayExhausted { role: String, file: String },
    #[error("no model is configured: {0}")]
    NotConfigured(String),
    #[error("the model call was cancelled")]
    Cancelled,
}

impl ModelError {
    /// Worth trying again: rate limits, server errors, dropped connections, timeouts, and
    /// streams cut short.
    pub fn is_transient(&self) -> bool {
        match self {
            ModelError::Http { status, .. } => *status == 429 || *status >= 500,
            ModelError::Connect { .. }
            | ModelError::Timeout { .. }
            | ModelError::Truncated { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Errors that another model would not fix, so no fallback is tried.
    pub(crate) fn is_final(&self) -> bool {
        matches!(
            self,
            ModelError::Auth { .. } | ModelError::Cancelled | ModelError::NotConfigured(_)
        )
    }
}

/// Which wire format a target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    OpenAi,
    Anthropic,
    Replay,
}

/// One concrete model to call.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The provider's name as configured ("openai", "ollama", ...).
    pub provider: String,
    pub kind: Kind,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<Secret>,
    /// Where the key should come from, to say so when it is missing or refused.
    pub key_hint: &'static str,
}

impl Target {
    pub fn label(&self) -> String {
        format!("{} ({})", self.provider, self.model)
    }
}

/// What a cached answer saved: how it was found and what its original call took.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cached {
    pub hit: HitKind,
    /// The original call's tokens, not spent again.
    pub saved: Usage,
    /// The original call's duration.
    pub saved_ms: u64,
}

/// Removes secrets from text that goes into logs and errors.
pub fn redact(text: &str, secrets: &[&Secret]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if s.expose().len() >= 4 {
            out = out.replace(s.expose(), "<redacted>");
        }
    }
    out
}

/// Called with each piece of streamed text, for a terminal or a progress report.
pub type OnToken<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// Estimated usage when a server reports none.
pub(crate) fn estimate_usage(request: &Request, text: &str) -> Usage {
    let input: usize = request.messages.iter().map(|m| m.content.len()).sum();
    Usage {
        input_tokens: (input / 4) as u64,
        output_tokens: (text.len() / 4).max(1) as u64,
        estimated: true,
        ..Usage::default()
    }
}
