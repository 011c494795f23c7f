//! The `[lsp_servers]` section: which language server checks which files after an edit, how
//! long an edit waits for its diagnostics, and the built-in servers used when none is
//! configured for a language and their program is on PATH. Which server runs is a trusted
//! key (`lsp_servers.servers`), like `test.command`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LspServersConfig {
    /// false: no project language server is started, and edits are not checked.
    pub enabled: bool,
    /// How long one edit waits for the servers' diagnostics (a server's start included), in
    /// milliseconds. A server that does not answer within it is given up for the run.
    pub wait_ms: u64,
    /// A server per language, by name: its command and the file patterns it serves. A name
    /// of the built-in ones (python, rust, typescript, go) replaces that default; an empty
    /// command turns it off.
    pub servers: BTreeMap<String, LspServerConfig>,
}

impl Default for LspServersConfig {
    fn default() -> Self {
        LspServersConfig {
            enabled: true,
            wait_ms: 5000,
            servers: BTreeMap::new(),
        }
    }
}

/// One language server: the command that starts it (speaking LSP on stdio) and the files it
/// serves, as glob patterns matched against the path relative to the workspace (`*.py`
/// matches in any folder).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct LspServerConfig {
    pub command: Vec<String>,
    pub patterns: Vec<String>,
}

/// A server chosen for a file: its language's name, its command and its patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub language: String,
    pub command: Vec<String>,
}

/// A built-in server: its language, the commands tried in order (the first whose program is
/// on PATH is used) and the patterns.
type BuiltIn = (&'static str, Vec<Vec<&'static str>>, Vec<&'static str>);

/// The built-in servers.
fn built_in() -> Vec<BuiltIn> {
    vec![
        (
            "python",
            vec![
                vec!["basedpyright-langserver", "--stdio"],
                vec!["pyright-langserver", "--stdio"],
            ],
            vec!["*.py", "*.pyi"],
        ),
        ("rust", vec![vec!["rust-analyzer"]], vec!["*.rs"]),
        (
            "typescript",
            vec![vec!["typescript-language-server", "--stdio"]],
            vec![
                "*.ts", "*.tsx", "*.mts", "*.cts", "*.js", "*.jsx", "*.mjs", "*.cjs",
            ],
        ),
        ("go", vec![vec!["gopls"]], vec!["*.go"]),
    ]
}

impl LspServersConfig {
    /// Every server that may run, by language: the configured ones, then the built-in ones
    /// the configuration does not name whose program `on_path` finds.
    pub fn servers(&self, on_path: impl Fn(&str) -> bool) -> Vec<(String, LspServerConfig)> {
        let mut out: Vec<(String, LspServerConfig)> = self
            .servers
            .iter()
            .filter(|(_, s)| !s.command.is_empty())
            .map(|(name, s)| (name.clone(), s.clone()))
            .collect();
        for (language, commands, patterns) in built_in() {
            if self.servers.contains_key(language) {
                continue;
            }
            if let Some(command) = commands.into_iter().find(|c| on_path(c[0])) {
                out.push((
                    language.to_string(),
                    LspServerConfig {
                        command: command.iter().map(|s| s.to_string()).collect(),
                        patterns: patterns.iter().map(|s| s.to_string()).collect(),
                    },
                ));
            }
        }
        out
    }

    /// The server for `path` (relative to the workspace) among `servers`, if any serves it.
    pub fn choose(servers: &[(String, LspServerConfig)], path: &str) -> Option<Chosen> {
        servers.iter().find_map(|(language, s)| {
            serves(&s.patterns, path).then(|| Chosen {
                language: language.clone(),
                command: s.command.clone(),
            })
        })
    }
}

/// Whether one of `patterns` matches `path`; a pattern without a slash matches the file's
/// name in any folder.
fn serves(patterns: &[String], path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    patterns.iter().any(|p| {
        let Ok(glob) = globset::Glob::new(p) else {
            return false;
        };
        let m = glob.compile_matcher();
        if p.contains('/') {
            m.is_match(path)
        } else {
            m.is_match(name)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_server_replaces_the_built_in_one_and_an_empty_command_turns_it_off() {
        let mut config = LspServersConfig::default();
        let all = config.servers(|_| true);
        let python = LspServersConfig::choose(&all, "pkg/app.py").expect("python");
        assert_eq!(python.command[0], "basedpyright-langserver");
        let only_pyright = config.servers(|p| p == "pyright-langserver");
        assert_eq!(
            LspServersConfig::choose(&only_pyright, "a.py")
                .unwrap()
                .command[0],
            "pyright-langserver"
        );
        assert!(LspServersConfig::choose(&only_pyright, "a.rs").is_none());
        config.servers.insert(
            "python".into(),
            LspServerConfig {
                command: vec!["my-server".into()],
                patterns: vec!["src/*.py".into()],
            },
        );
        let all = config.servers(|_| true);
        assert_eq!(
            LspServersConfig::choose(&all, "src/a.py").unwrap().command,
            vec!["my-server"]
        );
        assert!(LspServersConfig::choose(&all, "b.py").is_none());
        config
            .servers
            .insert("go".into(), LspServerConfig::default());
        assert!(LspServersConfig::choose(&config.servers(|_| true), "main.go").is_none());
    }
}
