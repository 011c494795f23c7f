//! Where the bug probably is, from the tests' own coverage (docs/locate.md): the workspace's
//! tests run once more under coverage, recording per test the lines of the project's files it
//! executed; the core ranks them (`agent_ls_core::locate`). Python (pytest and unittest) is
//! traced by `tracer.py` in one run; node's test runner (V8's coverage) and `go test`
//! (`-coverprofile`) list the tests once, then run the failing ones and a sample of the
//! passing ones one at a time (`probe_each`). Another runner is skipped, saying which tool it
//! lacks. Every run goes through the test policy: the allowlist, the sandbox, the timeout and
//! the output cap.

mod go;
mod node;
mod python;
mod run;
mod rust;

pub use run::{LocateError, MAX_FAILING, MAX_RUNS};

use std::path::Path;
use std::time::Instant;

use agent_ls_core::edit::FileText;
use agent_ls_core::locate::{self, Suspect, TestLines};
use agent_ls_core::repomap::tags;
use agent_ls_core::syntax::Lang;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::tests_run;

/// How many suspects the prompt shows, and the editor's hints: more when they tie with the
/// last (up to three times as many in the prompt).
pub const TOP: usize = 5;
/// How many lines of the suspects' code the prompt shows at most (40 of one function): five
/// long functions whole, or a dozen short ones.
pub const CODE_LINES: usize = 200;

/// What a coverage run found.
#[derive(Debug, Clone)]
pub struct Located {
    pub suspects: Vec<Suspect>,
    pub failed: usize,
    pub passed: usize,
    pub ms: u64,
    /// What collected the lines (`coverage.py 7.6.10`, or agent-ls's tracer and what the
    /// interpreter lacked), said to the user.
    pub by: String,
}

impl Located {
    /// The suspects as the coder's prompt shows them, with their code.
    pub fn render(&self, root: &Path) -> String {
        let text_of = |p: &str| match crate::files::read_for_plan(root, p) {
            FileText::Text(t) => Some(t),
            _ => None,
        };
        locate::render(
            &self.suspects,
            (self.failed, self.passed),
            &text_of,
            (40, CODE_LINES),
        )
    }

    /// One line for the user: what was ranked, from what, in how long.
    pub fn summary(&self) -> String {
        match self.suspects.first() {
            Some(s) => format!(
                "the tests' coverage ({} failing, {} passing) points first at {}:{} {} ({} ms; {})",
                self.failed,
                self.passed,
                s.path,
                s.first,
                if s.name.is_empty() {
                    "(top level)"
                } else {
                    &s.name
                },
                self.ms,
                self.by
            ),
            None => format!(
                "the tests' coverage ({} failing, {} passing) points at no line of the project's own ({} ms; {})",
                self.failed, self.passed, self.ms, self.by
            ),
        }
    }
}

/// Runs the workspace's tests under coverage and ranks what the failing ones ran.
pub async fn locate(
    root: &Path,
    config: &Config,
    cancel: &CancellationToken,
) -> Result<Located, LocateError> {
    let started = Instant::now();
    let command = tests_run::prepare(root, &config.test)?;
    let argv = &command.argv;
    let python = python::runner(root, argv);
    let node = node::runner(root, argv);
    let go = go::runner(argv);
    let cargo = rust::runner(argv).and_then(|c| rust::llvm_tools(c.toolchain()).map(|t| (c, t)));
    if python.is_none() && node.is_none() && go.is_none() && cargo.is_none() {
        return Err(no_tool(argv));
    }
    let dir = root.join(".agent-ls").join("locate");
    own_folder(&root.join(".agent-ls")).map_err(|e| LocateError::Write(dir.clone(), e))?;
    fresh_dir(&dir).map_err(|e| LocateError::Write(dir.clone(), e))?;
    let (runs, by) = if let Some(py) = python {
        python::trace(root, config, py, cancel).await?
    } else if let Some(args) = node {
        needs("node", "JavaScript's coverage", argv)?;
        let runs = node::trace(root, config, &args, cancel).await?;
        (runs, "node's V8 coverage (NODE_V8_COVERAGE)".to_string())
    } else if let Some(args) = go {
        needs("go", "Go's coverage", argv)?;
        let runs = go::trace(root, config, &args, cancel).await?;
        (runs, "go test -coverprofile".to_string())
    } else if let Some((cargo, tools)) = cargo {
        let runs = rust::trace(root, config, &cargo, tools, cancel).await?;
        (runs, "-C instrument-coverage, read by llvm-cov".to_string())
    } else {
        (Vec::new(), String::new())
    };
    Ok(Located {
        by,
        ..rank(root, &runs, started)
    })
}

/// Why `argv`'s runner has no coverage here: Rust's needs the toolchain's llvm-tools,
/// jest and vitest are not read, and other runners are not known.
fn no_tool(argv: &[String]) -> LocateError {
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let base = program.rsplit('/').next().unwrap_or(program);
    let joined = argv.join(" ");
    let lacks = if rust::runner(argv).is_some() {
        "Rust needs llvm-tools (rustup component add llvm-tools-preview)".to_string()
    } else if base == "cargo" || base == "cargo-nextest" {
        "agent-ls reads Rust's coverage from `cargo test` only, not nextest's".to_string()
    } else if joined.contains("jest") || joined.contains("vitest") || base == "npm" {
        "agent-ls reads JavaScript's coverage from node's own test runner (`node --test`, also as \
         the package.json test script) only, not jest's or vitest's"
            .to_string()
    } else {
        "agent-ls reads line coverage from pytest, unittest, `node --test`, `go test` and `cargo \
         test` only"
            .to_string()
    };
    LocateError::NoTool {
        command: joined,
        lacks,
    }
}

/// `program` must be on PATH for `what`.
fn needs(program: &str, what: &str, argv: &[String]) -> Result<(), LocateError> {
    if tests_run::command::on_path(program) {
        return Ok(());
    }
    Err(LocateError::NoTool {
        command: argv.join(" "),
        lacks: format!("{what} needs `{program}` on PATH, and it is not there"),
    })
}

/// `.agent-ls/` is agent-ls's own folder, not a link a repository brought along to have the
/// tracer written (and a folder removed) elsewhere.
fn own_folder(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(std::io::Error::other(
            "it is not a folder of its own (a link?); nothing is written through it",
        )),
        Err(_) => std::fs::create_dir(dir),
    }
}

/// `.agent-ls/locate/` made empty, a folder of its own: a workspace that put a link there
/// (to have the tracer written over a file elsewhere) finds it removed, not followed.
fn fresh_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir)?,
        Ok(_) => std::fs::remove_file(dir)?,
        Err(_) => {}
    }
    std::fs::create_dir_all(dir)
}

/// The core's ranking of `runs`, with each file's definitions read from the workspace.
fn rank(root: &Path, runs: &[TestLines], started: Instant) -> Located {
    let spans = |p: &str| match crate::files::read_for_plan(root, p) {
        FileText::Text(t) => Lang::of(p, &t).and_then(|l| tags::spans(l, &t)),
        _ => None,
    };
    let suspects = locate::suspects(runs, &spans, &is_test_file, TOP);
    let failed = runs.iter().filter(|r| r.failed).count();
    Located {
        suspects,
        failed,
        passed: runs.len() - failed,
        ms: started.elapsed().as_millis() as u64,
        by: String::new(),
    }
}

/// A test file by its name, as the runners find them (`test_x.py`, `x_test.py`, a `tests/`
/// folder, `conftest.py`, `x_test.go`, `x.test.js`): the failing tests' own code is not
/// where the bug is.
pub fn is_test_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("test_")
        || name.ends_with("_test.py")
        || name.ends_with("_test.go")
        || name == "conftest.py"
        // Rust's `#[cfg(test)] mod tests;` keeps its tests in a file of that name.
        || name == "tests.rs"
        || path.split('/').any(|d| d == "tests" || d == "test")
        || name.contains(".test.")
        || name.contains(".spec.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_are_known_by_name() {
        for t in [
            "test_calc.py",
            "calc_test.py",
            "tests/helpers.py",
            "pkg/conftest.py",
            "a.test.js",
            "cart/cart_test.go",
            "src/cart/tests.rs",
        ] {
            assert!(is_test_file(t), "{t}");
        }
        assert!(!is_test_file("shop/pricing.py"));
        assert!(!is_test_file("cart/cart.go"));
    }

    #[test]
    fn a_runner_without_coverage_says_what_it_lacks() {
        let argv = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let said = |w: &[&str]| no_tool(&argv(w)).to_string();
        assert!(said(&["npx", "jest"]).contains("not jest's or vitest's"));
        assert!(said(&["make", "check"]).contains("`cargo test` only"));
        assert!(
            said(&["cargo", "test"])
                .contains("Rust needs llvm-tools (rustup component add llvm-tools-preview)")
        );
        assert!(said(&["cargo", "nextest", "run"]).contains("not nextest's"));
        let missing = needs("no-such-tool-here", "Go's coverage", &argv(&["go", "test"]));
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("Go's coverage needs `no-such-tool-here` on PATH"),
        );
    }
}
