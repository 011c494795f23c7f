//! The languages agent-ls reads with tree-sitter (Python, JavaScript, TypeScript, Rust, Go and
//! shell), and parsing a text in one. Pure: text in, tree out; the grammars are compiled in.

use tree_sitter::{Language, Parser, Tree};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lang {
    Python,
    JavaScript,
    TypeScript,
    Tsx,
    Rust,
    Go,
    Shell,
}

impl Lang {
    /// The language of a file, by its extension (or, for scripts without one, its shebang).
    pub fn of(path: &str, text: &str) -> Option<Lang> {
        let ext = path.rsplit_once('.').map(|(_, e)| e);
        Some(match ext {
            Some("py" | "pyi") => Lang::Python,
            Some("js" | "mjs" | "cjs" | "jsx") => Lang::JavaScript,
            Some("ts" | "mts" | "cts") => Lang::TypeScript,
            Some("tsx") => Lang::Tsx,
            Some("rs") => Lang::Rust,
            Some("go") => Lang::Go,
            Some("sh" | "bash") => Lang::Shell,
            _ => {
                let first = text.lines().next().unwrap_or("");
                if !first.starts_with("#!") {
                    return None;
                }
                if first.contains("python") {
                    Lang::Python
                } else if first.contains("node") {
                    Lang::JavaScript
                } else if first.contains("sh") {
                    Lang::Shell
                } else {
                    return None;
                }
            }
        })
    }

    pub fn language(self) -> Language {
        match self {
            Lang::Python => tree_sitter_python::LANGUAGE.into(),
            Lang::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Lang::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Lang::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Lang::Rust => tree_sitter_rust::LANGUAGE.into(),
            Lang::Go => tree_sitter_go::LANGUAGE.into(),
            Lang::Shell => tree_sitter_bash::LANGUAGE.into(),
        }
    }

    /// Parses `text`; `None` only when the grammar cannot be loaded (never for ours) or the
    /// parse is given up.
    pub fn parse(self, text: &str) -> Option<Tree> {
        let mut parser = Parser::new();
        parser.set_language(&self.language()).ok()?;
        parser.parse(text, None)
    }
}
