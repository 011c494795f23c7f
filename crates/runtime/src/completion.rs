//! The client of a fill-in-the-middle model for inline completion (docs/completion.md): one
//! request a suggestion, in the wire format `completion.provider` names (OpenAI-compatible
//! `/v1/completions` with `suffix`, llama.cpp's `/infill`, Ollama's `/api/generate`, Mistral's
//! `/v1/fim/completions`, or a plain completion with the model family's FIM template), with a
//! timeout, a capped answer and the known secrets' values redacted from what is sent. The
//! caller cancels by dropping the future, which drops the HTTP request. What to send and
//! what to keep of the answer are the core's (`agent_ls_core::completion`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{CompletionConfig, CompletionProvider, Config, Secret};
use crate::memory::{known_secrets, redact};
use agent_ls_core::completion::{Context, Family, prompt, stop_words};

/// The largest answer read: a suggestion is a few hundred bytes, and a server that streams
/// without end costs no more memory than this.
const MAX_ANSWER: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    #[error("the completion server {0} could not be reached: {1}")]
    Unreachable(String, String),
    #[error("the completion server {0} did not answer within {1} ms")]
    Timeout(String, u64),
    #[error("the completion server {0} answered HTTP {1}: {2}")]
    Status(String, u16, String),
    #[error("the completion server {0} answered more than {MAX_ANSWER} bytes")]
    TooLarge(String),
    #[error("the completion server {0} gave an answer that is not a completion: {1}")]
    Malformed(String, String),
}

/// The configured completion model (`[completion]`).
pub struct Completer {
    http: reqwest::Client,
    base: String,
    provider: CompletionProvider,
    model: String,
    family: Family,
    max_tokens: u32,
    context_bytes: usize,
    key: Option<Secret>,
    timeout: Duration,
    secrets: Vec<String>,
}

impl Completer {
    /// The configured completion model, when completion is on.
    pub fn from_config(config: &Config) -> Option<Completer> {
        let c: &CompletionConfig = &config.completion;
        if !c.is_on() {
            return None;
        }
        let base = c.base_url.as_deref()?.trim_end_matches('/').to_string();
        // As with model servers: a key goes only to an address the user set.
        let key = c
            .api_key_env
            .as_deref()
            .filter(|_| !config.workspace_hosts.contains(&base))
            .and_then(|var| std::env::var(var).ok())
            .filter(|v| !v.is_empty())
            .map(Secret::new);
        Some(Completer {
            http: crate::model::client_builder()
                .connect_timeout(Duration::from_secs(3))
                .build()
                .unwrap_or_default(),
            base,
            provider: c.provider,
            model: c.model.clone(),
            family: c.template,
            max_tokens: c.max_tokens.max(1),
            context_bytes: c.context_bytes,
            key,
            timeout: Duration::from_millis(c.timeout_ms.max(1)),
            secrets: known_secrets(config),
        })
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// The bytes of context one request may send.
    pub fn context_bytes(&self) -> usize {
        self.context_bytes
    }

    /// The model's raw answer for `cx` (the core's `completion::finish` cuts it). The
    /// context is redacted before it is sent.
    pub async fn complete(&self, cx: &Context) -> Result<String, CompleteError> {
        let mut cx = cx.clone();
        cx.prefix = redact(&cx.prefix, &self.secrets);
        cx.suffix = redact(&cx.suffix, &self.secrets);
        for s in &mut cx.snippets {
            s.text = redact(&s.text, &self.secrets);
        }
        let (path, body) = request(
            self.provider,
            self.family,
            &self.model,
            self.max_tokens,
            &cx,
        );
        let url = endpoint(&self.base, path);
        let timed = tokio::time::timeout(self.timeout, self.send(&url, &body));
        let text = timed
            .await
            .map_err(|_| CompleteError::Timeout(url.clone(), self.timeout.as_millis() as u64))??;
        answer_of(self.provider, &text)
            .map_err(|why| CompleteError::Malformed(url, why.to_string()))
    }

    async fn send(&self, url: &str, body: &Value) -> Result<String, CompleteError> {
        let mut req = self.http.post(url).json(body);
        if let Some(k) = &self.key {
            req = req.bearer_auth(k.expose());
        }
        let unreachable = |e: reqwest::Error| {
            let said = e.to_string();
            let said = said.split(" for url (").next().unwrap_or("").to_string();
            CompleteError::Unreachable(url.to_string(), said)
        };
        let mut response = req.send().await.map_err(unreachable)?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            if bytes.len() + chunk.len() > MAX_ANSWER {
                return Err(CompleteError::TooLarge(url.to_string()));
            }
            bytes.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if !status.is_success() {
            let said = agent_ls_core::memory::cut(text.trim(), 300);
            return Err(CompleteError::Status(
                url.to_string(),
                status.as_u16(),
                redact(&said, &self.secrets),
            ));
        }
        Ok(text)
    }
}

/// The URL of `path` under `base`: a base that ends in `/v1` already is not given a second.
fn endpoint(base: &str, path: &str) -> String {
    match path.strip_prefix("/v1") {
        Some(rest) if base.ends_with("/v1") => format!("{base}{rest}"),
        _ => format!("{base}{path}"),
    }
}

/// The request's path and body in `provider`'s wire format.
pub fn request(
    provider: CompletionProvider,
    family: Family,
    model: &str,
    max_tokens: u32,
    cx: &Context,
) -> (&'static str, Value) {
    let stop = stop_words(family);
    match provider {
        CompletionProvider::Openai => (
            "/v1/completions",
            json!({"model": model, "prompt": cx.prefix, "suffix": cx.suffix,
                   "max_tokens": max_tokens, "temperature": 0.2, "stop": stop, "stream": false}),
        ),
        CompletionProvider::Template => (
            "/v1/completions",
            json!({"model": model, "prompt": prompt(family, cx), "max_tokens": max_tokens,
                   "temperature": 0.2, "stop": stop, "stream": false}),
        ),
        CompletionProvider::LlamaCpp => {
            let extra: Vec<Value> = cx
                .snippets
                .iter()
                .map(|s| json!({"filename": s.path, "text": s.text}))
                .collect();
            (
                "/infill",
                json!({"input_prefix": cx.prefix, "input_suffix": cx.suffix, "input_extra": extra,
                       "n_predict": max_tokens, "temperature": 0.2, "stream": false}),
            )
        }
        CompletionProvider::Ollama => (
            "/api/generate",
            json!({"model": model, "prompt": cx.prefix, "suffix": cx.suffix, "raw": false,
                   "stream": false,
                   "options": {"num_predict": max_tokens, "temperature": 0.2, "stop": stop}}),
        ),
        CompletionProvider::Mistral => (
            "/v1/fim/completions",
            json!({"model": model, "prompt": cx.prefix, "suffix": cx.suffix,
                   "max_tokens": max_tokens, "temperature": 0.2, "stream": false}),
        ),
    }
}

/// Why an answer holds no completion.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadAnswer {
    #[error("not JSON ({0})")]
    NotJson(String),
    #[error("no completion text where the format puts it")]
    NoText,
}

/// The completion's text in `provider`'s answer, or why there is none.
pub fn answer_of(provider: CompletionProvider, text: &str) -> Result<String, BadAnswer> {
    let v: Value = serde_json::from_str(text).map_err(|e| BadAnswer::NotJson(e.to_string()))?;
    let found = match provider {
        CompletionProvider::LlamaCpp => v.get("content"),
        CompletionProvider::Ollama => v.get("response"),
        CompletionProvider::Openai | CompletionProvider::Template | CompletionProvider::Mistral => {
            let choice = v.get("choices").and_then(|c| c.get(0));
            // Mistral answers in the chat shape; OpenAI-compatible servers in `text`.
            choice
                .and_then(|c| c.get("text"))
                .or_else(|| choice.and_then(|c| c.pointer("/message/content")))
        }
    };
    found
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or(BadAnswer::NoText)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_ls_core::completion::Snippet;

    fn cx() -> Context {
        Context {
            path: "a.py".into(),
            prefix: "def f():\n    ".into(),
            suffix: "\n".into(),
            snippets: vec![Snippet {
                path: "b.py".into(),
                text: "X = 1".into(),
            }],
        }
    }

    #[test]
    fn each_provider_has_its_path_and_fields() {
        let (p, b) = request(CompletionProvider::LlamaCpp, Family::Qwen, "m", 64, &cx());
        assert_eq!(p, "/infill");
        assert_eq!(b["input_prefix"], "def f():\n    ");
        assert_eq!(b["input_extra"][0]["filename"], "b.py");
        assert_eq!(b["n_predict"], 64);
        let (p, b) = request(CompletionProvider::Ollama, Family::Qwen, "m", 64, &cx());
        assert_eq!(
            (p, &b["raw"], &b["suffix"]),
            ("/api/generate", &json!(false), &json!("\n"))
        );
        let (p, b) = request(
            CompletionProvider::Template,
            Family::CodeLlama,
            "m",
            64,
            &cx(),
        );
        assert_eq!(p, "/v1/completions");
        assert!(b["prompt"].as_str().unwrap().starts_with("<PRE> "));
        assert!(b.get("suffix").is_none());
        let (p, _) = request(CompletionProvider::Mistral, Family::Qwen, "m", 64, &cx());
        assert_eq!(
            endpoint("https://api.mistral.ai/v1", p),
            "https://api.mistral.ai/v1/fim/completions"
        );
        assert_eq!(
            endpoint("http://h:1", "/v1/completions"),
            "http://h:1/v1/completions"
        );
    }

    #[test]
    fn answers_are_read_where_each_format_puts_them_and_others_are_errors() {
        let ok = |p, t: &str| answer_of(p, t).unwrap();
        assert_eq!(ok(CompletionProvider::LlamaCpp, r#"{"content":"x"}"#), "x");
        assert_eq!(ok(CompletionProvider::Ollama, r#"{"response":"y"}"#), "y");
        assert_eq!(
            ok(CompletionProvider::Openai, r#"{"choices":[{"text":"z"}]}"#),
            "z"
        );
        assert_eq!(
            ok(
                CompletionProvider::Mistral,
                r#"{"choices":[{"message":{"content":"w"}}]}"#
            ),
            "w"
        );
        assert!(answer_of(CompletionProvider::Openai, "{\"choices\":[]}").is_err());
        assert!(answer_of(CompletionProvider::Openai, "<html>").is_err());
        assert!(answer_of(CompletionProvider::Ollama, r#"{"response":3}"#).is_err());
    }
}
