//! Python's coverage (pytest and unittest): the test command run once through `tracer.py`,
//! which agent-ls writes into `.agent-ls/locate/` and which records, per test, the lines of
//! the workspace's own files it executed (with the interpreter's coverage.py when it has one,
//! else by tracing them itself).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agent_ls_core::locate::TestLines;
use tokio_util::sync::CancellationToken;

use super::run::{LocateError, coverage_run, new_file};
use crate::config::Config;

/// The tracer, written into `.agent-ls/locate/` for each run.
const TRACER: &str = include_str!("tracer.py");

/// The interpreter, the runner and its arguments for a Python test command.
pub(super) type Runner = (String, &'static str, Vec<String>);

/// Runs the tests once under the tracer; `dir` is `.agent-ls/locate/`, fresh. Also says
/// what collected the lines: the interpreter's coverage.py, or (naming its lack) the tracer.
pub(super) async fn trace(
    root: &Path,
    config: &Config,
    (python, runner, args): Runner,
    cancel: &CancellationToken,
) -> Result<(Vec<TestLines>, String), LocateError> {
    // Relative to the workspace, where the tests run: the paths stay free of the spaces an
    // allowlist entry would split on, and name nothing outside.
    let (tracer_rel, out_rel) = (
        ".agent-ls/locate/tracer.py",
        ".agent-ls/locate/coverage.json",
    );
    let dir = root.join(".agent-ls").join("locate");
    new_file(&root.join(tracer_rel), TRACER).map_err(|e| LocateError::Write(dir.clone(), e))?;
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
    let (result, _) = coverage_run(root, config, argv, Vec::new(), cancel).await?;
    let record = std::fs::read_to_string(root.join(out_rel))
        .map_err(|e| LocateError::NoRecord(e.to_string(), result.report.clone()))?;
    parse(&record).map_err(|e| LocateError::NoRecord(e.to_string(), result.report.clone()))
}

/// The interpreter, the runner and its arguments for a Python test command (`pytest ARGS`,
/// `python -m pytest ARGS`, `python -m unittest ARGS`); `None` for another runner.
pub(super) fn runner(root: &Path, argv: &[String]) -> Option<Runner> {
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

/// The tracer's record: `{"collector", "tests": [{"test", "failed", "lines": {path:
/// [line...]}}]}`, and what collected, said for the user: coverage.py by its version, else
/// the tracer, naming coverage.py as what the interpreter lacked.
fn parse(record: &str) -> Result<(Vec<TestLines>, String), serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Record {
        #[serde(default)]
        collector: String,
        tests: Vec<Test>,
    }
    #[derive(serde::Deserialize)]
    struct Test {
        test: String,
        failed: bool,
        lines: BTreeMap<String, BTreeSet<u32>>,
    }
    let r: Record = serde_json::from_str(record)?;
    let by = if r.collector.starts_with("coverage.py") {
        r.collector
    } else {
        format!("{}: the interpreter has no coverage.py", r.collector)
    };
    let tests = r
        .tests
        .into_iter()
        .map(|t| TestLines {
            test: t.test,
            failed: t.failed,
            lines: t.lines,
        })
        .collect();
    Ok((tests, by))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn python_test_commands_are_traced_and_others_are_not_ours() {
        let root = Path::new("/nonexistent");
        let (python, runner, args) =
            super::runner(root, &argv(&["python3", "-m", "pytest", "-q"])).unwrap();
        assert_eq!(
            (python.as_str(), runner, args),
            ("python3", "pytest", argv(&["-q"]))
        );
        let (_, runner, args) =
            super::runner(root, &argv(&["python", "-m", "unittest", "discover"])).unwrap();
        assert_eq!((runner, args), ("unittest", argv(&["discover"])));
        assert!(super::runner(root, &argv(&["cargo", "test"])).is_none());
        assert!(super::runner(root, &argv(&["python3", "-m", "nose"])).is_none());
    }

    #[test]
    fn the_record_parses() {
        let (runs, by) = parse(
            r#"{"collector": "coverage.py 7.6.10", "tests": [{"test": "t::a", "failed": true, "lines": {"calc.py": [3, 1]}}]}"#,
        )
        .unwrap();
        assert_eq!(
            runs[0].lines["calc.py"].iter().copied().collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(by, "coverage.py 7.6.10");
        let (_, by) =
            parse(r#"{"collector": "agent-ls's tracer (sys.settrace)", "tests": []}"#).unwrap();
        assert_eq!(
            by,
            "agent-ls's tracer (sys.settrace): the interpreter has no coverage.py"
        );
        assert!(parse("{}").is_err());
    }
}
