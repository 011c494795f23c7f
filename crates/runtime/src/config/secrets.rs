//! The values of every key the configuration gave agent-ls, wherever it came from, for
//! redaction by value (the journal, the store, the cache, a test run's output). Apart from
//! redact.rs, which the schema itself uses, so that neither file depends on the other.

use super::schema::{Config, RoleConfig, Secret, TargetConfig};

/// The values of every key the configuration holds, whatever layer gave it (the user file,
/// `AGENT_LS_*` variables): the model's, its fallbacks', every role's and its fallbacks', and
/// the value of the variable `memory.embeddings.api_key_env` names, whatever its name. These
/// are redacted by value from what agent-ls writes (the journal, the store, the cache).
pub fn configured_secrets(config: &Config) -> Vec<String> {
    let target = |t: &TargetConfig| t.api_key.clone();
    let role = |r: &RoleConfig| {
        r.api_key
            .iter()
            .cloned()
            .chain(r.fallback.iter().flatten().filter_map(target))
            .collect::<Vec<Secret>>()
    };
    let roles = &config.roles;
    let mut keys: Vec<Secret> = config.model.api_key.iter().cloned().collect();
    keys.extend(config.model.fallback.iter().filter_map(target));
    for r in [
        &roles.planner,
        &roles.coder,
        &roles.reflector,
        &roles.evaluator,
        &roles.intent,
        &roles.summarizer,
        &roles.reviewer,
        &roles.tester,
    ] {
        keys.extend(role(r));
    }
    let mut out: Vec<String> = keys.iter().map(|k| k.expose().to_string()).collect();
    out.extend(
        config
            .memory
            .embeddings
            .as_ref()
            .and_then(|e| e.api_key_env.as_deref())
            .and_then(|var| std::env::var(var).ok()),
    );
    // Shorter values would redact ordinary words.
    out.retain(|s| s.len() >= 4);
    out
}

/// The configured keys of every configuration this process loaded (`load` remembers them),
/// for what redacts without a configuration at hand: a test run's output.
static REMEMBERED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Adds `config`'s keys (`configured_secrets`) to those this process remembers.
pub fn remember_secrets(config: &Config) {
    let mut known = REMEMBERED.lock().unwrap_or_else(|e| e.into_inner());
    for s in configured_secrets(config) {
        if !known.contains(&s) {
            known.push(s);
        }
    }
}

/// The keys of every configuration this process loaded.
pub fn remembered_secrets() -> Vec<String> {
    REMEMBERED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}
