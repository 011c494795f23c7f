//! The front ends of agent-ls, each a thin shell over the runtime's one `Drive`:
//! - `lsp`: the language server (`agent-ls serve`), the only module that knows LSP types;
//! - `acp`: the Agent Client Protocol (`agent-ls acp`);
//! - `mcp`: agent-ls's tools served over MCP (`agent-ls mcp`);
//! - `cli`: the command line's subcommands (`agent-ls run`, `undo`, `runs`, `doctor`, ...).
//!
//! The pure core is `agent_ls_core`; everything that does IO is `agent_ls_runtime`.

pub mod acp;
pub mod cli;
pub mod lsp;
pub mod mcp;
