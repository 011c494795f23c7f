//! The embeddings client of memory's vector ranking (docs/memory.md): an OpenAI-compatible
//! `POST …/embeddings` (OpenAI, llama.cpp's server with `--embedding`, Ollama, vLLM...), with a
//! timeout, a capped answer, cancellation and every text redacted before it is sent. Callers
//! treat a failure as "no vector": memory then ranks by text alone, and a run never waits on
//! an embeddings server longer than its timeout.

use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, EmbeddingsConfig, Secret};
use crate::memory::{known_secrets, redact};

/// The largest answer read: a batch of a run's records at a few thousand dimensions is well
/// under it, and a server that streams without end costs no more memory than this.
const MAX_ANSWER: usize = 16 << 20;
/// The most bytes of one text sent: a record's text is bounded already (diffs are cut), and
/// small models have small windows.
const MAX_INPUT: usize = 6000;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("the embeddings server {0} could not be reached: {1}")]
    Unreachable(String, String),
    #[error("the embeddings server {0} did not answer within {1} s")]
    Timeout(String, u64),
    #[error("the embeddings server {0} answered HTTP {1}: {2}")]
    Status(String, u16, String),
    #[error("the embeddings server {0} answered more than {MAX_ANSWER} bytes")]
    TooLarge(String),
    #[error("the embeddings server {0} gave no usable embeddings: {1}")]
    Invalid(String, String),
    #[error("cancelled")]
    Cancelled,
}

/// An embedding model memory ranks by.
pub struct Embedder {
    http: reqwest::Client,
    endpoint: String,
    model: String,
    key: Option<Secret>,
    timeout: Duration,
    secrets: Vec<String>,
    /// The vectors' length, learned from the first answer; later answers must agree.
    dims: Mutex<Option<usize>>,
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

impl Embedder {
    /// The configured embedding model (`[memory] embeddings`), if any.
    pub fn from_config(config: &Config) -> Option<Embedder> {
        let e: &EmbeddingsConfig = config.memory.embeddings.as_ref()?;
        let base = e.url.trim_end_matches('/').to_string();
        let endpoint = if base.ends_with("/embeddings") {
            base.clone()
        } else {
            format!("{base}/embeddings")
        };
        // As with model servers: a key goes only to an address the user set, never to one a
        // workspace file names.
        let key = e
            .api_key_env
            .as_deref()
            .filter(|_| !config.workspace_hosts.contains(&base))
            .and_then(|var| std::env::var(var).ok())
            .filter(|v| !v.is_empty())
            .map(Secret::new);
        Some(Embedder {
            http: crate::model::client_builder()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .unwrap_or_default(),
            endpoint,
            model: e.model.clone(),
            key,
            timeout: Duration::from_secs(e.timeout_secs.max(1)),
            secrets: known_secrets(config),
            dims: Mutex::new(None),
        })
    }

    /// The model's name, which each stored vector is kept with.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// One embedding per text, in order. Each text is redacted (the known secrets' values
    /// and key-shaped strings) and cut before it is sent.
    pub async fn embed(
        &self,
        texts: &[String],
        cancel: &CancellationToken,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let input: Vec<String> = texts
            .iter()
            .map(|t| agent_ls_core::memory::cut(&redact(t, &self.secrets), MAX_INPUT))
            .collect();
        let call = self.call(&input);
        let timed = tokio::time::timeout(self.timeout, call);
        let text = tokio::select! {
            _ = cancel.cancelled() => return Err(EmbedError::Cancelled),
            r = timed => r.map_err(|_| EmbedError::Timeout(self.endpoint.clone(), self.timeout.as_secs()))??,
        };
        self.parse(&text, input.len())
    }

    async fn call(&self, input: &[String]) -> Result<String, EmbedError> {
        let body = serde_json::json!({"model": self.model, "input": input});
        let mut req = self.http.post(&self.endpoint).json(&body);
        if let Some(k) = &self.key {
            req = req.bearer_auth(k.expose());
        }
        let unreachable = |e: reqwest::Error| {
            EmbedError::Unreachable(self.endpoint.clone(), without_url(&e.to_string()))
        };
        let mut response = req.send().await.map_err(unreachable)?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            if bytes.len() + chunk.len() > MAX_ANSWER {
                return Err(EmbedError::TooLarge(self.endpoint.clone()));
            }
            bytes.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if !status.is_success() {
            let said = agent_ls_core::memory::cut(text.trim(), 300);
            return Err(EmbedError::Status(
                self.endpoint.clone(),
                status.as_u16(),
                redact(&said, &self.secrets),
            ));
        }
        Ok(text)
    }

    fn parse(&self, text: &str, wanted: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let invalid = |why: String| EmbedError::Invalid(self.endpoint.clone(), why);
        let answer: Answer = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if answer.data.len() != wanted {
            return Err(invalid(format!(
                "{} embeddings for {wanted} texts",
                answer.data.len()
            )));
        }
        let mut items = answer.data;
        items.sort_by_key(|i| i.index.unwrap_or(0));
        let mut dims = self.dims.lock().unwrap_or_else(|p| p.into_inner());
        let want = match *dims {
            Some(d) => d,
            None => items[0].embedding.len(),
        };
        if want == 0 {
            return Err(invalid("empty vectors".into()));
        }
        if let Some(i) = items.iter().find(|i| i.embedding.len() != want) {
            return Err(invalid(format!(
                "a vector of {} dimensions where the model's have {want}",
                i.embedding.len()
            )));
        }
        if items
            .iter()
            .any(|i| i.embedding.iter().any(|x| !x.is_finite()))
        {
            return Err(invalid(
                "a vector holds a value that is not a number".into(),
            ));
        }
        *dims = Some(want);
        Ok(items.into_iter().map(|i| i.embedding).collect())
    }
}

/// reqwest's error text without the URL it repeats (the error names the endpoint already).
fn without_url(s: &str) -> String {
    match s.find(" for url (") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}
