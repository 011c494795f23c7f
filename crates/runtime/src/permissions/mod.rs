//! Permission rules (`[permissions]`: allow, ask and deny lists) and the approval mode, as
//! one check the driver asks before a tool call runs and before a change is applied. The
//! matching is pure (`agent_ls_core::permissions`); this file gathers the rules from the user's settings, the
//! workspace file (which may only narrow) and the old `test.allowlist`, and words the answers.

use crate::config::{Approval, Config};
pub use agent_ls_core::permissions::*;

/// What the check says about one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    Go,
    /// The user must say yes first; the text names the rule.
    Ask(String),
    /// Refused; the text (for the model and the user) names the rule or the mode.
    Refuse(String),
}

/// The rules and the mode of one run.
#[derive(Debug, Clone)]
pub struct Permissions {
    rules: Rules,
    mode: Approval,
}

const PLAN: &str = "plan mode (agent.approval = \"plan\") is read only";

impl Permissions {
    pub fn from_config(config: &Config) -> Permissions {
        let mut rules = Rules::default();
        let ws = &config.workspace_rules;
        add(&mut rules, &config.permissions, "user settings", true);
        add(&mut rules, &ws.permissions, "workspace file", ws.trusted);
        // The old allowlist is a list of allow rules (prefixes); the entries the rules above
        // put there for the runner are theirs already.
        for entry in &config.test.allowlist {
            let from_rule = rules.entries().iter().any(|e| {
                e.rule
                    .command_words()
                    .is_some_and(|(w, _)| w.join(" ") == entry.trim())
            });
            if let (false, Ok(rule)) = (from_rule, Rule::from_allowlist(entry)) {
                rules.push(rule, List::Allow, "test.allowlist");
            }
        }
        Permissions {
            rules,
            mode: config.agent.approval,
        }
    }

    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Before a change that writes `paths` is asked about or applied.
    pub fn check_change<'p>(
        &self,
        paths: impl IntoIterator<Item = &'p str>,
    ) -> Vec<(String, Check)> {
        paths
            .into_iter()
            .map(|path| {
                let check = if self.mode == Approval::Plan {
                    Check::Refuse(format!(
                        "{PLAN}: it writes no file ({path}); answer with the plan instead"
                    ))
                } else {
                    match self.rules.decide(&[Action::Edit(path)]) {
                        Decision::Deny(e) => {
                            Check::Refuse(format!("writing {path} is denied by {e}"))
                        }
                        Decision::Ask(e) => {
                            Check::Ask(format!("writing {path} needs the user's yes ({e})"))
                        }
                        _ => Check::Go,
                    }
                };
                (path.to_string(), check)
            })
            .collect()
    }

    /// Before a tool call runs: `name` with its arguments.
    pub fn check_call(&self, name: &str, arguments: &serde_json::Value) -> Check {
        let reading = agent_ls_core::agent::agents::READ_TOOLS.contains(&name);
        if self.mode == Approval::Plan && !reading {
            return Check::Refuse(format!("{PLAN}: the tool `{name}` is not run in it"));
        }
        let argv = argv_of(arguments);
        let mut actions = vec![Action::Tool(name)];
        let path = arguments.get("path").and_then(|p| p.as_str());
        if let (true, Some(p)) = (reading, path) {
            actions.push(Action::Read(p.trim_start_matches("./")));
        }
        if name == "run_command" && !argv.is_empty() {
            actions.push(Action::Command(&argv));
        }
        let mcp = name
            .strip_prefix(crate::mcp_client::PREFIX)
            .and_then(|rest| rest.split_once("__"));
        if let Some((server, tool)) = mcp {
            actions.push(Action::Mcp { server, tool });
        }
        match self.rules.decide(&actions) {
            Decision::Deny(e) => Check::Refuse(format!("the call of `{name}` is denied by {e}")),
            Decision::Ask(e) => {
                Check::Ask(format!("the call of `{name}` needs the user's yes ({e})"))
            }
            _ => Check::Go,
        }
    }
}

/// A tool call in a few words for the user's question: a command's words, a path, or the
/// arguments' JSON cut at 200 bytes.
pub fn call_summary(name: &str, arguments: &serde_json::Value) -> String {
    let argv = argv_of(arguments);
    if name == "run_command" && !argv.is_empty() {
        return argv.join(" ");
    }
    if let Some(path) = arguments.get("path").and_then(|p| p.as_str()) {
        return path.to_string();
    }
    let mut text = arguments.to_string();
    if text.len() > 200 {
        let cut = text.floor_char_boundary(200);
        text.truncate(cut);
        text.push('…');
    }
    text
}

fn add(rules: &mut Rules, config: &PermissionsConfig, from: &str, allow: bool) {
    let lists = [
        (List::Deny, &config.deny),
        (List::Ask, &config.ask),
        (List::Allow, &config.allow),
    ];
    for (list, texts) in lists {
        if list == List::Allow && !allow {
            continue;
        }
        for rule in texts.iter().filter_map(RuleText::rule) {
            rules.push(rule, list, from);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(user: &[(&str, &str)], ws: &[(&str, &str)], trusted: bool) -> Config {
        let section = |items: &[(&str, &str)]| {
            let mut p = PermissionsConfig::default();
            for (list, text) in items {
                let r = RuleText::try_from(text.to_string()).unwrap();
                match *list {
                    "allow" => p.allow.push(r),
                    "ask" => p.ask.push(r),
                    _ => p.deny.push(r),
                }
            }
            p
        };
        let mut c = Config {
            permissions: section(user),
            ..Config::default()
        };
        c.workspace_rules.permissions = section(ws);
        c.workspace_rules.trusted = trusted;
        c
    }

    #[test]
    fn a_workspace_adds_denials_but_cannot_undo_the_users() {
        let c = config(
            &[("deny", "edit(secrets/**)")],
            &[("allow", "edit(**)"), ("deny", "edit(vendor/**)")],
            true,
        );
        let p = Permissions::from_config(&c);
        let check = p.check_change(["secrets/k.txt", "vendor/x.py", "src/a.py"]);
        assert!(
            matches!(&check[0].1, Check::Refuse(w) if w.contains("`edit(secrets/**)` in permissions.deny (user settings)")),
            "{check:?}"
        );
        assert!(
            matches!(&check[1].1, Check::Refuse(w) if w.contains("(workspace file)")),
            "{check:?}"
        );
        assert_eq!(check[2].1, Check::Go);
    }

    #[test]
    fn plan_mode_refuses_every_write_and_every_running_tool() {
        let mut c = config(&[("allow", "edit(**)")], &[], false);
        c.agent.approval = Approval::Plan;
        let p = Permissions::from_config(&c);
        assert!(
            matches!(&p.check_change(["a.py"])[0].1, Check::Refuse(w) if w.contains("plan mode"))
        );
        let call = p.check_call(
            "run_command",
            &serde_json::json!({"argv": ["cargo", "test"]}),
        );
        assert!(matches!(call, Check::Refuse(w) if w.contains("plan mode")));
        assert_eq!(
            p.check_call("read_file", &serde_json::json!({"path": "a.py"})),
            Check::Go
        );
    }

    #[test]
    fn the_allowlist_is_allow_rules_and_a_deny_rule_beats_it() {
        let c = config(
            &[
                ("deny", "command(cargo publish *)"),
                ("ask", "mcp(github/*)"),
            ],
            &[],
            false,
        );
        let p = Permissions::from_config(&c);
        let publish = serde_json::json!({"argv": ["cargo", "publish"]});
        assert!(
            matches!(p.check_call("run_command", &publish), Check::Refuse(w) if w.contains("`command(cargo publish *)` in permissions.deny"))
        );
        let test = serde_json::json!({"argv": ["cargo", "test"]});
        assert_eq!(p.check_call("run_command", &test), Check::Go);
        assert!(
            p.rules().entries().iter().any(
                |e| e.to_string() == "`command(cargo *)` in permissions.allow (test.allowlist)"
            )
        );
        assert!(
            matches!(p.check_call("mcp__github__create_issue", &serde_json::json!({})), Check::Ask(w) if w.contains("mcp(github/*)"))
        );
    }
}
