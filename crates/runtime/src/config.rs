//! Layered configuration: built-in defaults, the user file, the workspace file, `AGENT_LS_*`
//! environment variables, then the client's settings, with the source of every value kept.
//! Secrets are taken only from the environment or the user file.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The `[sandbox]` section is the sandbox's own type: it lives beside the code that applies it.
pub use crate::trust::sandbox::{SandboxConfig, SandboxMode};
use agent_ls_core::agent::Evaluation;
use agent_ls_core::agent::prompts::{self, Prompts};
use serde::{Deserialize, Serialize, Serializer};

/// The documented default file; the built-in defaults must equal what it says (a test pins it).
pub const DEFAULT_FILE: &str = include_str!("../../../config/agent-ls.toml");

/// Name of the per-workspace file, at the workspace root.
pub const WORKSPACE_FILE: &str = ".agent-ls.toml";

/// Environment variables `AGENT_LS_<SECTION>__<KEY>` set configuration keys.
const ENV_PREFIX: &str = "AGENT_LS_";

/// Keys that hold secrets; they are refused from every layer but the user file and environment.
const SECRET_KEYS: &[&str] = &["api_key"];

/// Keys that run a program, name a server, send data or approve: a workspace file's value for
/// one applies only once the user trusts that folder (a key here covers the keys under it).
pub const TRUSTED_KEYS: &[&str] = &[
    "test.command",
    "test.allowlist",
    "test.on_save",
    "model.provider",
    "model.base_url",
    "model.fallback",
    "model.replay_file",
    "roles",
    "agents",
    "mcp",
    "agent.approval",
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

fn covered(key: &str, list: &[&str]) -> bool {
    list.iter().any(|k| {
        key == *k
            || key
                .strip_prefix(k)
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub log: LogConfig,
    pub model: ModelConfig,
    pub roles: RolesConfig,
    pub prices: BTreeMap<String, Price>,
    pub agent: AgentConfig,
    /// Custom agents by name (`agent-ls run --agent NAME`), beside the built-in ones.
    pub agents: BTreeMap<String, CustomAgent>,
    pub context: ContextConfig,
    pub mcp: McpConfig,
    pub edit: EditConfig,
    pub test: TestConfig,
    pub sandbox: SandboxConfig,
    pub git: GitConfig,
    pub memory: MemoryConfig,
    pub tester: TesterConfig,
    pub cache: CacheConfig,
    /// Model server addresses a workspace file named (in a trusted folder): no API key is ever
    /// sent to them. Not a configuration key; filled in when the layers are merged.
    #[serde(skip)]
    pub workspace_hosts: std::collections::BTreeSet<String>,
    /// Folders whose `NAME.md` files override the built-in role prompts, later ones winning:
    /// the user's `prompts/` beside their configuration file, then the workspace's
    /// `.agent-ls/prompts/` when the folder is trusted. Filled in when the layers are merged.
    #[serde(skip)]
    pub prompt_dirs: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    /// Edits go to the editor with change annotations that need confirmation (VS Code's
    /// preview); clients without annotation support are asked first.
    Confirm,
    /// Always ask with window/showMessageRequest (or on the terminal) before applying.
    Prompt,
    /// Apply without asking.
    Auto,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub approval: Approval,
    pub max_retries: u32,
    pub max_iterations: u32,
    pub context_bytes: usize,
    pub evaluate: Evaluation,
    /// Correction rounds `evaluate = "full"` may start, each on the evaluator's critique.
    pub max_corrections: u32,
    /// The agent a run uses unless the command names one: build, plan, review or a custom one.
    pub default_agent: String,
    /// The most seconds one tool call may take; a late result is answered as a timeout.
    pub tool_timeout_secs: u64,
    /// A tool the coder's first call of each turn must call (`tool_choice`), for small models
    /// that write before they read; empty: the model chooses.
    pub first_tool: String,
    /// Rounds of tool calls (read_file, grep...) the coder may make in one turn; 0 turns the
    /// tools off.
    pub max_tool_steps: u32,
    /// The most bytes of one tool result the model is shown (head and tail kept).
    pub tool_result_bytes: usize,
    /// The reviewer reads the run's whole diff once its tests pass: off, advise (findings
    /// reported) or gate (a confident P0/P1 finding sends the change back to the coder).
    pub review: agent_ls_core::agent::review::ReviewMode,
    /// The confidence from which a P0/P1 finding blocks in gate mode (0 to 1).
    pub review_min_confidence: f64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            approval: Approval::Confirm,
            max_retries: 3,
            max_iterations: 15,
            context_bytes: 60_000,
            evaluate: Evaluation::Basic,
            max_corrections: 2,
            default_agent: "build".into(),
            tool_timeout_secs: 30,
            first_tool: String::new(),
            max_tool_steps: 8,
            tool_result_bytes: 16_000,
            review: agent_ls_core::agent::review::ReviewMode::Advise,
            review_min_confidence: agent_ls_core::agent::review::default_min_confidence(),
        }
    }
}

/// What the prompt is given to find its way: the repo map and the conversation's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// Tokens of the repo map in the first prompt; 0 leaves the map out.
    pub map_tokens: usize,
    /// Tool rounds in one turn after which the older rounds are replaced by a summary the
    /// model writes; 0 never summarises.
    pub summarize_after: u32,
    /// The most bytes of a tool-using turn's first prompt (system prompt, goal, failures,
    /// repo map and the files that fit); everything else the model reads through its tools.
    /// 0: only agent.context_bytes limits it.
    pub first_prompt_bytes: usize,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            map_tokens: 1024,
            summarize_after: 5,
            first_prompt_bytes: 16_384,
        }
    }
}

/// Git checkpoints, commits and pull requests (docs/git.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GitConfig {
    /// Record the working tree as a checkpoint before each run (in a git repository).
    pub checkpoints: bool,
    /// How many runs' checkpoints are kept; older ones are dropped (and by `agent-ls gc`).
    pub keep_checkpoints: usize,
    /// Whether a successful run's files are committed. Unset, the front end decides: the
    /// editor asks, `agent-ls run` does not commit (`CommitMode::or_default`).
    pub commit: Option<CommitMode>,
    /// Commit without running the repository's pre-commit and commit-msg hooks.
    pub no_verify: bool,
    /// The remote `agent-ls pr` pushes to.
    pub remote: String,
    /// Where `agent-ls run` works: the checkout itself, a new branch in it, or a worktree.
    pub isolation: Isolation,
}

/// Where a run of `agent-ls run` works (docs/git.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// In the checkout as it is.
    #[default]
    None,
    /// On a new branch `agent/<slug>` from HEAD, in a clean checkout.
    Branch,
    /// In a new worktree under `.agent-ls/worktrees/`, on a new branch.
    Worktree,
}

impl Default for GitConfig {
    fn default() -> Self {
        GitConfig {
            checkpoints: true,
            keep_checkpoints: 50,
            commit: None,
            no_verify: false,
            remote: "origin".into(),
            isolation: Isolation::None,
        }
    }
}

/// The tester role (docs/tester.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TesterConfig {
    /// Tests the tester may write for one run before it gives up (each refused one counts);
    /// 0 turns reproducing off.
    pub max_attempts: u32,
    /// After a change no test covered: "off", "suggest" (say so) or "always" (the tester
    /// adds a regression test that fails on the code before and passes after).
    pub after_fix: agent_ls_core::agent::tester::AfterFix,
    /// Whether a library a property test needs and the project lacks may be installed as a
    /// dev dependency, once the user approves; false never installs (`agent-ls batch` sets
    /// it so: its tasks run only under the sandbox).
    pub install: bool,
}

impl Default for TesterConfig {
    fn default() -> Self {
        TesterConfig {
            max_attempts: 3,
            after_fix: agent_ls_core::agent::tester::AfterFix::Suggest,
            install: true,
        }
    }
}

/// Memory across runs (docs/memory.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Remember each run's failures and fixes, and show earlier ones to the models.
    pub enabled: bool,
    /// The most bytes of remembered records a prompt shows.
    pub max_bytes: usize,
    /// Whose records a run sees: this workspace's, or also the user's from every workspace.
    pub scope: MemoryScope,
    /// A PostgreSQL store for a team (`postgres://user:password@host/db`) instead of the
    /// embedded SQLite one. It names a server, so a workspace file sets it only in a trusted
    /// folder; its password is never shown (`agent-ls config`, errors, logs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<DatabaseUrl>,
    /// An OpenAI-compatible `/v1/embeddings` endpoint: records and the current failures are
    /// also ranked by the similarity of their embeddings. Unset: full text alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingsConfig>,
}

/// `[memory.embeddings]`: the embedding model memory ranks by, beside full text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsConfig {
    /// The API's base URL, as `model.base_url` (`http://127.0.0.1:8080/v1`); `/embeddings` is
    /// added unless it ends so already.
    pub url: String,
    /// The model's name, sent with each request and kept with each vector: vectors of another
    /// model are not compared.
    pub model: String,
    /// The environment variable holding the API key sent as a bearer token (e.g.
    /// `OPENAI_API_KEY`); unset: no key. Never sent to a URL a workspace file names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// How long one request may take.
    #[serde(default = "embeddings_timeout")]
    pub timeout_secs: u64,
    /// The least cosine similarity a record found only by its embedding must have to be used.
    #[serde(default = "embeddings_min_similarity")]
    pub min_similarity: f64,
}

fn embeddings_timeout() -> u64 {
    10
}

fn embeddings_min_similarity() -> f64 {
    0.5
}

/// A database URL whose password is shown as `<redacted>` wherever it is printed or
/// serialized; `expose` gives it whole, for the one place that connects.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> Self {
        DatabaseUrl(url.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its password (`user:PASSWORD@`, or a `password=` parameter) replaced.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

/// `url` with the password of its `user:password@` part and of any `password=` parameter
/// replaced by `<redacted>`.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme) = out.find("://") {
        let rest = scheme + 3;
        let end = out[rest..].find(['/', '?']).map_or(out.len(), |i| rest + i);
        if let Some(at) = out[rest..end].rfind('@').map(|i| rest + i)
            && let Some(colon) = out[rest..at].find(':').map(|i| rest + i)
        {
            out.replace_range(colon + 1..at, "<redacted>");
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=<redacted>"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

#[cfg(test)]
mod url_tests {
    use super::*;

    #[test]
    fn a_urls_password_is_redacted_wherever_it_is() {
        assert_eq!(
            redact_url("postgres://team:s3cr%40t@db.example:5432/mem?sslmode=disable"),
            "postgres://team:<redacted>@db.example:5432/mem?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgresql://db/mem?user=team&password=s3cret"),
            "postgresql://db/mem?user=team&password=<redacted>"
        );
        assert_eq!(
            redact_url("postgres://team@db/mem"),
            "postgres://team@db/mem"
        );
        let url = DatabaseUrl::new("postgres://a:b@h/d");
        assert_eq!(
            format!("{url:?} {url}"),
            "postgres://a:<redacted>@h/d postgres://a:<redacted>@h/d"
        );
        assert_eq!(url.expose(), "postgres://a:b@h/d");
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl Serialize for DatabaseUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted())
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: true,
            max_bytes: 4096,
            scope: MemoryScope::Workspace,
            url: None,
            embeddings: None,
        }
    }
}

/// The response cache (docs/cache.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Which calls the cache answers: `"read_only"` (planning and explaining), `"all"` (also
    /// every other role on exact hits) or `"off"`; `true` and `false` are `read_only` and `off`.
    pub enabled: agent_ls_core::cache::Mode,
    /// The most answers kept; the least recently used go first.
    pub max_entries: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: agent_ls_core::cache::Mode::ReadOnly,
            max_entries: 500,
        }
    }
}

/// Whose records a run sees (`memory.scope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryScope {
    /// The workspace's own records (by its git remote, else its folder).
    #[default]
    Workspace,
    /// Also the user's records from every workspace, kept in the user's data folder.
    User,
}

/// When a successful run's files are committed (`git.commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitMode {
    Never,
    /// Ask the user after each successful run (the editor); `agent-ls run` has no one to ask
    /// after the run, so there it is `never`.
    Ask,
    OnSuccess,
}

impl CommitMode {
    /// The mode in effect: the configured one, or the front end's own default when unset.
    pub fn or_default(configured: Option<CommitMode>, front_end: CommitMode) -> CommitMode {
        configured.unwrap_or(front_end)
    }
}

/// MCP servers whose tools join the registry (`mcp__NAME__tool`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    pub servers: BTreeMap<String, McpServerConfig>,
    /// The most seconds one MCP tool call may take.
    pub call_timeout_secs: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            servers: BTreeMap::new(),
            call_timeout_secs: 30,
        }
    }
}

/// A stdio MCP server: the command that starts it, its arguments and its environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// A custom agent: its system prompt (a file), the tools it may call, how its edits are
/// approved and how many tool rounds a turn may have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct CustomAgent {
    pub description: String,
    /// A Markdown file with the agent's system prompt (relative to the file that names it:
    /// the user's configuration folder, or the workspace).
    pub prompt: Option<PathBuf>,
    /// Tool names it may call; empty: the reading tools.
    pub tools: Vec<String>,
    pub approval: Option<Approval>,
    pub max_tool_steps: Option<u32>,
}

/// One model to call: every key optional, so a role can override only what differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TargetConfig {
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub name: Option<String>,
    pub api_key: Option<Secret>,
}

/// Per-role overrides of `[model]`, with their own fallback sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct RoleConfig {
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub name: Option<String>,
    pub api_key: Option<Secret>,
    pub fallback: Option<Vec<TargetConfig>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct RolesConfig {
    pub planner: RoleConfig,
    pub coder: RoleConfig,
    pub reflector: RoleConfig,
    pub evaluator: RoleConfig,
    pub intent: RoleConfig,
    pub summarizer: RoleConfig,
    pub reviewer: RoleConfig,
    pub tester: RoleConfig,
}

/// Prices in US dollars per million tokens, keyed by model name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TestConfig {
    pub command: Vec<String>,
    pub nextest: bool,
    pub on_save: bool,
    pub debounce_ms: u64,
    pub timeout_secs: u64,
    pub grace_ms: u64,
    pub output_cap_bytes: usize,
    pub allowlist: Vec<String>,
    pub env_allow: Vec<String>,
}

impl Default for TestConfig {
    fn default() -> Self {
        TestConfig {
            command: Vec::new(),
            nextest: false,
            on_save: false,
            debounce_ms: 500,
            timeout_secs: 300,
            grace_ms: 2_000,
            output_cap_bytes: 1024 * 1024,
            allowlist: [
                "cargo",
                "python -m pytest",
                "python3 -m pytest",
                "pytest",
                "python -m unittest",
                "python3 -m unittest",
                "npm",
                "npx",
                "node",
                "go",
                "make",
            ]
            .map(String::from)
            .to_vec(),
            env_allow: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EditConfig {
    pub max_edits_per_file: usize,
    pub max_file_bytes: usize,
    pub line_window: usize,
}

impl Default for EditConfig {
    fn default() -> Self {
        let limits = agent_ls_core::edit::Limits::default();
        EditConfig {
            max_edits_per_file: limits.max_edits_per_file,
            max_file_bytes: limits.max_file_bytes,
            line_window: limits.line_window,
        }
    }
}

impl EditConfig {
    pub fn limits(&self) -> agent_ls_core::edit::Limits {
        agent_ls_core::edit::Limits {
            max_edits_per_file: self.max_edits_per_file,
            max_file_bytes: self.max_file_bytes,
            line_window: self.line_window,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub level: LogLevel,
    pub file: Option<PathBuf>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: LogLevel::Info,
            file: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// For a terminal command: as quiet as warn unless asked for more detail.
    pub fn min_warn(self) -> LogLevel {
        match self {
            LogLevel::Info => LogLevel::Warn,
            other => other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub name: Option<String>,
    pub api_key: Option<Secret>,
    pub fallback: Vec<TargetConfig>,
    pub replay_file: Option<PathBuf>,
    pub timeout_secs: u64,
    pub stream_idle_secs: u64,
    pub max_retries: u32,
    pub max_tokens: u32,
    /// The model's window in tokens: before each call the conversation is cut to fit it.
    pub context_tokens: usize,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            provider: None,
            base_url: None,
            name: None,
            api_key: None,
            fallback: Vec::new(),
            replay_file: None,
            timeout_secs: 120,
            stream_idle_secs: 60,
            max_retries: 3,
            max_tokens: 2048,
            context_tokens: 32_000,
        }
    }
}

/// A value that is never printed: `Debug` and serialisation both show `<redacted>`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The secret itself, for the one place that sends it (an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// Where a layer, and so a value, came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    UserFile(PathBuf),
    WorkspaceFile(PathBuf),
    Env(String),
    InitializationOptions,
    ClientSettings,
}

impl Source {
    fn may_hold_secrets(&self) -> bool {
        matches!(self, Source::Default | Source::UserFile(_) | Source::Env(_))
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::UserFile(p) => write!(f, "user file {}", p.display()),
            Source::WorkspaceFile(p) => write!(f, "workspace file {}", p.display()),
            Source::Env(var) => write!(f, "environment variable {var}"),
            Source::InitializationOptions => f.write_str("LSP initializationOptions"),
            Source::ClientSettings => f.write_str("LSP workspace/didChangeConfiguration"),
        }
    }
}

/// A problem with one layer, naming where it is so the user can fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub source: Source,
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid configuration in {}", self.source)?;
        if let Some(line) = self.line {
            write!(f, " at line {line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ", key `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// One layer of settings, already validated on its own.
#[derive(Debug, Clone)]
pub struct Layer {
    pub source: Source,
    table: toml::Table,
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

pub fn user_config_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("agent-ls").join("config.toml"))
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
    use crate::trust::Decision;
    let decision = match (inputs.workspace_trust, &inputs.workspace_root) {
        (WorkspaceTrust::Trusted, _) => Decision::Trusted,
        (WorkspaceTrust::Untrusted, _) | (_, None) => Decision::Declined,
        (WorkspaceTrust::AsRecorded, Some(root)) => {
            let store = match &inputs.trust_file {
                Some(f) => Ok(crate::trust::TrustStore::at(f.clone())),
                None => crate::trust::TrustStore::for_user(),
            };
            store.map_or(Decision::Unknown, |s| s.decision(root))
        }
    };
    let trusted = decision == Decision::Trusted;
    let mut untrusted = Vec::new();
    if let Some(root) = &inputs.workspace_root {
        let path = root.join(WORKSPACE_FILE);
        push(
            read_file_layer(Source::WorkspaceFile(path.clone()), &path).map(|layer| {
                layer.map(|mut l| {
                    untrusted = withhold(&mut l.table, trusted);
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
    let (mut config, origins) = merge(&layers);
    // An agent nobody defines would otherwise run every goal as `build` without a word.
    let named = &config.agent.default_agent;
    if !agent_ls_core::agent::agents::BUILT_IN.contains(&named.as_str())
        && !config.agents.contains_key(named)
    {
        errors.push(ConfigError {
            source: origins
                .get("agent.default_agent")
                .cloned()
                .unwrap_or(Source::Default),
            line: None,
            key: Some("agent.default_agent".into()),
            message: format!(
                "there is no agent `{named}`: use build, plan, review or one of [agents]"
            ),
        });
        config.agent.default_agent = "build".into();
    }
    config.workspace_hosts = workspace_hosts(&config, &origins);
    if let Some(dir) = inputs.user_file.as_ref().and_then(|f| f.parent()) {
        config.prompt_dirs.push(dir.join("prompts"));
    }
    if let (Some(root), true) = (&inputs.workspace_root, trusted) {
        config
            .prompt_dirs
            .push(root.join(".agent-ls").join("prompts"));
    }
    // A custom agent's prompt file is relative to the file that named it.
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
    let ask_trust = decision == Decision::Unknown && gated(&untrusted).next().is_some();
    Loaded {
        config,
        origins,
        errors,
        untrusted,
        trusted,
        ask_trust,
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

/// The largest configuration file read: a hostile workspace's huge file costs no memory.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

fn read_file_layer(source: Source, path: &Path) -> Result<Option<Layer>, Vec<ConfigError>> {
    use std::io::Read;
    let error = |line: Option<usize>, message: String| {
        Err(vec![ConfigError {
            source: source.clone(),
            line,
            key: None,
            message,
        }])
    };
    let mut bytes = Vec::new();
    let read =
        std::fs::File::open(path).and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes));
    match read {
        Ok(_) if bytes.len() as u64 > MAX_FILE_BYTES => error(
            None,
            format!(
                "the file is over {MAX_FILE_BYTES} bytes, the most a configuration file may be"
            ),
        ),
        Ok(_) => match String::from_utf8(bytes) {
            Ok(text) => parse_toml_layer(source, &text).map(Some),
            Err(e) => {
                let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
                let line = memchr::memchr_iter(b'\n', valid).count() + 1;
                error(Some(line), "the file is not UTF-8 text".into())
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => error(None, format!("cannot read the file: {e}")),
    }
}

/// Parses and validates one TOML file's text.
pub fn parse_toml_layer(source: Source, text: &str) -> Result<Layer, Vec<ConfigError>> {
    let error_at = |span: Option<std::ops::Range<usize>>, key: Option<String>, message: String| {
        let line = span.map(|s| line_of(text, s.start));
        ConfigError {
            source: source.clone(),
            line,
            key: key.or_else(|| line.and_then(|l| key_on_line(text, l))),
            message,
        }
    };
    if let Some((line, depth)) = too_deep_key(text) {
        return Err(vec![ConfigError {
            source,
            line: Some(line),
            key: None,
            message: format!(
                "a key nests {depth} tables deep here; at most {MAX_KEY_DEPTH} are allowed"
            ),
        }]);
    }
    let table: toml::Table = toml::from_str(text)
        .map_err(|e| vec![error_at(e.span(), None, e.message().to_string())])?;
    let deserializer = toml::Deserializer::parse(text)
        .map_err(|e| vec![error_at(e.span(), None, e.message().to_string())])?;
    if let Err(e) = serde_path_to_error::deserialize::<_, Config>(deserializer) {
        let key = Some(e.path().to_string()).filter(|k| k != ".");
        let inner = e.into_inner();
        return Err(vec![error_at(
            inner.span(),
            key,
            inner.message().to_string(),
        )]);
    }
    finish_layer(source, table, Some(text))
}

/// Refuses secrets where they may not come from; otherwise wraps the table as a layer.
fn finish_layer(
    source: Source,
    mut table: toml::Table,
    text: Option<&str>,
) -> Result<Layer, Vec<ConfigError>> {
    if !source.may_hold_secrets() {
        let mut found = Vec::new();
        strip_secrets("", &mut table, &mut found);
        if !found.is_empty() {
            // The whole layer is refused: a secret committed to a workspace is a mistake worth
            // fixing, and silently using the rest could hide it.
            return Err(found
                .into_iter()
                .map(|key| ConfigError {
                    source: source.clone(),
                    line: text.and_then(|t| line_of_key(t, &key)),
                    message: format!(
                        "secrets are read only from the environment or the user file ({}); remove it here",
                        user_config_path()
                            .map(|p| p.display().to_string())
                            .unwrap_or_else(|| "$XDG_CONFIG_HOME/agent-ls/config.toml".into())
                    ),
                    key: Some(key),
                })
                .collect());
        }
    }
    Ok(Layer { source, table })
}

fn strip_secrets(prefix: &str, table: &mut toml::Table, found: &mut Vec<String>) {
    let keys: Vec<String> = table.keys().cloned().collect();
    for key in keys {
        let path = join_key(prefix, &key);
        if SECRET_KEYS.contains(&key.as_str()) {
            table.remove(&key);
            found.push(path);
        } else if let Some(toml::Value::Table(inner)) = table.get_mut(&key) {
            strip_secrets(&path, inner, found);
        }
    }
}

/// One `AGENT_LS_SECTION__KEY=value` variable as a layer; other variables are not config.
fn env_layer(name: &str, value: &str) -> Result<Option<Layer>, Vec<ConfigError>> {
    let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
        return Ok(None);
    };
    if !rest.contains("__") {
        return Ok(None);
    }
    let source = Source::Env(name.to_string());
    let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
    // A value is read as TOML when it parses as one (numbers, booleans, arrays), else as a string.
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let mut table = toml::Table::new();
    insert_path(&mut table, &path, parsed);
    validate_table(&source, &table)?;
    finish_layer(source, table, None).map(Some)
}

/// The client's settings as a layer. Clients may wrap them in an `agent-ls` section.
pub fn json_layer(source: Source, value: &serde_json::Value) -> Result<Layer, Vec<ConfigError>> {
    let value = value
        .get("agent-ls")
        .or_else(|| value.get("agentLs"))
        .unwrap_or(value);
    let table = match json_to_toml(value) {
        Some(toml::Value::Table(t)) => t,
        None => toml::Table::new(),
        Some(other) => {
            return Err(vec![ConfigError {
                source,
                line: None,
                key: None,
                message: format!("expected an object of settings, got {}", other.type_str()),
            }]);
        }
    };
    validate_table(&source, &table)?;
    finish_layer(source, table, None)
}

fn validate_table(source: &Source, table: &toml::Table) -> Result<(), Vec<ConfigError>> {
    let value = toml::Value::Table(table.clone());
    serde_path_to_error::deserialize::<_, Config>(value)
        .map(|_| ())
        .map_err(|e| {
            vec![ConfigError {
                source: source.clone(),
                line: None,
                key: Some(e.path().to_string()).filter(|k| k != "."),
                message: e.into_inner().message().to_string(),
            }]
        })
}

/// JSON null means "not set", so it is dropped rather than turned into a value.
fn json_to_toml(value: &serde_json::Value) -> Option<toml::Value> {
    use serde_json::Value as J;
    Some(match value {
        J::Null => return None,
        J::Bool(b) => toml::Value::Boolean(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64()?),
        },
        J::String(s) => toml::Value::String(s.clone()),
        J::Array(items) => toml::Value::Array(items.iter().filter_map(json_to_toml).collect()),
        J::Object(map) => toml::Value::Table(
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), json_to_toml(v)?)))
                .collect(),
        ),
    })
}

fn merge(layers: &[Layer]) -> (Config, BTreeMap<String, Source>) {
    let mut merged = toml::Table::new();
    let mut origins = BTreeMap::new();
    for layer in layers {
        flatten("", &layer.table, &mut |key, _| {
            origins.insert(key.to_string(), layer.source.clone());
        });
        deep_merge(&mut merged, &layer.table);
    }
    // Each layer was validated alone and keys only ever replace keys, so the union is valid too;
    // should that ever fail, the defaults are the safe answer.
    let config = Config::deserialize(toml::Value::Table(merged)).unwrap_or_default();
    (config, origins)
}

fn deep_merge(into: &mut toml::Table, from: &toml::Table) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => deep_merge(a, b),
            _ => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

fn flatten(prefix: &str, table: &toml::Table, f: &mut dyn FnMut(&str, &toml::Value)) {
    for (key, value) in table {
        let path = join_key(prefix, key);
        match value {
            toml::Value::Table(inner) => flatten(&path, inner, f),
            _ => f(&path, value),
        }
    }
}

fn join_key(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn insert_path(table: &mut toml::Table, path: &[String], value: toml::Value) {
    match path {
        [] => {}
        [last] => {
            table.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = table
                .entry(first.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(inner) = entry {
                insert_path(inner, rest, value);
            }
        }
    }
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The deepest dotted key a configuration file may use. Ours nest four deep at most; the
/// limit is far above that and below the depth where the TOML parser gives up without saying
/// where (about 85).
const MAX_KEY_DEPTH: usize = 32;

/// The first line whose table header or dotted key nests deeper than [`MAX_KEY_DEPTH`], with
/// its depth. Dots inside quoted keys do not count.
fn too_deep_key(text: &str) -> Option<(usize, usize)> {
    text.lines().enumerate().find_map(|(i, line)| {
        let line = line.trim_start();
        let key = if line.starts_with('[') {
            line.trim_start_matches('[')
        } else {
            line
        };
        let (mut depth, mut quote) = (1, None);
        for c in key.chars() {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '.') => depth += 1,
                (None, '=' | ']' | '#') => break,
                _ => {}
            }
        }
        (depth > MAX_KEY_DEPTH).then_some((i + 1, depth))
    })
}

/// The dotted key assigned on a 1-based line, with the table header above it.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let this = lines.get(line.checked_sub(1)?)?.trim();
    let header = |l: &str| {
        let l = l.trim();
        (l.starts_with('[') && !l.starts_with("[["))
            .then(|| l.trim_matches(|c| c == '[' || c == ']').trim().to_string())
    };
    if let Some(h) = header(this) {
        return Some(h);
    }
    let key = this.split_once('=')?.0.trim().trim_matches('"').to_string();
    let section = lines[..line - 1].iter().rev().find_map(|l| header(l));
    Some(match section {
        Some(s) => format!("{s}.{key}"),
        None => key,
    })
}

/// The 1-based line where a dotted key is assigned, found by scanning for its last segment.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    (1..=text.lines().count()).find(|&l| key_on_line(text, l).as_deref() == Some(key))
}

/// The built-in role prompts with `NAME.md` of each folder in `dirs` over them, later folders
/// winning. Returns the files used, for the journal, and the problems: an unreadable or empty
/// file is reported and the prompt before it kept.
pub fn load_prompts(dirs: &[PathBuf]) -> (Prompts, Vec<String>, Vec<String>) {
    let mut prompts = Prompts::default();
    let (mut used, mut problems) = (Vec::new(), Vec::new());
    for dir in dirs {
        for (name, _) in prompts::BUILT_IN {
            let path = dir.join(format!("{name}.md"));
            match std::fs::read_to_string(&path) {
                Ok(text) if !text.trim().is_empty() => {
                    prompts.set(name, &text);
                    used.push(path.display().to_string());
                }
                Ok(_) => problems.push(format!(
                    "{} is empty; the prompt before it is kept",
                    path.display()
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => problems.push(format!("{} cannot be read: {e}", path.display())),
            }
        }
    }
    (prompts, used, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws_error(text: &str) -> ConfigError {
        parse_toml_layer(Source::WorkspaceFile(".agent-ls.toml".into()), text)
            .unwrap_err()
            .remove(0)
    }

    #[test]
    fn the_documented_default_file_is_the_built_in_default() {
        let parsed: Config = toml::from_str(DEFAULT_FILE).expect("config/agent-ls.toml parses");
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn every_key_is_documented_in_the_default_file() {
        let loaded = load(&Inputs::default());
        for (key, _, _) in loaded.entries() {
            let leaf = key.rsplit('.').next().unwrap();
            assert!(
                DEFAULT_FILE
                    .lines()
                    .any(|l| l.trim_start_matches('#').trim_start().starts_with(leaf)),
                "{key} is not in config/agent-ls.toml"
            );
        }
    }

    #[test]
    fn an_unknown_default_agent_is_an_error_and_build_runs() {
        let loaded = load(&Inputs {
            env: vec![("AGENT_LS_AGENT__DEFAULT_AGENT".into(), "planner".into())],
            ..Inputs::default()
        });
        let err = loaded
            .errors
            .iter()
            .find(|e| e.key.as_deref() == Some("agent.default_agent"))
            .expect("an error");
        assert!(err.message.contains("no agent `planner`"), "{err}");
        assert_eq!(loaded.config.agent.default_agent, "build");
        let ok = load(&Inputs {
            env: vec![("AGENT_LS_AGENT__DEFAULT_AGENT".into(), "review".into())],
            ..Inputs::default()
        });
        assert!(ok.errors.is_empty(), "{:?}", ok.errors);
        assert_eq!(ok.config.agent.default_agent, "review");
    }

    #[test]
    fn a_wrong_type_names_file_line_and_key() {
        let err = ws_error("[log]\nlevel = \"loud\"\n");
        assert_eq!(err.line, Some(2));
        assert_eq!(err.key.as_deref(), Some("log.level"));
        assert!(err.message.contains("loud"), "{err}");
    }

    #[test]
    fn an_unknown_key_is_an_error() {
        let err = ws_error("[log]\nlevel = \"info\"\nlevle = 3\n");
        assert_eq!(err.line, Some(3));
        assert!(err.message.contains("levle"), "{err}");
    }

    #[test]
    fn a_file_that_is_not_utf8_or_too_large_is_an_error_with_its_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(".agent-ls.toml");
        let source = Source::WorkspaceFile(path.clone());
        std::fs::write(&path, b"[log]\nlevel = \"info\"\n# caf\xe9\n").expect("write");
        let err = read_file_layer(source.clone(), &path).expect_err("not UTF-8");
        assert_eq!(err[0].line, Some(3), "{}", err[0]);
        assert!(err[0].to_string().contains("not UTF-8"), "{}", err[0]);
        let big = format!("# {}\n", "x".repeat(MAX_FILE_BYTES as usize));
        std::fs::write(&path, big).expect("write");
        let err = read_file_layer(source, &path).expect_err("too large");
        assert!(
            err[0].to_string().contains("over 1048576 bytes"),
            "{}",
            err[0]
        );
    }

    #[test]
    fn a_key_nested_too_deep_is_an_error_with_its_line() {
        let deep = vec!["a"; 100].join(".");
        let err = ws_error(&format!("[log]\nlevel = \"info\"\n[{deep}]\nx = 1\n"));
        assert_eq!(err.line, Some(3), "{err}");
        assert!(err.message.contains("100 tables deep"), "{err}");
        let err = ws_error(&format!("[log]\n{deep} = 1\n"));
        assert_eq!(err.line, Some(2), "{err}");
        // Dots inside a quoted key are part of a name, not nesting.
        let quoted = format!("\"{}\"", vec!["a"; 100].join("."));
        let err = ws_error(&format!("[log]\n{quoted} = 1\n"));
        assert!(!err.message.contains("deep"), "{err}");
    }

    #[test]
    fn a_syntax_error_names_the_line() {
        let err = ws_error("[log]\nlevel = \n");
        assert_eq!(err.line, Some(2));
    }

    #[test]
    fn secrets_are_refused_from_workspace_files_and_client_settings() {
        let err = ws_error("[model]\napi_key = \"sk-123\"\n");
        assert_eq!(err.key.as_deref(), Some("model.api_key"));
        assert_eq!(err.line, Some(2));
        assert!(!err.to_string().contains("sk-123"));
        let json = serde_json::json!({"model": {"api_key": "sk-123"}});
        assert!(json_layer(Source::ClientSettings, &json).is_err());
        assert!(
            parse_toml_layer(Source::UserFile("u".into()), "[model]\napi_key = \"sk\"\n").is_ok()
        );
    }

    #[test]
    fn env_values_are_typed_and_strings_fall_back() {
        let layer = env_layer("AGENT_LS_LOG__LEVEL", "debug").unwrap().unwrap();
        assert_eq!(layer.table["log"]["level"].as_str(), Some("debug"));
        assert!(env_layer("AGENT_LS_LOG__LEVEL", "loud").is_err());
        assert!(env_layer("AGENT_LS_TEST_HOOKS", "1").unwrap().is_none());
        assert!(env_layer("PATH", "/bin").unwrap().is_none());
    }

    #[test]
    fn later_layers_win_and_origins_say_which() {
        let inputs = Inputs {
            env: vec![("AGENT_LS_LOG__LEVEL".into(), "warn".into())],
            client_settings: Some(serde_json::json!({"agent-ls": {"log": {"level": "trace"}}})),
            ..Inputs::default()
        };
        let loaded = load(&inputs);
        assert_eq!(loaded.config.log.level, LogLevel::Trace);
        assert_eq!(loaded.origin("log.level"), Source::ClientSettings);
        assert_eq!(loaded.origin("model.name"), Source::Default);
    }

    #[test]
    fn secrets_never_print() {
        let mut c = Config::default();
        c.model.api_key = Some(Secret::new("sk-live-abc"));
        assert!(!format!("{c:?}").contains("sk-live-abc"));
        assert!(!toml::to_string(&c).unwrap().contains("sk-live-abc"));
    }
}
