//! The runtime of agent-ls: it performs the effects the core's state machine asks for, and is
//! where every kind of IO lives. The front ends (LSP, ACP, MCP, the command line) are thin
//! shells over its `drive::Drive`.
//!
//! - `drive`: the effect loop shared by every surface, the run's recorder, run setup.
//! - `model`: providers (OpenAI-compatible, Anthropic, replay), retries, usage and cost.
//! - `tools`: what the model may call to find its way; `mcp_client`: other servers' tools.
//! - `lsp_client`: the project's own language servers, which check each applied edit.
//! - `tests_run`: choosing a test command and running it as a cancellable process group.
//! - `store` (SQLite), `journal` (JSONL per run), `lock` (one run per workspace), `steps`.
//! - `trust`: trusted folders, protected paths, the sandbox, the static scan of a change.
//! - `permissions`: the rules and the mode as one check; `hooks`: commands run at a run's
//!   check points (`hooks::Gate`, which the driver calls).
//! - `config`: layered configuration; `files`: workspace paths and atomic writes.
//! - `git`: checkpoints of the working tree, a run's diff and its rollback, via `git`.
//! - `child`: the clean signal state every process we start begins with; `clock`: now in
//!   milliseconds, as every record stores it.
//! - `memory`: records of earlier runs' failures and fixes, searched with FTS5 (BM25) and,
//!   with `embeddings` (an OpenAI-compatible client), by vector similarity too.
//! - `completion`: the fill-in-the-middle client of inline completion.
//! - `repomap`, `tokens`, `logging`.

pub mod child;
pub mod clock;
pub mod completion;
pub mod config;
pub mod drive;
pub mod embeddings;
pub mod files;
pub mod git;
pub mod hooks;
pub mod instructions;
pub mod journal;
pub mod locate;
pub mod lock;
pub mod logging;
pub mod lsp_client;
pub mod mcp_client;
pub mod memory;
pub mod model;
pub mod permissions;
pub mod queue;
pub mod repomap;
pub mod runs;
pub mod skills;
pub mod steps;
pub mod store;
pub mod tests_run;
pub mod tokens;
pub mod tools;
pub mod trust;
pub mod walk;
