//! Which test command runs: the configured one, or one detected from the workspace's files;
//! and whether the allowlist lets it run. Commands are argument vectors, never shell strings.

use std::path::Path;

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
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
        return Some(python_module("pytest", marker));
    }
    // Test files at the root with nothing that asks for pytest: the standard library's
    // unittest, which needs nothing installed.
    let root_tests = std::fs::read_dir(root).ok().is_some_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".py") && (name.starts_with("test_") || name.ends_with("_test.py"))
        })
    });
    if root_tests {
        return Some(python_module("unittest", "test_*.py"));
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

/// `python -m MODULE` (`python3` where there is no `python`), chosen because of `reason`.
fn python_module(module: &str, reason: &str) -> TestCommand {
    let python = if on_path("python") {
        "python"
    } else {
        "python3"
    };
    TestCommand {
        argv: argv(&[python, "-m", module]),
        reason: reason.into(),
    }
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// A test command that may not run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotAllowed {
    #[error("the test command is empty")]
    Empty,
    #[error(
        "the test command `{}` is not on the allowlist (test.allowlist: {}); add it there to run it{}",
        argv.join(" "),
        allowlist.join(", "),
        if *in_workspace {
            " (a program inside the workspace must be listed by its exact path)".to_string()
        } else {
            eval_note(argv)
        }
    )]
    NotListed {
        argv: Vec<String>,
        allowlist: Vec<String>,
        /// The program is inside the workspace, so only its exact path is allowed.
        in_workspace: bool,
    },
}

/// The allowlist holds command prefixes such as "cargo" or "python3 -m pytest"; a command is
/// allowed when it starts with one of them. A bare program name matches the entry's name; a
/// path matches by its file name only when it is outside the workspace (`/usr/bin/python3 -m
/// pytest` matches "python3 -m pytest"), and a program inside the workspace (`./tools/cargo`)
/// only an entry that names that exact path: a cloned repository's own `cargo` is not cargo.
pub fn check_allowed(argv: &[String], allowlist: &[String], root: &Path) -> Result<(), NotAllowed> {
    let Some(program) = argv.first() else {
        return Err(NotAllowed::Empty);
    };
    let path = Path::new(program);
    let bare = !program.contains('/');
    let in_workspace = !bare && (path.is_relative() || path.starts_with(root));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let allowed = allowlist.iter().any(|entry| {
        let words: Vec<&str> = entry.split_whitespace().collect();
        let program_ok = match words.first() {
            Some(w) if *w == program => true,
            Some(w) => !in_workspace && !w.contains('/') && *w == name,
            None => false,
        };
        program_ok
            && words.len() <= argv.len()
            && words[1..].iter().zip(&argv[1..]).all(|(w, a)| w == a)
            // An interpreter's eval flag runs any program: only an entry that spells the
            // flag out (`node -e`) allows it.
            && eval_flag(&name, argv).is_none_or(|at| at < words.len())
    });
    if allowed {
        Ok(())
    } else {
        Err(NotAllowed::NotListed {
            argv: argv.to_vec(),
            allowlist: allowlist.to_vec(),
            in_workspace,
        })
    }
}

/// Where in `argv` an interpreter is told to run code given on its command line (`node -e`,
/// `python -c`, `perl -e`, `ruby -e`, `sh -c`, `make --eval`, `npx -c`), if it is. Short
/// flags count inside a cluster (`sh -ec`, `perl -le`); for all but make, only the options
/// before the script or module are the interpreter's.
pub fn eval_flag(program: &str, argv: &[String]) -> Option<usize> {
    let base = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let (short, long, anywhere): (&str, &[&str], bool) = match base {
        "node" | "nodejs" | "bun" | "deno" => ("ep", &["--eval", "--print"], false),
        "python" | "pypy" => ("c", &[], false),
        "perl" => ("eE", &[], false),
        "ruby" => ("e", &[], false),
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "fish" => ("c", &["--command"], false),
        "make" | "gmake" => ("E", &["--eval"], true),
        "npx" => ("c", &["--call"], false),
        _ => return None,
    };
    for (i, arg) in argv.iter().enumerate().skip(1) {
        if let Some(flag) = arg.strip_prefix("--") {
            let flag = flag.split('=').next().unwrap_or(flag);
            if long.iter().any(|l| l.trim_start_matches('-') == flag) {
                return Some(i);
            }
        } else if let Some(cluster) = arg.strip_prefix('-') {
            if cluster.chars().any(|c| short.contains(c)) {
                return Some(i);
            }
            // `python -m pytest …`: what follows is the module's.
            if base == "python" && cluster.starts_with('m') {
                return None;
            }
        } else if !anywhere {
            return None;
        }
    }
    None
}

/// What the refusal of an interpreter's eval flag adds: the entry that would allow it.
fn eval_note(argv: &[String]) -> String {
    let name = argv
        .first()
        .and_then(|p| Path::new(p).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match eval_flag(&name, argv) {
        Some(at) => format!(
            " (`{}` runs code given on the command line, which no default entry allows; an entry that spells the flag out, \"{}\", allows it on purpose)",
            argv[at],
            argv[..=at].join(" ")
        ),
        None => String::new(),
    }
}

/// Variables every test process gets, when they are set.
const PASSED: &[&str] = &["PATH", "HOME", "LANG", "TERM", "TMPDIR", "USER"];

/// Variables the language toolchains need to find their installations and caches.
const TOOLCHAIN: &[&str] = &[
    "CARGO_HOME",
    "RUSTUP_HOME",
    "GOPATH",
    "GOCACHE",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "NODE_PATH",
];

/// The environment a test process gets: an allowlist, not a filter of names that look
/// secret. PATH, HOME, LANG, LC_*, TERM, TMPDIR and USER; the toolchains' own variables; and
/// those `allowed` names (from the user's settings). Nothing else.
pub fn filtered_env(
    vars: impl Iterator<Item = (String, String)>,
    allowed: &[String],
) -> Vec<(String, String)> {
    vars.filter(|(name, _)| {
        PASSED.contains(&name.as_str())
            || TOOLCHAIN.contains(&name.as_str())
            || name.starts_with("LC_")
            || allowed.contains(name)
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
    fn the_allowlist_matches_prefixes_and_never_a_programs_namesake_in_the_workspace() {
        let list = s(&["cargo", "python3 -m pytest", "make", "./ci/check"]);
        let root = Path::new("/ws");
        let ok = |argv: &[&str]| check_allowed(&s(argv), &list, root).is_ok();
        assert!(ok(&["cargo", "test"]));
        assert!(ok(&["/usr/bin/python3", "-m", "pytest", "-x"]));
        assert!(!ok(&["python3", "-c", "import os"]));
        assert!(!ok(&["rm", "-rf", "/"]));
        assert!(!ok(&["./tools/cargo", "test"]));
        assert!(!ok(&["/ws/tools/cargo", "test"]));
        assert!(!ok(&["tools/make"]));
        assert!(ok(&["./ci/check"]));
        assert!(check_allowed(&[], &list, root).is_err());
    }

    #[test]
    fn interpreter_eval_flags_are_refused_unless_an_entry_spells_them_out() {
        let list = s(&[
            "node", "python3", "perl", "ruby", "sh", "make", "npx", "bash -c",
        ]);
        let root = Path::new("/ws");
        let ok = |argv: &[&str]| check_allowed(&s(argv), &list, root).is_ok();
        for refused in [
            &["node", "-e", "1"][..],
            &["node", "-p", "1"],
            &["node", "--eval=1"],
            &["node", "--input-type=module", "--eval", "1"],
            &["python3", "-c", "1"],
            &["python3", "-Bc", "1"],
            &["perl", "-le", "1"],
            &["ruby", "-e", "1"],
            &["sh", "-c", "true"],
            &["sh", "-ec", "true"],
            &["make", "check", "--eval=x:"],
            &["make", "-E", "x:"],
            &["npx", "-c", "x"],
        ] {
            assert!(!ok(refused), "{refused:?}");
        }
        assert!(ok(&["node", "--test", "test/a.js"]));
        assert!(ok(&["node", "script.js", "-e"]));
        assert!(ok(&["python3", "-m", "pytest", "-c", "pytest.ini"]));
        assert!(ok(&["make", "check"]));
        assert!(ok(&["sh", "run-tests.sh"]));
        // Spelled out on purpose.
        assert!(ok(&["bash", "-c", "true"]));
        let why = check_allowed(&s(&["node", "-e", "1"]), &list, root)
            .unwrap_err()
            .to_string();
        assert!(why.contains("\"node -e\""), "{why}");
    }

    #[test]
    fn the_environment_is_an_allowlist() {
        let vars = [
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("CARGO_HOME", "/c"),
            ("OPENAI_API_KEY", "x"),
            ("MY_SERVICE_CREDS", "y"),
            ("DB_PASS", "z"),
            ("EDITOR", "vi"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()));
        let kept: Vec<String> = filtered_env(vars.clone().into_iter(), &[])
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(kept, ["PATH", "LC_ALL", "CARGO_HOME"]);
        let kept = filtered_env(vars.into_iter(), &s(&["MY_SERVICE_CREDS"]));
        assert_eq!(kept.len(), 4);
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
