//! Protected paths: files whose contents decide what runs on the user's machine outside the
//! sandbox (git's hooks and config, our own configuration and state, editor settings that run
//! tasks, direnv, CI workflows). A change to one needs the user's explicit confirmation of
//! that file by name, whatever the approval mode. Pure: a path in, a reason out.
//!
//! A file with the executable bit is not protected for that alone: it is most often a script
//! or a module with a `#!` line, and what it does when the tests run it is bounded by the
//! sandbox like any other code. Its mode never changes (docs/security.md).

use agent_ls_core::edit::FileChange;

/// The protected files a change writes, with why each is protected.
pub fn in_changes(changes: &[FileChange]) -> Vec<(String, &'static str)> {
    changes
        .iter()
        .filter_map(|c| reason(&c.path).map(|why| (c.path.clone(), why)))
        .collect()
}

/// Why `path` (relative to the workspace, `/`-separated) is protected, if it is.
pub fn reason(path: &str) -> Option<&'static str> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let name = parts.last().copied().unwrap_or("");
    if parts.contains(&".git") {
        return Some("git's own files (its hooks and config run commands)");
    }
    if name == ".agent-ls.toml" {
        return Some("agent-ls's configuration (it names commands and servers)");
    }
    match parts.first().copied() {
        Some(".agent-ls") => return Some("agent-ls's own state"),
        Some(".vscode") | Some(".idea") => {
            return Some("editor settings (they can run tasks and programs)");
        }
        _ => {}
    }
    if name == ".envrc" {
        return Some("direnv runs it when you enter the folder");
    }
    if parts.len() > 2 && parts[0] == ".github" && parts[1] == "workflows" {
        return Some("a CI workflow (it runs on push)");
    }
    None
}

/// Why `path` (relative to the workspace, `/`-separated) holds secrets, if its name says so:
/// environment files, private keys and certificates' keys, credential files. Their text is
/// never sent to a model for completion (docs/completion.md).
pub fn secret(path: &str) -> Option<&'static str> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let name = parts.last().copied().unwrap_or("").to_ascii_lowercase();
    if name == ".env" || name.starts_with(".env.") || name.ends_with(".env") {
        return Some("an environment file (it holds keys and passwords)");
    }
    if parts.iter().any(|p| *p == ".ssh" || *p == ".gnupg")
        || name.starts_with("id_rsa")
        || name.starts_with("id_ed25519")
        || name.starts_with("id_ecdsa")
    {
        return Some("an SSH or GnuPG key");
    }
    let key_ext = [
        ".pem",
        ".key",
        ".p12",
        ".pfx",
        ".jks",
        ".keystore",
        ".asc",
        ".gpg",
    ];
    if key_ext.iter().any(|e| name.ends_with(e)) {
        return Some("a private key or certificate store");
    }
    let credential_files = [
        ".netrc",
        ".npmrc",
        ".pypirc",
        ".git-credentials",
        ".htpasswd",
    ];
    if credential_files.contains(&name.as_str())
        || name.starts_with("credentials")
        || name.starts_with("secrets.")
    {
        return Some("a credentials file");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{reason, secret};

    #[test]
    fn files_of_keys_and_passwords_are_secret_and_code_is_not() {
        for p in [
            ".env",
            "app/.env.local",
            "prod.env",
            "certs/server.key",
            "a/tls.pem",
            ".ssh/config",
            "id_rsa",
            ".npmrc",
            "credentials.json",
        ] {
            assert!(secret(p).is_some(), "{p}");
        }
        for p in ["src/env.rs", "src/keys.py", "README.md", "environment.ts"] {
            assert!(secret(p).is_none(), "{p}");
        }
    }

    #[test]
    fn what_runs_is_protected_and_ordinary_code_is_not() {
        for p in [
            ".git/config",
            ".git/hooks/pre-commit",
            "vendor/lib/.git/config",
            ".agent-ls.toml",
            "sub/.agent-ls.toml",
            ".agent-ls/store.sqlite",
            ".vscode/settings.json",
            ".idea/workspace.xml",
            ".envrc",
            ".github/workflows/ci.yml",
        ] {
            assert!(reason(p).is_some(), "{p}");
        }
        for p in [
            "src/main.rs",
            ".github/CODEOWNERS",
            "gitignore",
            "docs/.vscode.md",
            "scripts/deploy.sh",
            "bin/tool.py",
        ] {
            assert!(reason(p).is_none(), "{p}");
        }
    }
}
