//! Permission rules, pure: parsing `edit(GLOB)`, `read(GLOB)`, `command(WORDS …)`,
//! `mcp(SERVER/TOOL)` and `tool(NAME)`, and deciding an action against the allow, ask and deny
//! lists (deny first, then ask, then allow). No IO, so every case is a unit test.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};

/// Which list a rule is on. The order of the variants is the order they are checked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum List {
    Deny,
    Ask,
    Allow,
}

impl List {
    pub fn as_str(self) -> &'static str {
        match self {
            List::Deny => "deny",
            List::Ask => "ask",
            List::Allow => "allow",
        }
    }
}

/// What a rule matches.
#[derive(Debug, Clone)]
enum Pattern {
    Edit(GlobMatcher),
    Read(GlobMatcher),
    /// Shell words; `prefix` when the rule ends in `*` (more words may follow).
    Command {
        words: Vec<String>,
        prefix: bool,
    },
    /// `*` for either part matches any.
    Mcp {
        server: String,
        tool: String,
    },
    Tool(String),
}

/// One rule, with its text as written (a refusal quotes it).
#[derive(Debug, Clone)]
pub struct Rule {
    text: String,
    pattern: Pattern,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error(
        "`{0}` is not a rule: write edit(GLOB), read(GLOB), command(WORDS), mcp(SERVER/TOOL) or tool(NAME)"
    )]
    Shape(String),
    #[error("`{0}`: {1}")]
    Glob(String, String),
    #[error("`{0}`: a command rule needs at least one word, and `*` only as its last word")]
    Command(String),
    #[error("`{0}`: an mcp rule is mcp(SERVER/TOOL), either part may be `*`")]
    Mcp(String),
}

impl Rule {
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let trimmed = text.trim();
        let shape = || RuleError::Shape(trimmed.to_string());
        let (kind, rest) = trimmed.split_once('(').ok_or_else(shape)?;
        let inner = rest.strip_suffix(')').ok_or_else(shape)?.trim();
        let pattern = match kind.trim() {
            "edit" => Pattern::Edit(glob(trimmed, inner)?),
            "read" => Pattern::Read(glob(trimmed, inner)?),
            "command" => command(trimmed, inner)?,
            "mcp" => {
                let (server, tool) = inner
                    .split_once('/')
                    .filter(|(s, t)| !s.is_empty() && !t.is_empty())
                    .ok_or_else(|| RuleError::Mcp(trimmed.to_string()))?;
                Pattern::Mcp {
                    server: server.to_string(),
                    tool: tool.to_string(),
                }
            }
            "tool" if !inner.is_empty() => Pattern::Tool(inner.to_string()),
            _ => return Err(shape()),
        };
        Ok(Rule {
            text: trimmed.to_string(),
            pattern,
        })
    }

    /// A command allow rule from an entry of the old `test.allowlist` ("python3 -m pytest"):
    /// those were prefixes, so the rule ends in `*`.
    pub fn from_allowlist(entry: &str) -> Result<Rule, RuleError> {
        Rule::parse(&format!("command({} *)", entry.trim()))
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The words of a command rule and whether more may follow (for the runner's allowlist).
    pub fn command_words(&self) -> Option<(&[String], bool)> {
        match &self.pattern {
            Pattern::Command { words, prefix } => Some((words, *prefix)),
            _ => None,
        }
    }

    pub fn matches(&self, action: &Action) -> bool {
        match (&self.pattern, action) {
            (Pattern::Edit(g), Action::Edit(path)) => g.is_match(path),
            (Pattern::Read(g), Action::Read(path)) => g.is_match(path),
            (Pattern::Command { words, prefix }, Action::Command(argv)) => {
                argv.len() >= words.len()
                    && (*prefix || argv.len() == words.len())
                    && words.iter().zip(argv.iter()).all(|(w, a)| w == a)
            }
            (Pattern::Mcp { server, tool }, Action::Mcp { server: s, tool: t }) => {
                (server == "*" || server == s) && (tool == "*" || tool == t)
            }
            (Pattern::Tool(name), Action::Tool(n)) => name == "*" || name == n,
            _ => false,
        }
    }
}

fn glob(rule: &str, pattern: &str) -> Result<GlobMatcher, RuleError> {
    if pattern.is_empty() {
        return Err(RuleError::Shape(rule.to_string()));
    }
    GlobBuilder::new(pattern.trim_start_matches("./"))
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| RuleError::Glob(rule.to_string(), e.kind().to_string()))
}

fn command(rule: &str, inner: &str) -> Result<Pattern, RuleError> {
    let mut words: Vec<String> = inner.split_whitespace().map(String::from).collect();
    let prefix = words.last().is_some_and(|w| w == "*");
    if prefix {
        words.pop();
    }
    if words.is_empty() || words.iter().any(|w| w.contains('*')) {
        return Err(RuleError::Command(rule.to_string()));
    }
    Ok(Pattern::Command { words, prefix })
}

/// What the agent is about to do, as the rules see it. Paths are relative to the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    Edit(&'a str),
    Read(&'a str),
    Command(&'a [String]),
    Mcp { server: &'a str, tool: &'a str },
    Tool(&'a str),
}

/// A rule on its list, with the file it came from: what a refusal names.
#[derive(Debug, Clone)]
pub struct Entry {
    pub rule: Rule,
    pub list: List,
    /// "user file", "workspace file", "test.allowlist"...
    pub from: String,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` in permissions.{} ({})",
            self.rule.text,
            self.list.as_str(),
            self.from
        )
    }
}

/// The rule that decided, or none.
#[derive(Debug, Clone, Copy)]
pub enum Decision<'a> {
    Deny(&'a Entry),
    Ask(&'a Entry),
    Allow(&'a Entry),
    /// No rule matched: the mode decides.
    Unmatched,
}

/// Every rule in effect.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    entries: Vec<Entry>,
}

impl Rules {
    pub fn push(&mut self, rule: Rule, list: List, from: &str) {
        self.entries.push(Entry {
            rule,
            list,
            from: from.to_string(),
        });
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The decision over every facet of one step (a tool call is its `tool(NAME)` and what it
    /// reads or runs): a deny on any facet wins, then an ask, then an allow. Within a list the
    /// first rule written wins, so a refusal names one rule.
    pub fn decide(&self, actions: &[Action]) -> Decision<'_> {
        for list in [List::Deny, List::Ask, List::Allow] {
            let hit = self
                .entries
                .iter()
                .filter(|e| e.list == list)
                .find(|e| actions.iter().any(|a| e.rule.matches(a)));
            match (list, hit) {
                (List::Deny, Some(e)) => return Decision::Deny(e),
                (List::Ask, Some(e)) => return Decision::Ask(e),
                (List::Allow, Some(e)) => return Decision::Allow(e),
                _ => {}
            }
        }
        Decision::Unmatched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(lists: &[(List, &str, &str)]) -> Rules {
        let mut r = Rules::default();
        for (list, text, from) in lists {
            r.push(Rule::parse(text).unwrap(), *list, from);
        }
        r
    }

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn rules_parse_and_bad_ones_say_why() {
        for ok in [
            "edit(src/**)",
            "read(**/*.env)",
            "command(npm run *)",
            "command(git status)",
            "mcp(github/*)",
            "tool(run_command)",
        ] {
            assert!(Rule::parse(ok).is_ok(), "{ok}");
        }
        assert!(matches!(Rule::parse("Bash(ls)"), Err(RuleError::Shape(_))));
        assert!(matches!(
            Rule::parse("edit(src/**"),
            Err(RuleError::Shape(_))
        ));
        assert!(matches!(
            Rule::parse("command(* rm)"),
            Err(RuleError::Command(_))
        ));
        assert!(matches!(
            Rule::parse("command()"),
            Err(RuleError::Command(_))
        ));
        assert!(matches!(Rule::parse("mcp(github)"), Err(RuleError::Mcp(_))));
        assert!(matches!(Rule::parse("edit([)"), Err(RuleError::Glob(..))));
    }

    #[test]
    fn globs_keep_to_their_folders_and_commands_to_their_words() {
        let r = Rule::parse("edit(src/*.py)").unwrap();
        assert!(r.matches(&Action::Edit("src/a.py")));
        assert!(
            !r.matches(&Action::Edit("src/deep/a.py")),
            "* stays in a folder"
        );
        assert!(!r.matches(&Action::Read("src/a.py")), "edit is not read");
        let r = Rule::parse("edit(src/**)").unwrap();
        assert!(r.matches(&Action::Edit("src/deep/a.py")));
        let prefix = Rule::parse("command(npm run *)").unwrap();
        assert!(prefix.matches(&Action::Command(&argv("npm run build"))));
        assert!(prefix.matches(&Action::Command(&argv("npm run"))));
        assert!(!prefix.matches(&Action::Command(&argv("npm install"))));
        assert!(
            !prefix.matches(&Action::Command(&argv("npm running"))),
            "words, not characters"
        );
        let exact = Rule::parse("command(git status)").unwrap();
        assert!(exact.matches(&Action::Command(&argv("git status"))));
        assert!(!exact.matches(&Action::Command(&argv("git status --porcelain"))));
        let mcp = Rule::parse("mcp(github/*)").unwrap();
        assert!(mcp.matches(&Action::Mcp {
            server: "github",
            tool: "create_issue"
        }));
        assert!(!mcp.matches(&Action::Mcp {
            server: "gitlab",
            tool: "create_issue"
        }));
        let allow = Rule::from_allowlist("python3 -m pytest").unwrap();
        assert_eq!(allow.text(), "command(python3 -m pytest *)");
        assert!(allow.matches(&Action::Command(&argv("python3 -m pytest -q"))));
    }

    #[test]
    fn deny_beats_ask_beats_allow_whatever_the_order_written() {
        let r = rules(&[
            (List::Allow, "edit(**)", "user file"),
            (List::Ask, "edit(src/**)", "user file"),
            (List::Deny, "edit(src/secret/**)", "workspace file"),
        ]);
        match r.decide(&[Action::Edit("src/secret/key.py")]) {
            Decision::Deny(e) => assert_eq!(
                e.to_string(),
                "`edit(src/secret/**)` in permissions.deny (workspace file)"
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            r.decide(&[Action::Edit("src/a.py")]),
            Decision::Ask(e) if e.rule.text() == "edit(src/**)"
        ));
        assert!(matches!(
            r.decide(&[Action::Edit("README.md")]),
            Decision::Allow(_)
        ));
        assert!(matches!(
            r.decide(&[Action::Read("README.md")]),
            Decision::Unmatched
        ));
    }

    #[test]
    fn a_deny_on_any_facet_of_a_call_wins() {
        let r = rules(&[
            (List::Allow, "tool(read_file)", "user file"),
            (List::Deny, "read(**/.env)", "user file"),
        ]);
        let call = [Action::Tool("read_file"), Action::Read("app/.env")];
        assert!(matches!(r.decide(&call), Decision::Deny(_)));
        let call = [Action::Tool("read_file"), Action::Read("app/main.py")];
        assert!(matches!(r.decide(&call), Decision::Allow(_)));
    }
}
