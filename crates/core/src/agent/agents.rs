//! Named agents: which tools a run's model may call and what it answers with. `build` has
//! every tool and edits; `plan` and `review` read and answer in Markdown; custom agents (from
//! the configuration) bring their own prompt and tool list. Pure data; the runtime reads a
//! custom agent's prompt file and hands its text in (`AgentProfile::custom`).

use serde::{Deserialize, Serialize};

/// Tools that only read (the workspace, or what the server knows).
pub const READ_TOOLS: &[&str] = &[
    "read_file",
    "outline",
    "read_symbol",
    "list_files",
    "find_files",
    "grep",
    "get_diagnostics",
];
/// Tools that run a command under the test policy.
pub const RUN_TOOLS: &[&str] = &["run_tests", "run_command"];
/// Tools whose calls are proposals: they become the turn's change, shown for approval.
pub const EDIT_TOOLS: &[&str] = &["edit_file", "write_file", "apply_patch"];

/// What an agent answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// Changes the code through the loop: edits, approval, tests, retries.
    #[default]
    Build,
    /// Reads, then answers with a plan; edits nothing.
    Plan,
    /// Reads, then answers with a review in Markdown; edits nothing.
    Review,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentProfile {
    pub name: String,
    pub kind: AgentKind,
    /// The tools it may call.
    pub tools: Vec<String>,
    /// Its own system prompt (a custom agent's file), in place of the role's.
    #[serde(default)]
    pub prompt: Option<String>,
}

impl Default for AgentProfile {
    fn default() -> Self {
        AgentProfile::built_in("build").unwrap_or_else(|| AgentProfile {
            name: "build".into(),
            kind: AgentKind::Build,
            tools: Vec::new(),
            prompt: None,
        })
    }
}

pub const BUILT_IN: &[&str] = &["build", "plan", "review"];

impl AgentProfile {
    pub fn built_in(name: &str) -> Option<AgentProfile> {
        let all = || -> Vec<String> {
            READ_TOOLS
                .iter()
                .chain(RUN_TOOLS)
                .chain(EDIT_TOOLS)
                .map(|s| s.to_string())
                .collect()
        };
        let read = || READ_TOOLS.iter().map(|s| s.to_string()).collect();
        let with_mcp = || {
            let mut t: Vec<String> = all();
            t.push("mcp__*".into());
            t
        };
        let (kind, tools) = match name {
            "build" => (AgentKind::Build, with_mcp()),
            "plan" => (AgentKind::Plan, read()),
            "review" => (AgentKind::Review, read()),
            _ => return None,
        };
        Some(AgentProfile {
            name: name.into(),
            kind,
            tools,
            prompt: None,
        })
    }

    /// A custom agent: a build agent with its own prompt and tools (the reading tools when it
    /// names none). Unknown tool names are refused, so a typo does not silently drop a tool.
    pub fn custom(
        name: &str,
        tools: &[String],
        prompt: String,
    ) -> Result<AgentProfile, UnknownTool> {
        let known: Vec<&str> = READ_TOOLS
            .iter()
            .chain(RUN_TOOLS)
            .chain(EDIT_TOOLS)
            .copied()
            .collect();
        if let Some(bad) = tools
            .iter()
            .find(|t| !known.contains(&t.as_str()) && !t.starts_with("mcp__"))
        {
            return Err(UnknownTool {
                agent: name.into(),
                tool: bad.clone(),
                known: known.join(", "),
            });
        }
        Ok(AgentProfile {
            name: name.into(),
            kind: AgentKind::Build,
            tools: if tools.is_empty() {
                READ_TOOLS.iter().map(|s| s.to_string()).collect()
            } else {
                tools.to_vec()
            },
            prompt: Some(prompt),
        })
    }

    /// The tools offered in a phase that only reads (planning, explaining, reviewing).
    pub fn reading_tools(&self) -> Vec<String> {
        self.tools
            .iter()
            .filter(|t| {
                READ_TOOLS.contains(&t.as_str())
                    || (t.starts_with("mcp__") && t.as_str() != "mcp__*")
            })
            .cloned()
            .collect()
    }
}

/// A custom agent names a tool that does not exist (a typo, say); `known` lists the tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("agent `{agent}` names the unknown tool `{tool}`; the tools are {known}")]
pub struct UnknownTool {
    pub agent: String,
    pub tool: String,
    pub known: String,
}

pub fn is_edit_tool(name: &str) -> bool {
    EDIT_TOOLS.contains(&name)
}
