//! The pure core of agent-ls: values in, values out, no IO. Its manifest names no async
//! runtime, HTTP client, database or process crate, so the compiler refuses them here, and
//! `scripts/check-core` (run by `scripts/test`) fails on any such crate in its dependency tree
//! and on any use of `std::fs`, `std::process`, `std::net`, `std::env` or the clock.
//!
//! - `text`: documents as ropes with versions, and position math across encodings.
//! - `edit`: model output to an `EditPlan`, the locating cascade, apply and invert, history.
//! - `agent`: the run's state machine (`step(&mut Run, Event) -> Vec<Effect>`), goal routing,
//!   named agents, prompt rendering from the prompts handed in, the context window.
//! - `conversation`: `Role`, `Speaker`, `Message`, `ToolCall`, `ToolSpec`.
//! - `events`: what happens in a run (`RunEvent`), and its wire form for the journal and the
//!   live run views.
//! - `test_output`: test-run output to failures (`parse`), and the report a model reads.
//! - `memory`: failure signatures, the episode records a run leaves, the full-text query and
//!   the prompt section of remembered records within a byte budget.
//! - `cache`: the response cache's rules: which calls it may answer and how, the exact key's
//!   material, the near-duplicate scope and the word overlap.
//! - `completion`: inline completion's context, FIM templates, the answer's cut and the cache.
//! - `instructions` and `skills`: AGENTS.md files joined in a budget (the farthest cut
//!   first), and skills' front matter, listing and file patterns.
//! - `permissions`: `[permissions]` rules and their matching (deny, then ask, then allow),
//!   and the `[[hooks]]` entry.
//! - `syntax` and `repomap`: tree-sitter parsing, tags and the ranking behind the repo map.

pub mod agent;
pub mod cache;
pub mod completion;
pub mod conversation;
pub mod edit;
pub mod events;
pub mod instructions;
pub mod locate;
pub mod memory;
pub mod permissions;
pub mod repomap;
pub mod skills;
pub mod syntax;
pub mod test_output;
pub mod text;
