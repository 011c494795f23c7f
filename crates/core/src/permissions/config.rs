//! `[permissions]` as the configuration holds it, and what the workspace file said apart
//! from the user's settings: the schema's own types, which depend only on the pure rules.

use serde::{Deserialize, Serialize};

use super::rules::{Rule, RuleError};

/// One rule as written in a configuration file; it must parse, so a typo is a configuration
/// error with its line rather than a rule that silently matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RuleText(String);

impl TryFrom<String> for RuleText {
    type Error = RuleError;
    fn try_from(text: String) -> Result<Self, RuleError> {
        Rule::parse(&text).map(|_| RuleText(text))
    }
}

impl From<RuleText> for String {
    fn from(r: RuleText) -> String {
        r.0
    }
}

impl RuleText {
    pub fn rule(&self) -> Option<Rule> {
        Rule::parse(&self.0).ok()
    }
}

/// `[permissions]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionsConfig {
    pub allow: Vec<RuleText>,
    pub ask: Vec<RuleText>,
    pub deny: Vec<RuleText>,
}

/// What the workspace file said about rules and hooks, kept apart from the user's settings
/// (a workspace may add deny and ask rules, add allow rules only once the folder is trusted,
/// and its hooks run only once trusted by hash). Filled in when the layers are merged.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkspaceRules {
    pub permissions: PermissionsConfig,
    pub hooks: Vec<super::hooks::HookConfig>,
    pub trusted: bool,
    /// What the workspace file said that was left out, and why (a mode it may not choose).
    pub refused: Vec<String>,
}
