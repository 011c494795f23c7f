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

/// The checks of one target, in order; each stops the rest when what follows cannot work.
async fn check_target(models: &Models, t: &Target, out: &mut Vec<Check>) {
    let mut report = Report {
        label: t.label(),
        out,
    };
    if t.kind == Kind::Replay {
        let r = super::replay::Replay::open(std::path::Path::new(&t.base_url));
        match r.next(Role::Planner) {
            Err(super::ModelError::NotConfigured(e)) => report.push("replay file", false, e),
            _ => report.push("replay file", true, format!("{} reads", t.base_url)),
        }
        return;
    }
    if check_key(t, &mut report) && check_server(models, t, &mut report).await {
        check_completion(models, t, &mut report).await;
    }
}

/// Where the checks of one target go.
struct Report<'a> {
    label: String,
    out: &'a mut Vec<Check>,
}

impl Report<'_> {
    fn push(&mut self, check: &'static str, ok: bool, detail: String) {
        self.out.push(Check {
            target: self.label.clone(),
            check,
            ok,
            detail,
        })
    }
}

/// A key is needed for the official servers only. False when the rest cannot work.
fn check_key(t: &Target, report: &mut Report) -> bool {
    let official = t.base_url.starts_with("https://api.openai.com")
        || t.base_url.starts_with("https://api.anthropic.com");
    match (&t.api_key, official) {
        (Some(_), _) => report.push("key", true, "an API key is set".into()),
        (None, true) => {
            report.push("key", false, format!("no API key: {}", t.key_hint));
            return false;
        }
        (None, false) => report.push("key", true, "none needed for this server".into()),
    }
    true
}

/// Reachable, and is the model there? False when the rest cannot work.
async fn check_server(models: &Models, t: &Target, report: &mut Report<'_>) -> bool {
    let url = match t.kind {
        Kind::Anthropic => format!("{}/v1/models", t.base_url),
        _ => format!("{}/models", t.base_url),
    };
    let mut req = models.http().get(&url);
    if t.kind == Kind::Anthropic {
        req = req.header("anthropic-version", "2023-06-01");
    }
    let req = super::http::authorize(req, t);
    match req.timeout(Duration::from_secs(15)).send().await {
        Err(e) => {
            let hint = if t.provider == "ollama" {
                " (start it with `ollama serve`)"
            } else {
                ""
            };
            report.push(
                "reachable",
                false,
                format!(
                    "cannot reach {url}: {}{hint}",
                    super::http::connect_failure(t, &e, false)
                ),
            );
            false
        }
        Ok(resp) if resp.status().as_u16() == 401 || resp.status().as_u16() == 403 => {
            report.push(
                "reachable",
                false,
                format!(
                    "the server refused the key (HTTP {}): {}",
                    resp.status().as_u16(),
                    t.key_hint
                ),
            );
            false
        }
        Ok(resp) if resp.status().is_success() => {
            report.push("reachable", true, url.clone());
            let listed = resp.json::<Value>().await.map(|v| models_listed(&v));
            check_listed(t, &listed.unwrap_or_default(), report)
        }
        Ok(resp) => {
            report.push(
                "reachable",
                true,
                format!(
                    "{url} answered HTTP {} (model list unavailable)",
                    resp.status().as_u16()
                ),
            );
            true
        }
    }
}

/// The model names in a server's list (OpenAI's `data[].id`, Ollama's `models[].name`, ...).
fn models_listed(v: &Value) -> Vec<String> {
    v["data"]
        .as_array()
        .or(v["models"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|m| {
            m["id"]
                .as_str()
                .or(m["name"].as_str())
                .or(m["model"].as_str())
                .map(String::from)
        })
        .collect()
}

/// Is the configured model among those the server lists? False when it is not.
fn check_listed(t: &Target, listed: &[String], report: &mut Report) -> bool {
    if listed.iter().any(|m| m == &t.model) {
        report.push("model listed", true, t.model.clone());
    } else if listed.is_empty() {
        report.push(
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
        report.push(
            "model listed",
            false,
            format!(
                "`{}` is not among the server's models ({}); set model.name to one of them{hint}",
                t.model,
                listed.join(", ")
            ),
        );
        return false;
    }
    true
}

/// A one-token completion through the same client the agent uses.
async fn check_completion(models: &Models, t: &Target, report: &mut Report<'_>) {
    let request = Request {
        messages: vec![Message::user("Say OK.")],
        max_tokens: Some(1),
        ..Request::default()
    };
    let call = super::http::Call {
        http: models.http(),
        target: t,
        max_tokens: 1,
        idle: Duration::from_secs(30),
        on_token: None,
    };
    let result = super::complete(call, &request).await;
    match result {
        Ok(r) => report.push(
            "completion",
            true,
            format!("answered in {} ms", r.duration_ms),
        ),
        Err(e) => report.push("completion", false, e.to_string()),
    }
}
