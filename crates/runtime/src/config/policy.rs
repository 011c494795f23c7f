//! The trust-key policy: which keys a workspace file may set, only once the folder is trusted,
//! or never, and what the user is told about the keys left out.

/// Name of the per-workspace file, at the workspace root.
pub const WORKSPACE_FILE: &str = ".agent-ls.toml";

/// Keys that hold secrets; they are refused from every layer but the user file and environment.
pub(super) const SECRET_KEYS: &[&str] = &["api_key"];

/// Keys that run a program, name a server, send data or approve: a workspace file's value for
/// one applies only once the user trusts that folder (a key here covers the keys under it).
pub const TRUSTED_KEYS: &[&str] = &[
    "test.command",
    "test.allowlist",
    "test.on_save",
    "test.on_open",
    "model.provider",
    "model.base_url",
    "model.fallback",
    "model.replay_file",
    "roles",
    "agents",
    "mcp",
    // Starts the named program (a language server) after each edit.
    "lsp_servers.servers",
    "agent.approval",
    // The default agent brings its approval mode (an `auto` agent of the user's own).
    "agent.default_agent",
    // The user's spending cap: a workspace file may not raise or remove it.
    "agent.max_cost_usd",
    "log.file",
    "sandbox",
    "git.commit",
    "git.remote",
    // The user's records from every workspace would go into this workspace's prompts.
    "memory.scope",
    "memory.url",
    // `all` would answer the coder's edits from the store, which a cloned repository may
    // bring along in its `.agent-ls/` folder.
    "cache.enabled",
    // Names a server, and sends it the records' (redacted) text.
    "memory.embeddings",
    // Name the server the code around the cursor goes to, how, and with which key.
    "completion.base_url",
    "completion.provider",
    "completion.api_key_env",
];

/// Keys a workspace file never sets, trusted or not: which secrets reach test processes,
/// whether commands run without the sandbox, and whether the user's git hooks are skipped,
/// are the user's own choices.
pub const USER_ONLY_KEYS: &[&str] = &["test.env_allow", "sandbox.mode", "git.no_verify"];

/// Whether only the user's own configuration (the user file, the environment) may set `key`:
/// a key that runs a program, names a server, sends data or approves (`TRUSTED_KEYS`), a
/// user-only key, or a secret. `agent-ls batch` refuses a task whose config sets one.
pub fn runner_only(key: &str) -> bool {
    covered(key, TRUSTED_KEYS)
        || covered(key, USER_ONLY_KEYS)
        || SECRET_KEYS
            .iter()
            .any(|s| key == *s || key.ends_with(&format!(".{s}")))
}

/// What to tell the user about the workspace keys that were left out.
pub fn untrusted_message(keys: &[String], trusted: bool) -> String {
    let (user_only, gated): (Vec<&String>, Vec<&String>) =
        keys.iter().partition(|k| covered(k, USER_ONLY_KEYS));
    let mut parts = Vec::new();
    if !gated.is_empty() && !trusted {
        parts.push(format!(
            "this folder is not trusted, so its {WORKSPACE_FILE} settings {} are ignored (they run programs, name servers, send data or approve); `agent-ls trust` trusts it",
            gated.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    if !user_only.is_empty() {
        parts.push(format!(
            "{} in {WORKSPACE_FILE} {} ignored: only the user file, the environment or the editor's settings may set {}",
            user_only.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
            if user_only.len() == 1 { "is" } else { "are" },
            if user_only.len() == 1 { "it" } else { "them" },
        ));
    }
    parts.join("; ")
}

/// The keys of `withheld` that trusting the folder would let apply.
pub fn gated(withheld: &[String]) -> impl Iterator<Item = &String> {
    withheld.iter().filter(|k| !covered(k, USER_ONLY_KEYS))
}

/// Takes the editor's word on workspace trust out of an initializationOptions or
/// didChangeConfiguration value: a boolean `workspaceTrusted` beside the settings (VS Code
/// sends its own workspace trust there).
pub fn take_workspace_trust(value: &mut serde_json::Value) -> Option<WorkspaceTrust> {
    let trusted = value.as_object_mut()?.remove("workspaceTrusted")?;
    Some(match trusted.as_bool() {
        Some(true) => WorkspaceTrust::Trusted,
        _ => WorkspaceTrust::Untrusted,
    })
}

pub(super) fn covered(key: &str, list: &[&str]) -> bool {
    list.iter().any(|k| {
        key == *k
            || key
                .strip_prefix(k)
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// Whether the workspace folder is trusted with the keys in `TRUSTED_KEYS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkspaceTrust {
    /// As the user's trust file says (`agent-ls trust`).
    #[default]
    AsRecorded,
    /// The editor says so (VS Code's own workspace trust).
    Trusted,
    Untrusted,
}
