//! `agent-ls doctor`: checks every configured model the way a call would use it: key present,
//! server reachable, model listed, and a one-token completion, saying how to fix what fails.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::{Kind, Message, Models, Request, Role, Target};

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub target: String,
    pub check: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Runs every check for every distinct target of every role.
pub async fn run(models: &Models) -> Vec<Check> {
    let mut seen = BTreeSet::new();
    let mut checks = Vec::new();
    for role in Role::ALL {
        let targets = match models.targets(role) {
            Ok(t) => t.to_vec(),
            Err(e) => {
                checks.push(Check {
                    target: role.as_str().into(),
                    check: "configuration",
                    ok: false,
                    detail: e.to_string(),
                });
                continue;
            }
        };
        for t in targets {
            if seen.insert((t.provider.clone(), t.base_url.clone(), t.model.clone())) {
                check_target(models, &t, &mut checks).await;
            }
        }
    }
    checks
}

async fn check_target(models: &Models, t: &Target, out: &mut Vec<Check>) {
    let label = t.label();
    let mut push = |check: &'static str, ok: bool, detail: String| {
        out.push(Check {
            target: label.clone(),
            check,
            ok,
            detail,
        })
    };
    if t.kind == Kind::Replay {
        let r = super::replay::Replay::open(std::path::Path::new(&t.base_url));
        match r.next(Role::Planner) {
            Err(super::ModelError::NotConfigured(e)) => push("replay file", false, e),
            _ => push("replay file", true, format!("{} reads", t.base_url)),
        }
        return;
    }
    let official = t.base_url.starts_with("https://api.openai.com")
        || t.base_url.starts_with("https://api.anthropic.com");
    match (&t.api_key, official) {
        (Some(_), _) => push("key", true, "an API key is set".into()),
        (None, true) => {
            push("key", false, format!("no API key: {}", t.key_hint));
            return;
        }
        (None, false) => push("key", true, "none needed for this server".into()),
    }
    // Reachable, and is the model there?
    let (url, mut req) = match t.kind {
        Kind::Anthropic => {
            let url = format!("{}/v1/models", t.base_url);
            let mut r = models
                .http()
                .get(&url)
                .header("anthropic-version", "2023-06-01");
            if let Some(k) = &t.api_key {
                r = r.header("x-api-key", k.expose());
            }
            (url, r)
        }
        _ => {
            let url = format!("{}/models", t.base_url);
            (url.clone(), models.http().get(&url))
        }
    };
    if t.kind == Kind::OpenAi
        && let Some(k) = t.api_key.as_ref().filter(|k| !k.is_empty())
    {
        req = req.bearer_auth(k.expose());
    }
    match req.timeout(Duration::from_secs(15)).send().await {
        Err(e) => {
            let hint = if t.provider == "ollama" {
                " (start it with `ollama serve`)"
            } else {
                ""
            };
            push(
                "reachable",
                false,
                format!("cannot reach {url}: {}{hint}", super::connect_error(t, &e)),
            );
            return;
        }
        Ok(resp) if resp.status().as_u16() == 401 || resp.status().as_u16() == 403 => {
            push(
                "reachable",
                false,
                format!(
                    "the server refused the key (HTTP {}): {}",
                    resp.status().as_u16(),
                    t.key_hint
                ),
            );
            return;
        }
        Ok(resp) if resp.status().is_success() => {
            push("reachable", true, url.clone());
            let listed: Vec<String> = resp
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v["data"].as_array().or(v["models"].as_array()).cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|m| {
                    m["id"]
                        .as_str()
                        .or(m["name"].as_str())
                        .or(m["model"].as_str())
                        .map(String::from)
                })
                .collect();
            if listed.iter().any(|m| m == &t.model) {
                push("model listed", true, t.model.clone());
            } else if listed.is_empty() {
                push(
                    "model listed",
                    true,
                    "the server lists no models; trying it anyway".into(),
                );
            } else {
                let hint = if t.provider == "ollama" {
                    format!(" (or `ollama pull {}`)", t.model)
                } else {
                    String::new()
                };
                push(
                    "model listed",
                    false,
                    format!(
                        "`{}` is not among the server's models ({}); set model.name to one of them{hint}",
                        t.model,
                        listed.join(", ")
                    ),
                );
                return;
            }
        }
        Ok(resp) => push(
            "reachable",
            true,
            format!(
                "{url} answered HTTP {} (model list unavailable)",
                resp.status().as_u16()
            ),
        ),
    }
    // A one-token completion through the same client the agent uses.
    let request = Request {
        messages: vec![Message::user("Say OK.")],
        max_tokens: Some(1),
        ..Request::default()
    };
    let result = match t.kind {
        Kind::Anthropic => {
            super::anthropic::complete(models.http(), t, &request, 1, Duration::from_secs(30), None)
                .await
        }
        _ => {
            super::openai::complete(models.http(), t, &request, 1, Duration::from_secs(30), None)
                .await
        }
    };
    match result {
        Ok(r) => push(
            "completion",
            true,
            format!("answered in {} ms", r.duration_ms),
        ),
        Err(e) => push("completion", false, e.to_string()),
    }
}
