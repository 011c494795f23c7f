//! The configuration's schema: the `Config` type, one type per section, and their defaults,
//! which must equal what the shipped default file says.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::redact::DatabaseUrl;
/// The `[lsp_servers]` section lives beside the client that uses it.
pub use crate::lsp_client::settings::LspServersConfig;
/// The `[sandbox]` section is the sandbox's own type: it lives beside the code that applies it.
pub use crate::trust::sandbox::{SandboxConfig, SandboxMode};
use agent_ls_core::agent::Evaluation;
use serde::{Deserialize, Serialize, Serializer};

/// The documented default file; the built-in defaults must equal what it says (a test pins it).
pub const DEFAULT_FILE: &str = include_str!("../../defaults/agent-ls.toml");

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
    /// Inline completion from a fill-in-the-middle model (docs/completion.md).
    pub completion: CompletionConfig,
    /// Allow, ask and deny rules for edits, reads, commands and tools (docs/permissions.md).
    pub permissions: agent_ls_core::permissions::PermissionsConfig,
    /// Commands run at points of a run (docs/hooks.md).
    pub hooks: Vec<agent_ls_core::permissions::HookConfig>,
    /// The workspace file's `[permissions]` and `[[hooks]]`, kept apart from the user's: it
    /// may only narrow, and its hooks run once trusted by hash. Filled in when the layers are
    /// merged.
    #[serde(skip)]
    pub workspace_rules: agent_ls_core::permissions::WorkspaceRules,
    /// The project's language servers, which check each applied edit (docs/project-lsp.md).
    pub lsp_servers: LspServersConfig,
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
    /// Read only: no change is applied and no command runs (docs/permissions.md).
    Plan,
    /// Edits are applied without asking; only the user's own settings may choose it.
    #[serde(rename = "accept-edits")]
    AcceptEdits,
}

impl Approval {
    /// How a front end treats an edit under this mode: `accept-edits` applies like `auto`;
    /// `plan` never gets that far (the driver refuses the change first).
    pub fn for_edits(self) -> Approval {
        match self {
            Approval::AcceptEdits => Approval::Auto,
            Approval::Plan => Approval::Confirm,
            other => other,
        }
    }
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
    /// Undo an applied change that made things worse (a passing test now fails, or a syntax
    /// or import error) before the coder tries again (docs/repairs.md).
    pub undo_worse: bool,
    /// The most a run may spend on model calls, in US dollars, as `[prices]` counts it: the
    /// run makes no model call past it, stops, and keeps its work. Unset: no cap.
    pub max_cost_usd: Option<f64>,
    /// When tests fail and their output names no file of the project's own, run them once
    /// more under a line tracer and show the coder where the failing ones point
    /// (docs/locate.md).
    pub locate: bool,
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
            undo_worse: true,
            max_cost_usd: None,
            locate: true,
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
    /// The most bytes of instruction files (AGENTS.md and the like) in the system prompt; the
    /// farthest are cut first (docs/instructions.md). 0: none are read.
    pub instructions_bytes: usize,
    /// The names read in a folder without `AGENTS.override.md` or `AGENTS.md`, first found
    /// wins.
    pub instruction_files: Vec<String>,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            map_tokens: 1024,
            summarize_after: 5,
            first_prompt_bytes: 16_384,
            instructions_bytes: 32_768,
            instruction_files: vec!["CLAUDE.md".into(), ".github/copilot-instructions.md".into()],
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

/// `[completion]`: inline completion from a fill-in-the-middle model (docs/completion.md).
/// Off until `base_url` names a server. The server, the wire format and the key's variable
/// send the user's code somewhere, so a workspace file sets them only in a trusted folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompletionConfig {
    /// `false` turns completion off even with a server set.
    pub enabled: bool,
    /// The wire format: `openai` (`/v1/completions` with `suffix`), `llama-cpp` (`/infill`),
    /// `ollama` (`/api/generate` with `suffix`), `mistral` (`/v1/fim/completions`) or
    /// `template` (`/v1/completions` with the prompt in `template`'s FIM tokens).
    pub provider: CompletionProvider,
    /// The server's address, e.g. `http://127.0.0.1:8080` (llama.cpp) or
    /// `http://127.0.0.1:11434` (Ollama); unset: completion is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The model's name, sent with each request (llama.cpp's server ignores it).
    pub model: String,
    /// The environment variable holding the API key, sent as a bearer token; unset: none.
    /// Never sent to a server a workspace file names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The model family's FIM tokens, for `provider = "template"`, and the stop words for
    /// every provider: `qwen`, `star-coder`, `code-llama` or `deep-seek`.
    pub template: agent_ls_core::completion::Family,
    /// The most tokens one suggestion may have.
    pub max_tokens: u32,
    /// The most bytes of context one request sends (text around the cursor, definitions it
    /// names, similar code from other open files).
    pub context_bytes: usize,
    /// How long one request may take before the suggestion is given up.
    pub timeout_ms: u64,
    /// Also predict the next edit elsewhere in the file from the recent edits, with the
    /// coder role's model, offered as a code action and an inline item (one call in flight
    /// per document, each after new edits): off by default, since each is a chat-model call.
    pub next_edit: bool,
}

/// `completion.provider`: the wire format of a FIM server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompletionProvider {
    #[default]
    Openai,
    LlamaCpp,
    Ollama,
    Mistral,
    Template,
}

impl Default for CompletionConfig {
    fn default() -> Self {
        CompletionConfig {
            enabled: true,
            provider: CompletionProvider::Openai,
            base_url: None,
            model: String::new(),
            api_key_env: None,
            template: agent_ls_core::completion::Family::Qwen,
            max_tokens: 128,
            context_bytes: 6000,
            timeout_ms: 5000,
            next_edit: false,
        }
    }
}

impl CompletionConfig {
    /// Whether inline completion is on: enabled, with a server to ask.
    pub fn is_on(&self) -> bool {
        self.enabled
            && self
                .base_url
                .as_deref()
                .is_some_and(|u| !u.trim().is_empty())
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
    /// Run the tests once when the editor opens the session's first document.
    pub on_open: bool,
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
            on_open: false,
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
    /// With the provider's consent, an answer cut off at `max_tokens` is asked for once more
    /// with this larger limit (0: never; docs/repairs.md).
    pub retry_max_tokens: u32,
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
            retry_max_tokens: 0,
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
