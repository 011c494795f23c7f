//! The `[[hooks]]` entry and its events: the configuration's own types, kept apart from the
//! code that runs hooks so the configuration's schema depends on nothing else.

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// Before a tool call runs (the matcher is over the tool's name); exit 2 refuses it.
    BeforeTool,
    /// After a tool call (matcher: the tool's name); exit 2 adds its reason to the result.
    AfterTool,
    /// Before a change is asked about or applied (matcher: each path); exit 2 refuses it.
    BeforeChange,
    /// When the run ends.
    AfterRun,
    /// When the user is about to be asked to approve a change (a notification).
    ApprovalNeeded,
}

impl HookEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::BeforeTool => "before_tool",
            HookEvent::AfterTool => "after_tool",
            HookEvent::BeforeChange => "before_change",
            HookEvent::AfterRun => "after_run",
            HookEvent::ApprovalNeeded => "approval_needed",
        }
    }

    /// Whether exit code 2 stops what the event is about.
    pub fn blocks(self) -> bool {
        matches!(self, HookEvent::BeforeTool | HookEvent::BeforeChange)
    }
}

fn default_timeout() -> u64 {
    10
}

fn yes() -> bool {
    true
}

/// One `[[hooks]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    pub event: HookEvent,
    /// A glob over the tool's name (tool events) or the changed paths (`before_change`);
    /// empty matches everything.
    #[serde(default)]
    pub matcher: String,
    /// The program and its arguments (no shell); run in the workspace.
    pub command: Vec<String>,
    /// The most seconds it may take; then it is stopped and reported, and does not block.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Run in the sandbox. `false` is honoured only from the user's own settings.
    #[serde(default = "yes")]
    pub sandbox: bool,
}

impl HookConfig {
    /// Whether the hook is for `event` and its matcher takes one of `subjects` (or there are
    /// none to match, as after a run).
    pub fn applies(&self, event: HookEvent, subjects: &[&str]) -> bool {
        if self.event != event {
            return false;
        }
        if self.matcher.trim().is_empty() || subjects.is_empty() {
            return true;
        }
        matcher(&self.matcher).is_some_and(|m| subjects.iter().any(|s| m.is_match(s)))
    }
}

fn matcher(glob: &str) -> Option<GlobMatcher> {
    GlobBuilder::new(glob.trim())
        .literal_separator(true)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}
