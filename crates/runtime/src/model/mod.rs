//! Model providers (IO): the choice of model per role with its fallbacks, retries with backoff
//! for transient failures, cancellation, usage and cost. The request and answer types are in
//! `types.rs` (re-exported here); the wire formats live in `openai.rs`, `anthropic.rs` and
//! `replay.rs`, and this file picks one per target.

pub mod anthropic;
pub mod cache;
pub mod doctor;
mod http;
pub mod openai;
pub mod replay;
mod sse;
mod types;

pub(crate) use http::client_builder;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{Config, Price, RoleConfig, Secret, TargetConfig};
pub use agent_ls_core::conversation::{Message, Role, Speaker, ToolCall, ToolSpec};
pub(crate) use types::estimate_usage;
pub use types::{Kind, ModelError, OnToken, Request, Response, Target, Usage, redact};

/// Resolves the configured (or default) target for a role and its fallbacks.
pub fn targets_for(
    role: Role,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Target>, ModelError> {
    let r: &RoleConfig = match role {
        Role::Planner => &config.roles.planner,
        Role::Coder => &config.roles.coder,
        Role::Reflector => &config.roles.reflector,
        Role::Evaluator => &config.roles.evaluator,
        Role::Intent => &config.roles.intent,
        Role::Summarizer => &config.roles.summarizer,
        Role::Reviewer => &config.roles.reviewer,
        Role::Tester => &config.roles.tester,
    };
    let m = &config.model;
    // A role that names another provider does not inherit the default's URL, model or key.
    let same_provider = r.provider.is_none() || r.provider == m.provider;
    fn inherit<T: Clone>(role_value: &Option<T>, default: &Option<T>, same: bool) -> Option<T> {
        role_value
            .clone()
            .or_else(|| default.clone().filter(|_| same))
    }
    let primary = TargetConfig {
        provider: r.provider.clone().or(m.provider.clone()),
        base_url: inherit(&r.base_url, &m.base_url, same_provider),
        name: inherit(&r.name, &m.name, same_provider),
        api_key: inherit(&r.api_key, &m.api_key, same_provider),
    };
    let fallback = r.fallback.as_ref().unwrap_or(&m.fallback);
    std::iter::once(&primary)
        .chain(fallback.iter())
        .map(|t| resolve(t, config, env))
        .collect()
}

fn resolve(
    t: &TargetConfig,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Target, ModelError> {
    let env_key = |var: &str| env(var).filter(|v| !v.is_empty()).map(Secret::new);
    let provider = match &t.provider {
        Some(p) => p.clone(),
        None if env_key("OPENAI_API_KEY").is_some() => "openai".into(),
        None if env_key("ANTHROPIC_API_KEY").is_some() => "anthropic".into(),
        None => "ollama".into(),
    };
    let (kind, url, model, var) = match provider.as_str() {
        "openai" => (
            Kind::OpenAi,
            "https://api.openai.com/v1",
            "gpt-4o-mini",
            Some("OPENAI_API_KEY"),
        ),
        "ollama" => (Kind::OpenAi, "http://127.0.0.1:11434/v1", "llama3.2", None),
        "anthropic" => (
            Kind::Anthropic,
            "https://api.anthropic.com",
            "claude-3-5-haiku-latest",
            Some("ANTHROPIC_API_KEY"),
        ),
        "replay" => (Kind::Replay, "", "replay", None),
        other => {
            return Err(ModelError::NotConfigured(format!(
                "unknown provider `{other}` in model.provider; use openai, anthropic, ollama or replay"
            )));
        }
    };
    let base_url = match (kind, &t.base_url) {
        (Kind::Replay, _) => config
            .model
            .replay_file
            .as_ref()
            .map(|p| p.display().to_string())
            .ok_or_else(|| {
                ModelError::NotConfigured("provider = \"replay\" needs model.replay_file".into())
            })?,
        (_, Some(u)) => u.trim_end_matches('/').to_string(),
        (_, None) => url.to_string(),
    };
    // A key goes only to its provider's own address, or to one the user set (user file,
    // environment, editor settings): never to a server a workspace file names.
    if config.workspace_hosts.contains(&base_url) {
        return Ok(Target {
            provider,
            kind,
            base_url,
            model: t.name.clone().unwrap_or_else(|| model.to_string()),
            api_key: None,
            key_hint: "no key is sent to a server a workspace file names; set model.base_url in the user config file to use a key there",
        });
    }
    let api_key = t.api_key.clone().or_else(|| var.and_then(env_key));
    let key_hint = match var {
        Some("OPENAI_API_KEY") => "set OPENAI_API_KEY, or model.api_key in the user config file",
        Some(_) => "set ANTHROPIC_API_KEY, or model.api_key in the user config file",
        None => "model.api_key in the user config file, or AGENT_LS_MODEL__API_KEY",
    };
    Ok(Target {
        provider,
        kind,
        base_url,
        model: t.name.clone().unwrap_or_else(|| model.to_string()),
        api_key,
        key_hint,
    })
}

/// Running totals for a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub calls: u32,
    pub usage: Usage,
    pub model_ms: u64,
    pub cost_usd: Option<f64>,
}

impl Totals {
    pub fn add(&mut self, r: &Response) {
        self.calls += 1;
        self.usage.add(r.usage);
        self.model_ms += r.duration_ms;
        if let Some(c) = r.cost_usd {
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + c);
        }
    }
}

/// The models of a session: targets per role, shared HTTP client, replay state, settings.
pub struct Models {
    http: reqwest::Client,
    targets: BTreeMap<Role, Result<Vec<Target>, ModelError>>,
    replay: Option<Arc<replay::Replay>>,
    prices: BTreeMap<String, Price>,
    timeout: Duration,
    idle: Duration,
    max_retries: u32,
    max_tokens: u32,
    /// With the provider's consent, the larger limit a cut-off answer is asked again with
    /// (`model.retry_max_tokens`; 0: never).
    retry_max_tokens: u32,
    /// The response cache, when the models have a workspace and `cache.enabled` is not off.
    cache: Option<Arc<cache::Cache>>,
    /// Base delay of the exponential backoff; tests make it small.
    pub backoff_base: Duration,
}

impl Models {
    pub fn new(config: &Config, root: Option<&Path>) -> Self {
        let env = |k: &str| std::env::var(k).ok();
        let targets: BTreeMap<Role, Result<Vec<Target>, ModelError>> = Role::ALL
            .iter()
            .map(|r| (*r, targets_for(*r, config, &env)))
            .collect();
        let replay = config.model.replay_file.as_ref().and_then(|file| {
            let uses_replay = targets
                .values()
                .flatten()
                .flatten()
                .any(|t| t.kind == Kind::Replay);
            uses_replay.then(|| {
                let path: PathBuf = match root {
                    Some(r) if file.is_relative() => r.join(file),
                    _ => file.clone(),
                };
                Arc::new(replay::Replay::open(&path))
            })
        });
        Models {
            http: client_builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
            targets,
            replay,
            prices: config.prices.clone(),
            timeout: Duration::from_secs(config.model.timeout_secs),
            idle: Duration::from_secs(config.model.stream_idle_secs),
            max_retries: config.model.max_retries,
            max_tokens: config.model.max_tokens,
            retry_max_tokens: config.model.retry_max_tokens,
            cache: root.and_then(|r| cache::Cache::new(config, r)),
            backoff_base: Duration::from_millis(500),
        }
    }

    pub fn targets(&self, role: Role) -> Result<&[Target], ModelError> {
        match self.targets.get(&role) {
            Some(Ok(t)) => Ok(t),
            Some(Err(e)) => Err(e.clone()),
            None => Err(ModelError::NotConfigured(format!(
                "no model for the {} role",
                role.as_str()
            ))),
        }
    }

    /// Calls the model for `role`, or answers from the response cache when it holds an answer
    /// to this request (or, for a read-only call, to a near duplicate of it); a new answer of
    /// the first target is kept there when the cache may answer such calls.
    pub async fn call(
        &self,
        role: Role,
        request: &Request,
        cancel: &CancellationToken,
        on_token: Option<OnToken<'_>>,
    ) -> Result<Response, ModelError> {
        let first = self.targets(role)?.first();
        let asked = match (&self.cache, first) {
            (Some(c), Some(t)) => c.ask(role, request, t).map(|a| (c.clone(), Arc::new(a))),
            _ => None,
        };
        let Some((cache, ask)) = asked else {
            return self.call_models(role, request, cancel, on_token).await;
        };
        if let Some(hit) = cache.clone().lookup_async(ask.clone()).await {
            // Played as a stream, as a model's answer arrives.
            if let Some(f) = on_token {
                for piece in hit.text.split_inclusive(char::is_whitespace) {
                    f(piece);
                }
            }
            return Ok(hit);
        }
        let response = self.call_models(role, request, cancel, on_token).await?;
        cache.keep_async(ask, request, &response).await;
        Ok(response)
    }

    /// Calls the model for `role`; an answer cut off at its output limit is asked for once
    /// more with `model.retry_max_tokens`, when the provider allows a larger limit (the
    /// setting is its consent). The answer counts both calls' attempts and usage.
    async fn call_models(
        &self,
        role: Role,
        request: &Request,
        cancel: &CancellationToken,
        on_token: Option<OnToken<'_>>,
    ) -> Result<Response, ModelError> {
        let first = self.call_targets(role, request, cancel, on_token).await?;
        let used = request.max_tokens.unwrap_or(self.max_tokens);
        if !first.cut_off || self.retry_max_tokens <= used {
            return Ok(first);
        }
        info!(
            role = role.as_str(),
            max_tokens = self.retry_max_tokens,
            "the answer was cut off at {used} tokens; asking once more with the larger limit"
        );
        let larger = Request {
            max_tokens: Some(self.retry_max_tokens),
            ..request.clone()
        };
        let mut again = self.call_targets(role, &larger, cancel, on_token).await?;
        again.attempts += first.attempts;
        again.usage.add(first.usage);
        Ok(again)
    }

    /// Calls the model for `role`: each target in turn, each with retries for transient
    /// failures; `cancel` drops the request in flight at once.
    async fn call_targets(
        &self,
        role: Role,
        request: &Request,
        cancel: &CancellationToken,
        on_token: Option<OnToken<'_>>,
    ) -> Result<Response, ModelError> {
        let targets = self.targets(role)?;
        let started = Instant::now();
        let mut attempts = 0;
        let mut last_error = None;
        for target in targets {
            for retry in 0..=self.max_retries {
                attempts += 1;
                let attempt = self.call_once(role, target, request, on_token);
                let result = tokio::select! {
                    r = tokio::time::timeout(self.timeout, attempt) => r.unwrap_or_else(|_| Err(ModelError::Timeout {
                        provider: target.label(),
                        seconds: self.timeout.as_secs(),
                    })),
                    _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                };
                match result {
                    Ok(mut response) => {
                        response.attempts = attempts;
                        response.duration_ms = started.elapsed().as_millis() as u64;
                        response.cost_usd = self.prices.get(&response.model).map(|p| {
                            (response.usage.input_tokens as f64 * p.input_per_mtok
                                + response.usage.output_tokens as f64 * p.output_per_mtok)
                                / 1e6
                        });
                        info!(
                            role = role.as_str(),
                            model = %target.label(),
                            attempts,
                            input_tokens = response.usage.input_tokens,
                            output_tokens = response.usage.output_tokens,
                            ms = response.duration_ms,
                            "model call finished"
                        );
                        return Ok(response);
                    }
                    Err(e) if e.is_final() => return Err(e),
                    Err(e) if e.is_transient() && retry < self.max_retries => {
                        let delay = e
                            .retry_after()
                            .unwrap_or_else(|| backoff(self.backoff_base, retry))
                            .min(Duration::from_secs(60));
                        warn!(role = role.as_str(), model = %target.label(), "transient failure, retrying in {delay:?}: {e}");
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                        }
                        last_error = Some(e);
                    }
                    Err(e) => {
                        warn!(role = role.as_str(), model = %target.label(), "model failed: {e}");
                        last_error = Some(e);
                        break;
                    }
                }
            }
        }
        Err(last_error.unwrap_or_else(|| ModelError::NotConfigured("no model to call".into())))
    }

    async fn call_once(
        &self,
        role: Role,
        target: &Target,
        request: &Request,
        on_token: Option<OnToken<'_>>,
    ) -> Result<Response, ModelError> {
        let max_tokens = request.max_tokens.unwrap_or(self.max_tokens);
        match target.kind {
            Kind::OpenAi | Kind::Anthropic => {
                let call = http::Call {
                    http: &self.http,
                    target,
                    max_tokens,
                    idle: self.idle,
                    on_token,
                };
                complete(call, request).await
            }
            Kind::Replay => match &self.replay {
                Some(r) => {
                    let answer = r.next(role)?;
                    // Played as a stream, word by word, as a model's answer arrives.
                    if let Some(f) = on_token {
                        for piece in answer.text.split_inclusive(char::is_whitespace) {
                            f(piece);
                        }
                    }
                    Ok(answer)
                }
                None => Err(ModelError::NotConfigured(
                    "provider = \"replay\" needs model.replay_file".into(),
                )),
            },
        }
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}

/// Sends `request` over HTTP in the wire format of the call's target: Anthropic's, or else
/// OpenAI's. Here rather than in http.rs, which the two formats use: so neither imports back.
pub(crate) async fn complete(
    call: http::Call<'_>,
    request: &Request,
) -> Result<Response, ModelError> {
    match call.target.kind {
        Kind::Anthropic => anthropic::complete(call, request).await,
        Kind::OpenAi | Kind::Replay => openai::complete(call, request).await,
    }
}

/// Exponential backoff with "equal jitter": a random delay between half of base × 2^retry
/// and all of it (the exponent stops at 6), so retries spread out but never come at once.
fn backoff(base: Duration, retry: u32) -> Duration {
    let ceiling = base.saturating_mul(1 << retry.min(6));
    ceiling.mul_f64(0.5 + fastrand::f64() * 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn defaults_follow_the_keys_in_the_environment() {
        let c = Config::default();
        let t = &targets_for(Role::Coder, &c, &env(&[("OPENAI_API_KEY", "sk-1")])).unwrap()[0];
        assert_eq!(
            (t.provider.as_str(), t.model.as_str()),
            ("openai", "gpt-4o-mini")
        );
        assert_eq!(t.api_key.as_ref().map(|k| k.expose()), Some("sk-1"));
        let t = &targets_for(Role::Coder, &c, &env(&[("ANTHROPIC_API_KEY", "a")])).unwrap()[0];
        assert_eq!(t.kind, Kind::Anthropic);
        let t = &targets_for(Role::Coder, &c, &env(&[])).unwrap()[0];
        assert_eq!(
            (t.provider.as_str(), t.base_url.as_str()),
            ("ollama", "http://127.0.0.1:11434/v1")
        );
    }

    #[test]
    fn roles_override_the_default_and_have_their_own_fallbacks() {
        let mut c = Config::default();
        c.model.provider = Some("openai".into());
        c.model.name = Some("base".into());
        c.model.fallback = vec![TargetConfig {
            provider: Some("ollama".into()),
            ..Default::default()
        }];
        c.roles.coder.provider = Some("anthropic".into());
        c.roles.coder.fallback = Some(vec![]);
        let coder = targets_for(Role::Coder, &c, &env(&[])).unwrap();
        assert_eq!(coder.len(), 1);
        assert_eq!(
            coder[0].model, "claude-3-5-haiku-latest",
            "a different provider does not inherit the model"
        );
        let planner = targets_for(Role::Planner, &c, &env(&[])).unwrap();
        assert_eq!(
            planner
                .iter()
                .map(|t| t.provider.as_str())
                .collect::<Vec<_>>(),
            ["openai", "ollama"]
        );
        assert_eq!(planner[0].model, "base");
        // The reviewer may use another model than the coder's.
        c.roles.reviewer.name = Some("reviewing-model".into());
        let reviewer = targets_for(Role::Reviewer, &c, &env(&[])).unwrap();
        assert_eq!(
            (reviewer[0].provider.as_str(), reviewer[0].model.as_str()),
            ("openai", "reviewing-model")
        );
    }

    #[test]
    fn unknown_providers_and_secrets_in_text() {
        let mut c = Config::default();
        c.model.provider = Some("skynet".into());
        assert!(matches!(
            targets_for(Role::Coder, &c, &env(&[])),
            Err(ModelError::NotConfigured(_))
        ));
        let s = Secret::new("sk-abcdef");
        assert_eq!(
            redact("key sk-abcdef leaked", &[&s]),
            "key <redacted> leaked"
        );
    }

    #[test]
    fn only_transient_errors_are_retried() {
        let http = |status| ModelError::Http {
            provider: "p".into(),
            status,
            body: String::new(),
            retry_after: None,
        };
        assert!(http(429).is_transient() && http(503).is_transient());
        assert!(!http(400).is_transient());
        assert!(
            !ModelError::Auth {
                provider: "p".into(),
                status: 401,
                fix: String::new()
            }
            .is_transient()
        );
    }
}
