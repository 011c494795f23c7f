//! The Model Context Protocol edges: `server` serves agent-ls's tools to other agents
//! (`agent-ls mcp`); `client` brings other servers' tools to the loop. Like `src/server/` for
//! LSP, only these modules know MCP's types.

pub mod client;
pub mod server;
