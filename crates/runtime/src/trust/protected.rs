//! Protected paths: files whose contents decide what runs on the user's machine (git's hooks
//! and config, our own configuration and state, editor settings that run tasks, direnv, CI
//! workflows) and executable files. A change to one needs the user's explicit confirmation of
//! that file by name, whatever the approval mode. Pure: the caller says whether a file is
//! executable.

/// Why `path` (relative to the workspace, `/`-separated) is protected, if it is.
pub fn reason(path: &str, executable: bool) -> Option<&'static str> {
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
    if executable {
        return Some("an executable file");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::reason;

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
            assert!(reason(p, false).is_some(), "{p}");
        }
        for p in [
            "src/main.rs",
            ".github/CODEOWNERS",
            "gitignore",
            "docs/.vscode.md",
        ] {
            assert!(reason(p, false).is_none(), "{p}");
        }
        assert!(reason("scripts/deploy.sh", true).is_some());
    }
}
