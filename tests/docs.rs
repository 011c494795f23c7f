//! Tidy checks: every LSP method and command we define is documented, and the documented
//! default configuration file stays the one the binary embeds.

use std::fs;
use std::path::PathBuf;

/// A file of this checkout, wherever it sits.
fn repo(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The string constants declared in `src/lsp/ext.rs`: our method and command names.
fn extension_names() -> Vec<String> {
    let source = fs::read_to_string(repo("src/lsp/ext.rs")).expect("read ext.rs");
    source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter(|l| l.contains(": &str = \""))
        .filter_map(|l| l.split('"').nth(1).map(str::to_string))
        .collect()
}

#[test]
fn every_extension_is_documented() {
    let docs =
        fs::read_to_string(repo("docs/lsp-extensions.md")).expect("read docs/lsp-extensions.md");
    let names = extension_names();
    assert!(names.len() >= 3, "found {names:?}");
    for name in names {
        assert!(
            docs.contains(&format!("`{name}`")),
            "{name} is not documented in docs/lsp-extensions.md"
        );
    }
}

#[test]
fn the_configuration_doc_names_every_section() {
    let docs =
        fs::read_to_string(repo("docs/configuration.md")).expect("read docs/configuration.md");
    let defaults = fs::read_to_string(repo("crates/runtime/defaults/agent-ls.toml"))
        .expect("read crates/runtime/defaults/agent-ls.toml");
    for section in defaults.lines().filter(|l| l.starts_with('[')) {
        assert!(
            docs.contains(section),
            "{section} is not described in docs/configuration.md"
        );
    }
}

#[test]
fn every_command_is_declared_in_the_capabilities() {
    // Clients such as Neovim refuse to send a command the server did not declare.
    let source = fs::read_to_string(repo("src/lsp/mod.rs")).expect("read mod.rs");
    let body = source
        .split("fn commands(&self)")
        .nth(1)
        .expect("commands()");
    let body = &body[..body.find("\n    }\n").unwrap_or(body.len())];
    let ext = fs::read_to_string(repo("src/lsp/ext.rs")).unwrap();
    for line in ext.lines().filter(|l| l.contains("_COMMAND: &str")) {
        let name = line
            .trim()
            .strip_prefix("pub const ")
            .unwrap()
            .split(':')
            .next()
            .unwrap();
        if name == "DEBUG_PANIC_COMMAND" {
            continue;
        }
        assert!(
            body.contains(&format!("ext::{name}")),
            "{name} is not in the executeCommandProvider list"
        );
    }
}
