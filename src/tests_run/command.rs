//! Which test command runs: the configured one, or one detected from the workspace's files;
//! and whether the allowlist lets it run. Commands are argument vectors, never shell strings.

use std::path::Path;

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TestCommand {
    pub argv: Vec<String>,
    /// Why this command: "configured", or the file that made us choose it.
    pub reason: String,
}

/// The command for `root`: `configured` when it is not empty, else one detected from the
/// project's files. `nextest` asks for `cargo nextest run` when cargo-nextest is installed.
pub fn choose(root: &Path, configured: &[String], nextest: bool) -> Option<TestCommand> {
    if !configured.is_empty() {
        return Some(TestCommand {
            argv: configured.to_vec(),
            reason: "configured (test.command)".into(),
        });
    }
    let has = |name: &str| root.join(name).is_file();
    let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    if has("Cargo.toml") {
        let argv = if nextest && on_path("cargo-nextest") {
            argv(&["cargo", "nextest", "run", "--no-fail-fast"])
        } else {
            argv(&["cargo", "test", "--no-fail-fast"])
        };
        return Some(TestCommand {
            argv,
            reason: "Cargo.toml".into(),
        });
    }
    let python_tests = std::fs::read_dir(root.join("tests"))
        .ok()
        .is_some_and(|entries| {
            entries
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "py"))
        });
    if let Some(marker) = ["pyproject.toml", "pytest.ini", "setup.cfg"]
        .into_iter()
        .find(|m| has(m))
        .or(python_tests.then_some("tests/*.py"))
    {
        let python = if on_path("python") {
            "python"
        } else {
            "python3"
        };
        return Some(TestCommand {
            argv: argv(&[python, "-m", "pytest"]),
            reason: marker.into(),
        });
    }
    if has("package.json") && package_has_test_script(&root.join("package.json")) {
        return Some(TestCommand {
            argv: argv(&["npm", "test"]),
            reason: "package.json test script".into(),
        });
    }
    if has("go.mod") {
        return Some(TestCommand {
            argv: argv(&["go", "test", "./..."]),
            reason: "go.mod".into(),
        });
    }
    None
}

fn package_has_test_script(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v["scripts"]["test"].is_string())
}

pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// The allowlist holds command prefixes such as "cargo" or "python3 -m pytest"; a command is
/// allowed when it starts with one of them. The program matches by file name (so
/// `/usr/bin/python3 -m pytest` matches "python3 -m pytest") or by the exact path given.
pub fn check_allowed(argv: &[String], allowlist: &[String]) -> Result<(), String> {
    let Some(program) = argv.first() else {
        return Err("the test command is empty".into());
    };
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let allowed = allowlist.iter().any(|entry| {
        let words: Vec<&str> = entry.split_whitespace().collect();
        !words.is_empty()
            && words.len() <= argv.len()
            && (words[0] == name || words[0] == program)
            && words[1..].iter().zip(&argv[1..]).all(|(w, a)| w == a)
    });
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "the test command `{}` is not on the allowlist (test.allowlist: {}); add it there to run it",
            argv.join(" "),
            allowlist.join(", ")
        ))
    }
}

/// The environment a test process gets: the server's own, without variables whose names
/// contain KEY, SECRET, TOKEN or PASSWORD (unless `allowed` names them).
pub fn filtered_env(
    vars: impl Iterator<Item = (String, String)>,
    allowed: &[String],
) -> Vec<(String, String)> {
    vars.filter(|(name, _)| {
        let upper = name.to_ascii_uppercase();
        allowed.contains(name)
            || !["KEY", "SECRET", "TOKEN", "PASSWORD"]
                .iter()
                .any(|w| upper.contains(w))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_allowlist_matches_prefixes_by_program_name() {
        let list = s(&["cargo", "python3 -m pytest", "make"]);
        assert!(check_allowed(&s(&["cargo", "test"]), &list).is_ok());
        assert!(check_allowed(&s(&["/usr/bin/python3", "-m", "pytest", "-x"]), &list).is_ok());
        assert!(check_allowed(&s(&["python3", "-c", "import os"]), &list).is_err());
        assert!(check_allowed(&s(&["rm", "-rf", "/"]), &list).is_err());
        assert!(check_allowed(&[], &list).is_err());
    }

    #[test]
    fn secrets_are_dropped_from_the_environment_unless_allowed() {
        let vars = [
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "x"),
            ("GITHUB_TOKEN", "y"),
            ("DB_PASSWORD", "z"),
            ("MY_SECRET", "w"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()));
        let kept: Vec<String> = filtered_env(vars.clone().into_iter(), &[])
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(kept, ["PATH"]);
        let kept = filtered_env(vars.into_iter(), &s(&["GITHUB_TOKEN"]));
        assert_eq!(kept.len(), 2);
    }

    #[test]
    fn detection_follows_the_project_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(choose(dir.path(), &[], false), None);
        std::fs::write(dir.path().join("go.mod"), "module x\n").unwrap();
        assert_eq!(
            choose(dir.path(), &[], false).unwrap().argv,
            s(&["go", "test", "./..."])
        );
        std::fs::write(
            dir.path().join("package.json"),
            r#"{"scripts": {"test": "node --test"}}"#,
        )
        .unwrap();
        assert_eq!(
            choose(dir.path(), &[], false).unwrap().argv,
            s(&["npm", "test"])
        );
        std::fs::create_dir(dir.path().join("tests")).unwrap();
        std::fs::write(dir.path().join("tests/test_a.py"), "").unwrap();
        assert_eq!(
            choose(dir.path(), &[], false).unwrap().argv[1..],
            s(&["-m", "pytest"])
        );
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        assert_eq!(
            choose(dir.path(), &[], false).unwrap().argv[..2],
            s(&["cargo", "test"])
        );
        assert_eq!(
            choose(dir.path(), &s(&["make", "check"]), false)
                .unwrap()
                .argv,
            s(&["make", "check"])
        );
    }
}
