//! Loading: gathers the inputs, reads every layer in order, applies the workspace trust policy
//! and merges, keeping the problems found on the way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::layer::{
    ConfigError, Layer, Source, env_layer, flatten, join_key, json_layer, merge, read_file_layer,
    user_config_path,
};
use super::policy::{TRUSTED_KEYS, USER_ONLY_KEYS, WORKSPACE_FILE, WorkspaceTrust, covered, gated};
use super::schema::Config;
use crate::trust::Decision;

/// Everything configuration is read from, gathered by the caller so loading stays testable.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub user_file: Option<PathBuf>,
    pub workspace_root: Option<PathBuf>,
    pub workspace_trust: WorkspaceTrust,
    /// The trust file; `None` is the user's own.
    pub trust_file: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub initialization_options: Option<serde_json::Value>,
    pub client_settings: Option<serde_json::Value>,
}

impl Inputs {
    /// The user file under `$XDG_CONFIG_HOME` (or `~/.config`), and this process's environment.
    pub fn from_process(workspace_root: Option<PathBuf>) -> Self {
        Inputs {
            user_file: user_config_path(),
            workspace_root,
            workspace_trust: WorkspaceTrust::AsRecorded,
            trust_file: None,
            env: std::env::vars().collect(),
            initialization_options: None,
            client_settings: None,
        }
    }
}

/// The effective configuration and the problems found on the way.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub config: Config,
    /// For every key set by a layer other than the defaults, the layer that set it last.
    pub origins: BTreeMap<String, Source>,
    /// Layers (or keys) that were refused; the rest still applies.
    pub errors: Vec<ConfigError>,
    /// Keys the workspace file sets that were left out because the folder is not trusted
    /// (or that a workspace file never sets).
    pub untrusted: Vec<String>,
    /// The workspace folder is trusted.
    pub trusted: bool,
    /// Keys were withheld that trust would allow, and the user has not decided about this
    /// folder yet (nor has the editor): the server asks once.
    pub ask_trust: bool,
}

impl Loaded {
    pub fn origin(&self, key: &str) -> Source {
        self.origins.get(key).cloned().unwrap_or(Source::Default)
    }

    /// Every key with its effective value (null when unset) and source, secrets redacted, in a
    /// stable order.
    pub fn entries(&self) -> Vec<(String, serde_json::Value, Source)> {
        fn walk(
            prefix: &str,
            value: &serde_json::Value,
            out: &mut Vec<(String, serde_json::Value)>,
        ) {
            match value {
                serde_json::Value::Object(map) => {
                    for (k, v) in map {
                        walk(&join_key(prefix, k), v, out);
                    }
                }
                _ => out.push((prefix.to_string(), value.clone())),
            }
        }
        let mut flat = Vec::new();
        if let Ok(value) = serde_json::to_value(&self.config) {
            walk("", &value, &mut flat);
        }
        flat.into_iter()
            .map(|(key, value)| {
                let origin = self.origin(&key);
                (key, value, origin)
            })
            .collect()
    }
}

/// Reads every layer in order and merges the valid ones. A layer with an error is left out
/// whole, so a typo never half-applies a file.
pub fn load(inputs: &Inputs) -> Loaded {
    let decision = trust_decision(inputs);
    let trusted = decision == Decision::Trusted;
    let (layers, mut errors, untrusted, taken) = read_layers(inputs, trusted);
    let (mut config, origins) = merge(&layers);
    super::narrow::finish(&mut config, taken, trusted);
    if let Some(error) = check_default_agent(&mut config, &origins) {
        errors.push(error);
    }
    if let Some(error) = check_cost_cap(&mut config, &origins) {
        errors.push(error);
    }
    config.workspace_hosts = workspace_hosts(&config, &origins);
    resolve_prompt_paths(&mut config, &origins, inputs, trusted);
    let ask_trust = decision == Decision::Unknown && gated(&untrusted).next().is_some();
    // A test run redacts these from its output without the configuration at hand.
    super::secrets::remember_secrets(&config);
    Loaded {
        config,
        origins,
        errors,
        untrusted,
        trusted,
        ask_trust,
    }
}

/// Whether the workspace folder is trusted: the editor's word first, else the trust file.
fn trust_decision(inputs: &Inputs) -> Decision {
    match (inputs.workspace_trust, &inputs.workspace_root) {
        (WorkspaceTrust::Trusted, _) => Decision::Trusted,
        (WorkspaceTrust::Untrusted, _) | (_, None) => Decision::Declined,
        (WorkspaceTrust::AsRecorded, Some(root)) => {
            let store = match &inputs.trust_file {
                Some(f) => Ok(crate::trust::TrustStore::at(f.clone())),
                None => crate::trust::TrustStore::for_user(),
            };
            store.map_or(Decision::Unknown, |s| s.decision(root))
        }
    }
}

/// Every layer that read cleanly, in the order they apply, the errors of the others, and the
/// workspace file's keys withheld by the trust policy.
/// The workspace's `[permissions]` and `[[hooks]]` come back apart (`narrow`).
fn read_layers(
    inputs: &Inputs,
    trusted: bool,
) -> (
    Vec<Layer>,
    Vec<ConfigError>,
    Vec<String>,
    super::narrow::Taken,
) {
    let mut layers = Vec::new();
    let mut errors = Vec::new();
    let mut push = |result: Result<Option<Layer>, Vec<ConfigError>>| match result {
        Ok(Some(layer)) => layers.push(layer),
        Ok(None) => {}
        Err(mut errs) => errors.append(&mut errs),
    };
    if let Some(path) = &inputs.user_file {
        push(read_file_layer(Source::UserFile(path.clone()), path));
    }
    let mut untrusted = Vec::new();
    let mut taken = super::narrow::Taken::default();
    if let Some(root) = &inputs.workspace_root {
        let path = root.join(WORKSPACE_FILE);
        push(
            read_file_layer(Source::WorkspaceFile(path.clone()), &path).map(|layer| {
                layer.map(|mut l| {
                    untrusted = withhold(&mut l.table, trusted);
                    taken = super::narrow::take(&mut l.table);
                    l
                })
            }),
        );
    }
    for (name, value) in &inputs.env {
        push(env_layer(name, value));
    }
    if let Some(value) = &inputs.initialization_options {
        push(json_layer(Source::InitializationOptions, value).map(Some));
    }
    if let Some(value) = &inputs.client_settings {
        push(json_layer(Source::ClientSettings, value).map(Some));
    }
    (layers, errors, untrusted, taken)
}

/// An agent nobody defines would otherwise run every goal as `build` without a word: the
/// error says so, and `build` runs.
fn check_default_agent(
    config: &mut Config,
    origins: &BTreeMap<String, Source>,
) -> Option<ConfigError> {
    let named = &config.agent.default_agent;
    if agent_ls_core::agent::agents::BUILT_IN.contains(&named.as_str())
        || config.agents.contains_key(named)
    {
        return None;
    }
    let error = ConfigError {
        source: origins
            .get("agent.default_agent")
            .cloned()
            .unwrap_or(Source::Default),
        line: None,
        key: Some("agent.default_agent".into()),
        message: format!("there is no agent `{named}`: use build, plan, review or one of [agents]"),
    };
    config.agent.default_agent = "build".into();
    Some(error)
}

/// A cost cap that is no amount (zero, negative, not finite) would stop every run before its
/// first call, or never: the error says so, and the run has no cap.
fn check_cost_cap(config: &mut Config, origins: &BTreeMap<String, Source>) -> Option<ConfigError> {
    let cap = config.agent.max_cost_usd?;
    if cap > 0.0 && cap.is_finite() {
        return None;
    }
    config.agent.max_cost_usd = None;
    Some(ConfigError {
        source: origins
            .get("agent.max_cost_usd")
            .cloned()
            .unwrap_or(Source::Default),
        line: None,
        key: Some("agent.max_cost_usd".into()),
        message: format!("{cap} is not an amount of dollars above zero; the run has no cost cap"),
    })
}

/// The prompt folders (the user's, and the workspace's once trusted), and each custom agent's
/// prompt file made absolute: relative to the file that named it.
fn resolve_prompt_paths(
    config: &mut Config,
    origins: &BTreeMap<String, Source>,
    inputs: &Inputs,
    trusted: bool,
) {
    if let Some(dir) = inputs.user_file.as_ref().and_then(|f| f.parent()) {
        config.prompt_dirs.push(dir.join("prompts"));
    }
    if let (Some(root), true) = (&inputs.workspace_root, trusted) {
        config
            .prompt_dirs
            .push(root.join(".agent-ls").join("prompts"));
    }
    for (name, agent) in config.agents.iter_mut() {
        let Some(prompt) = agent.prompt.as_mut().filter(|p| p.is_relative()) else {
            continue;
        };
        let base = match origins.get(&format!("agents.{name}.prompt")) {
            Some(Source::UserFile(f)) => f.parent().map(Path::to_path_buf),
            Some(Source::WorkspaceFile(_)) => inputs.workspace_root.clone(),
            _ => inputs.workspace_root.clone(),
        };
        if let Some(base) = base {
            *prompt = base.join(&*prompt);
        }
    }
}

/// Removes from a workspace file's table the keys it may not set here: those of
/// `TRUSTED_KEYS` unless the folder is trusted, and those of `USER_ONLY_KEYS` always. Returns
/// their names.
fn withhold(table: &mut toml::Table, trusted: bool) -> Vec<String> {
    let mut keys = Vec::new();
    flatten("", table, &mut |key, _| keys.push(key.to_string()));
    let mut out = Vec::new();
    for key in keys {
        if covered(&key, USER_ONLY_KEYS) || (!trusted && covered(&key, TRUSTED_KEYS)) {
            let path: Vec<String> = key.split('.').map(String::from).collect();
            remove_path(table, &path);
            out.push(key);
        }
    }
    out
}

fn remove_path(table: &mut toml::Table, path: &[String]) {
    match path {
        [] => {}
        [last] => {
            table.remove(last);
        }
        [first, rest @ ..] => {
            if let Some(toml::Value::Table(inner)) = table.get_mut(first) {
                remove_path(inner, rest);
                if inner.is_empty() {
                    table.remove(first);
                }
            }
        }
    }
}

/// The model server addresses a workspace file set: API keys never go to them.
fn workspace_hosts(
    config: &Config,
    origins: &BTreeMap<String, Source>,
) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let from_workspace = |key: &str| matches!(origins.get(key), Some(Source::WorkspaceFile(_)));
    let roles = [
        ("planner", &config.roles.planner),
        ("coder", &config.roles.coder),
        ("reflector", &config.roles.reflector),
        ("evaluator", &config.roles.evaluator),
        ("intent", &config.roles.intent),
        ("summarizer", &config.roles.summarizer),
        ("reviewer", &config.roles.reviewer),
        ("tester", &config.roles.tester),
    ];
    let mut add = |url: &Option<String>| {
        if let Some(u) = url {
            out.insert(u.trim_end_matches('/').to_string());
        }
    };
    if from_workspace("model.base_url") {
        add(&config.model.base_url);
    }
    if from_workspace("memory.embeddings.url") {
        add(&config.memory.embeddings.as_ref().map(|e| e.url.clone()));
    }
    if from_workspace("completion.base_url") {
        add(&config.completion.base_url);
    }
    if from_workspace("model.fallback") {
        config.model.fallback.iter().for_each(|t| add(&t.base_url));
    }
    for (name, role) in roles {
        if from_workspace(&format!("roles.{name}.base_url")) {
            add(&role.base_url);
        }
        if from_workspace(&format!("roles.{name}.fallback")) {
            role.fallback
                .iter()
                .flatten()
                .for_each(|t| add(&t.base_url));
        }
    }
    out
}
