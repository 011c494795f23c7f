//! The MCP values every tool of `agent-ls mcp` builds, here so that mod.rs and git.rs both
//! use them and neither imports the other: a tool's description with its JSON schemas, and a
//! text result.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::Value;

/// A tool named and described, taking arguments of `schema` (an object; anything else is
/// taken as an empty one).
pub(super) fn tool(name: &str, description: &str, schema: Value) -> Tool {
    Tool::new(name.to_string(), description.to_string(), object(schema))
}

/// A JSON schema as MCP holds one: an object.
pub(super) fn object(schema: Value) -> Arc<serde_json::Map<String, Value>> {
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(serde_json::Map::new()),
    }
}

/// A result of plain text, an error or not.
pub(super) fn text_result(text: String, is_error: bool) -> CallToolResult {
    if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }
}
