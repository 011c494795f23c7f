//! Where the bug probably is, from the tests' own coverage (docs/locate.md): the workspace's
//! test command run once more under a line tracer that records, per test, the lines of the
//! project's files it executed; the core ranks them (`agent_ls_core::locate`). Python
//! (pytest and unittest) is traced by `tracer.py`, which agent-ls ships and runs without
//! touching the project; another runner is skipped, saying which tool it lacks. The run goes
//! through the test policy: the allowlist, the sandbox, the timeout and the output cap.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use agent_ls_core::edit::FileText;
use agent_ls_core::locate::{self, Suspect, TestLines};
use agent_ls_core::repomap::tags;
use agent_ls_core::syntax::Lang;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::tests_run::{self, RunError};
use crate::trust::sandbox::Sandbox;

/// The tracer, written into `.agent-ls/locate/` for each run.
const TRACER: &str = include_str!("tracer.py");

/// How many suspects the prompt shows.
pub const TOP: usize = 5;

/// What a coverage run found.
#[derive(Debug, Clone)]
pub struct Located {
    pub suspects: Vec<Suspect>,
    pub failed: usize,
    pub passed: usize,
    pub ms: u64,
}

impl Located {
    /// The suspects as the coder's prompt shows them, with their code.
    pub fn render(&self, root: &Path) -> String {
        let text_of = |p: &str| match crate::files::read_for_plan(root, p) {
            FileText::Text(t) => Some(t),
            _ => None,
        };
        locate::render(&self.suspects, (self.failed, self.passed), &text_of, 40)
    }

    /// One line for the user: what was ranked, from what, in how long.
    pub fn summary(&self) -> String {
        match self.suspects.first() {
            Some(s) => format!(
                "the tests' coverage ({} failing, {} passing) points first at {}:{} {} ({} ms)",
                self.failed,
                self.passed,
                s.path,
                s.first,
                if s.name.is_empty() {
                    "(top level)"
                } else {
                    &s.name
                },
                self.ms
            ),
            None => format!(
                "the tests' coverage ({} failing, {} passing) points at no line of the project's own ({} ms)",
                self.failed, self.passed, self.ms
            ),
        }
    }
}

/// Why no suspects were found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error("no line coverage for `{0}`: agent-ls traces Python's pytest and unittest only")]
    NoTool(String),
    #[error("the coverage run could not start: {0}")]
    Run(#[from] RunError),
    #[error("the coverage run left no record ({0}); its output: {1}")]
    NoRecord(String, String),
    #[error("cannot write the tracer in {}: {}", .0.display(), .1)]
    Write(PathBuf, std::io::Error),
}

/// Runs the workspace's tests once under the line tracer and ranks what the failing ones ran.
pub async fn locate(
    root: &Path,
    config: &Config,
    cancel: &CancellationToken,
) -> Result<Located, LocateError> {
    let started = Instant::now();
    let command = tests_run::prepare(root, &config.test)?;
    let (python, runner, args) = python_runner(root, &command.argv)
        .ok_or_else(|| LocateError::NoTool(command.argv.join(" ")))?;
    // Relative to the workspace, where the tests run: the paths stay free of the spaces an
    // allowlist entry would split on, and name nothing outside.
    let (tracer_rel, out_rel) = (
        ".agent-ls/locate/tracer.py",
        ".agent-ls/locate/coverage.json",
    );
    let dir = root.join(".agent-ls").join("locate");
    let (tracer, out) = (root.join(tracer_rel), root.join(out_rel));
    own_folder(&root.join(".agent-ls")).map_err(|e| LocateError::Write(dir.clone(), e))?;
    fresh_dir(&dir).map_err(|e| LocateError::Write(dir.clone(), e))?;
    new_file(&tracer, TRACER).map_err(|e| LocateError::Write(dir.clone(), e))?;
    let mut argv = vec![
        python,
        tracer_rel.to_string(),
        out_rel.to_string(),
        ".".to_string(),
        runner.to_string(),
    ];
    argv.extend(args);
    // The allowed test command, traced: what runs is that interpreter with our own tracer,
    // and nothing else may.
    let mut test = tests_run::with_command(&config.test, argv.clone());
    test.allowlist = vec![format!("{} {}", argv[0], argv[1])];
    let sandbox = Sandbox::from_config(&config.sandbox);
    let result = tests_run::run(root, &test, &sandbox, cancel).await?;
    let record = std::fs::read_to_string(&out)
        .map_err(|e| LocateError::NoRecord(e.to_string(), result.report.clone()))?;
    let runs =
        parse(&record).map_err(|e| LocateError::NoRecord(e.to_string(), result.report.clone()))?;
    Ok(rank(root, &runs, started))
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

/// Writes a file that must not exist yet (never through a link).
fn new_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(text.as_bytes())
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
    }
}

/// A test file by its name, as the runners find them (`test_x.py`, `x_test.py`, a `tests/`
/// folder, `conftest.py`): the failing tests' own code is not where the bug is.
pub fn is_test_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("test_")
        || name.ends_with("_test.py")
        || name == "conftest.py"
        || path.split('/').any(|d| d == "tests" || d == "test")
        || name.contains(".test.")
        || name.contains(".spec.")
}

/// The interpreter, the runner and its arguments for a Python test command (`pytest ARGS`,
/// `python -m pytest ARGS`, `python -m unittest ARGS`); `None` for another runner.
fn python_runner(root: &Path, argv: &[String]) -> Option<(String, &'static str, Vec<String>)> {
    let first = argv.first()?;
    let base = first.rsplit('/').next().unwrap_or(first);
    if base == "pytest" || base == "py.test" {
        let python = shebang(root, first).unwrap_or_else(|| "python3".to_string());
        return Some((python, "pytest", argv[1..].to_vec()));
    }
    if base.starts_with("python") && argv.get(1).is_some_and(|a| a == "-m") {
        let runner = match argv.get(2)?.as_str() {
            "pytest" => "pytest",
            "unittest" => "unittest",
            _ => return None,
        };
        return Some((first.clone(), runner, argv[3..].to_vec()));
    }
    None
}

/// The interpreter a script's `#!` line names (a virtualenv's pytest runs its own Python).
fn shebang(root: &Path, program: &str) -> Option<String> {
    let path = if program.contains('/') {
        root.join(program)
    } else {
        which(program)?
    };
    let text = std::fs::read(&path).ok()?;
    let line = text.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.strip_prefix("#!")?.trim();
    let python = line.split_whitespace().next()?;
    python.contains("python").then(|| python.to_string())
}

/// `program` on PATH.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// The tracer's record: `{"tests": [{"test", "failed", "lines": {path: [line...]}}]}`.
fn parse(record: &str) -> Result<Vec<TestLines>, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Record {
        tests: Vec<Test>,
    }
    #[derive(serde::Deserialize)]
    struct Test {
        test: String,
        failed: bool,
        lines: BTreeMap<String, BTreeSet<u32>>,
    }
    let r: Record = serde_json::from_str(record)?;
    Ok(r.tests
        .into_iter()
        .map(|t| TestLines {
            test: t.test,
            failed: t.failed,
            lines: t.lines,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn python_test_commands_are_traced_and_others_say_what_they_lack() {
        let root = Path::new("/nonexistent");
        let (python, runner, args) =
            python_runner(root, &argv(&["python3", "-m", "pytest", "-q"])).unwrap();
        assert_eq!(
            (python.as_str(), runner, args),
            ("python3", "pytest", argv(&["-q"]))
        );
        let (_, runner, args) =
            python_runner(root, &argv(&["python", "-m", "unittest", "discover"])).unwrap();
        assert_eq!((runner, args), ("unittest", argv(&["discover"])));
        assert!(python_runner(root, &argv(&["cargo", "test"])).is_none());
        assert!(python_runner(root, &argv(&["python3", "-m", "nose"])).is_none());
    }

    #[test]
    fn the_record_parses_and_test_files_are_known_by_name() {
        let runs =
            parse(r#"{"tests": [{"test": "t::a", "failed": true, "lines": {"calc.py": [3, 1]}}]}"#)
                .unwrap();
        assert_eq!(
            runs[0].lines["calc.py"].iter().copied().collect::<Vec<_>>(),
            [1, 3]
        );
        assert!(parse("{}").is_err());
        for t in [
            "test_calc.py",
            "calc_test.py",
            "tests/helpers.py",
            "pkg/conftest.py",
            "a.test.js",
        ] {
            assert!(is_test_file(t), "{t}");
        }
        assert!(!is_test_file("shop/pricing.py"));
    }
}
