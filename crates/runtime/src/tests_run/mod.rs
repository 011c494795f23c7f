//! Test runs: choosing the command, running it as a cancellable process group with capped
//! output, and turning its output into failures and a report for the model (the core's `test_output`).

pub mod command;
pub mod process;
mod summary;

use agent_ls_core::test_output::{parse, report};

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::TestConfig;
use crate::trust::sandbox::{self, Sandbox};
pub use agent_ls_core::test_output::TestState;
pub use command::TestCommand;
pub use parse::{Failure, Format, Location, Parsed};
pub use process::RunEnd;
pub use summary::{diagnostics_of, summary};

/// What a finished run found.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub command: TestCommand,
    pub end: RunEnd,
    pub duration_ms: u64,
    pub format: Format,
    /// Failures in the order the tool reported them, first failure first.
    pub failures: Vec<Failure>,
    pub passed: Option<u32>,
    pub failed: Option<u32>,
    /// The output for the model: normalised and cut to its head and tail.
    pub report: String,
    /// Set when the command did not get as far as running the tests (see
    /// `environment_problem`): what went wrong and what to fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
}

impl RunResult {
    /// Passed means the command exited 0 and no failure was found.
    pub fn passed_all(&self) -> bool {
        self.end == RunEnd::Exited { code: 0 } && self.failures.is_empty()
    }

    /// One line for a tool result or a client's tool call: the command, how it ended and
    /// the counts, then the report.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} ({} passed, {} failed){}\n{}",
            self.command.argv.join(" "),
            self.state().as_str(),
            self.passed.unwrap_or(0),
            self.failed.unwrap_or(self.failures.len() as u32),
            self.environment
                .as_ref()
                .map(|e| format!("; it did not run: {e}"))
                .unwrap_or_default(),
            self.report
        )
    }

    pub fn state(&self) -> TestState {
        match self.end {
            _ if self.passed_all() => TestState::Passed,
            RunEnd::TimedOut => TestState::TimedOut,
            RunEnd::Cancelled => TestState::Cancelled,
            _ if self.environment.is_some() => TestState::Error,
            _ => TestState::Failed,
        }
    }

    /// Why this run says nothing about the code, when the command did not get as far as
    /// running the tests: it failed with no test result any parser recognises (a python
    /// without pytest, a broken runner), or every failure is an import of a dependency the
    /// project declares (requirements, pyproject.toml, setup.cfg, Pipfile) but that is not
    /// installed. A missing module the project does not declare may be one the tests want
    /// written, so it stays a failure for the model. The text names the command, what went
    /// wrong and what to fix.
    pub fn environment_problem(&self, root: &Path) -> Option<String> {
        if self.passed_all() || matches!(self.end, RunEnd::TimedOut | RunEnd::Cancelled) {
            return None;
        }
        let command = self.command.argv.join(" ");
        let missing = self
            .failures
            .iter()
            .find_map(|f| missing_module(&f.message))
            .or_else(|| missing_module(&self.report));
        let nothing_recognised =
            self.failures.is_empty() && self.passed.is_none() && self.failed.is_none();
        let only_missing_dependencies = !self.failures.is_empty()
            && self.passed.unwrap_or(0) == 0
            && self
                .failures
                .iter()
                .all(|f| missing_module(&f.message).is_some_and(|m| declared_dependency(root, &m)));
        if !nothing_recognised && !only_missing_dependencies {
            return None;
        }
        Some(match missing {
            Some(module) => format!(
                "`{command}`: No module named {module}; install {module} or set `test.command`"
            ),
            None => {
                let tail: Vec<&str> = self
                    .report
                    .lines()
                    .rev()
                    .filter(|l| !l.trim().is_empty())
                    .take(5)
                    .collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                let how = match self.end {
                    RunEnd::Exited { code } => format!("exited with {code}"),
                    _ => "was killed by a signal".to_string(),
                };
                format!(
                    "`{command}` {how} without a test result agent-ls recognises; fix the command or set `test.command`. Its last lines:\n{}",
                    tail.join("\n")
                )
            }
        })
    }
}

/// Whether the project's dependency files name `module` (by its top-level name, with `-`
/// and `_` taken as equal, as pip does).
fn declared_dependency(root: &Path, module: &str) -> bool {
    let top = module.split('.').next().unwrap_or(module).to_lowercase();
    let norm = |s: &str| s.to_lowercase().replace('-', "_");
    let top = norm(&top);
    [
        "requirements.txt",
        "requirements-dev.txt",
        "pyproject.toml",
        "setup.cfg",
        "Pipfile",
    ]
    .iter()
    .filter_map(|f| std::fs::read_to_string(root.join(f)).ok())
    .any(|text| {
        norm(&text)
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word == top)
    })
}

/// The module of the first "No module named X" in `text` (Python's ModuleNotFoundError).
fn missing_module(text: &str) -> Option<String> {
    let at = text.find("No module named ")?;
    let rest = &text[at + "No module named ".len()..];
    let name: String = rest
        .trim_start_matches(['\'', '"'])
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.' || *c == '-')
        .collect();
    (!name.is_empty()).then_some(name)
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum RunError {
    #[error(
        "no test command: set test.command, or add a Cargo.toml, pyproject.toml, package.json with a test script, or go.mod"
    )]
    NoCommand,
    #[error("{0}")]
    Refused(String),
    #[error("cannot start `{command}`: {reason}")]
    Spawn { command: String, reason: String },
    /// The sandbox could not be set up, so the command did not run.
    #[error("the command did not run: the sandbox could not be set up: {0}")]
    Sandbox(String),
    /// A newer run took this one's place before it ended.
    #[error("the test run was superseded by a newer one")]
    Superseded,
    /// agent-ls itself failed while running it (a panic its job guard caught).
    #[error("{0}")]
    Internal(String),
}

/// Why a test command cannot be narrowed to a filter; the model reads it.
#[derive(Debug, thiserror::Error)]
pub enum NarrowError {
    #[error("{}", RunError::NoCommand)]
    NoCommand,
    #[error("the filter `{0}` may not be an option")]
    OptionFilter(String),
    #[error("`{command}` cannot be narrowed to `{filter}`; call run_tests without a filter")]
    Unknown { command: String, filter: String },
}

/// The test configuration with `argv` run in place of the tests (a routed "run `make lint`"),
/// under the same allowlist, timeout and output cap. Our own test-runner flags belong to the
/// test command, not to this one.
pub fn with_command(config: &TestConfig, argv: Vec<String>) -> TestConfig {
    TestConfig {
        command: argv,
        nextest: false,
        ..config.clone()
    }
}

/// The test command narrowed to the tests `filter` names, as the runner takes it: pytest a
/// path or node id (`tests/test_x.py::test_y`) or else `-k filter`, unittest a dotted name,
/// `cargo test` its name filter, `go test` a `-run` pattern, npm/npx/node test runners `--`
/// then the filter. A runner we cannot narrow is an error the model reads (it may run all).
pub fn narrowed(
    root: &Path,
    config: &TestConfig,
    filter: &str,
) -> Result<Vec<String>, NarrowError> {
    let command =
        command::choose(root, &config.command, config.nextest).ok_or(NarrowError::NoCommand)?;
    let mut argv = command.argv;
    let joined = argv.join(" ");
    let has = |w: &str| argv.iter().any(|a| a == w);
    if filter.starts_with('-') {
        return Err(NarrowError::OptionFilter(filter.into()));
    }
    if has("pytest") || joined.contains("-m pytest") {
        if filter.contains('/') || filter.contains("::") || filter.ends_with(".py") {
            argv.push(filter.to_string());
        } else {
            argv.extend(["-k".to_string(), filter.to_string()]);
        }
    } else if joined.contains("-m unittest") {
        argv.push(filter.to_string());
    } else if argv.first().is_some_and(|p| p == "cargo") {
        // `cargo test [args] -- [libtest args]`: the filter goes before any `--`.
        let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
        argv.insert(at, filter.to_string());
    } else if argv.first().is_some_and(|p| p == "go") {
        argv.extend(["-run".to_string(), filter.to_string()]);
    } else if argv.first().is_some_and(|p| p == "npm" || p == "npx") {
        argv.extend(["--".to_string(), filter.to_string()]);
    } else {
        return Err(NarrowError::Unknown {
            command: joined,
            filter: filter.into(),
        });
    }
    Ok(argv)
}

/// Chooses the command for `root` and checks it against the allowlist, without running it.
pub fn prepare(root: &Path, config: &TestConfig) -> Result<TestCommand, RunError> {
    let command =
        command::choose(root, &config.command, config.nextest).ok_or(RunError::NoCommand)?;
    command::check_allowed(&command.argv, &config.allowlist, root)
        .map_err(|e| RunError::Refused(e.to_string()))?;
    Ok(command)
}

/// Runs the tests of `root`, in `sandbox`, until they end, time out or `cancel` fires.
pub async fn run(
    root: &Path,
    config: &TestConfig,
    sandbox: &Sandbox,
    cancel: &CancellationToken,
) -> Result<RunResult, RunError> {
    let command = prepare(root, config)?;
    let mut env = command::filtered_env(std::env::vars(), &config.env_allow);
    // Python caches compiled files keyed on the source's mtime (in whole seconds) and size,
    // so an edit made within a second of the last run that keeps the size (a - b to a + b)
    // would run the old code. Agent edits come that fast; no cache is written instead.
    env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
    let limits = process::Limits {
        timeout: Duration::from_secs(config.timeout_secs),
        grace: Duration::from_millis(config.grace_ms),
        output_cap: config.output_cap_bytes,
    };
    let argv = sandbox.wrap(root, &command.argv);
    let finished = process::run(&argv, root, &env, &limits, cancel)
        .await
        .map_err(|e| RunError::Spawn {
            command: command.argv.join(" "),
            reason: e.to_string(),
        })?;
    // The sandbox could not be set up: nothing ran, and the helper said why.
    if finished.end
        == (RunEnd::Exited {
            code: sandbox::REFUSED,
        })
    {
        let err = finished.stderr.text();
        if let Some(why) = err.lines().find_map(|l| l.strip_prefix(sandbox::MARK)) {
            return Err(RunError::Sandbox(why.trim().to_string()));
        }
    }
    let output = format!("{}\n{}", finished.stdout.text(), finished.stderr.text());
    let go_module = go_module(root);
    let ctx = parse::Context {
        root,
        go_module: go_module.as_deref(),
    };
    let (format, parsed) = parse::parse(&output, &ctx);
    let mut report = report::model_report(&output, &root.to_string_lossy());
    match finished.end {
        RunEnd::TimedOut => report.push_str(&format!(
            "\n[the run was stopped after {} s]",
            config.timeout_secs
        )),
        RunEnd::Cancelled => report.push_str("\n[the run was cancelled]"),
        _ => {}
    }
    let mut result = RunResult {
        command,
        end: finished.end,
        duration_ms: finished.duration.as_millis() as u64,
        format,
        failures: parsed.failures,
        passed: parsed.passed,
        failed: parsed.failed,
        report,
        environment: None,
    };
    result.environment = result.environment_problem(root);
    Ok(result)
}

/// The module path declared in `go.mod`, if there is one.
fn go_module(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join("go.mod")).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("module "))
        .map(|m| m.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_command_is_narrowed_as_its_runner_takes_a_filter() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = |argv: &[&str]| TestConfig {
            command: argv.iter().map(|s| s.to_string()).collect(),
            ..TestConfig::default()
        };
        let n = |argv: &[&str], filter: &str| narrowed(dir.path(), &cfg(argv), filter);
        assert_eq!(
            n(
                &["python3", "-m", "pytest", "-q"],
                "tests/test_a.py::test_b"
            )
            .unwrap(),
            ["python3", "-m", "pytest", "-q", "tests/test_a.py::test_b"]
        );
        assert_eq!(
            n(&["pytest"], "net and tax").unwrap(),
            ["pytest", "-k", "net and tax"]
        );
        assert_eq!(
            n(&["cargo", "test", "--", "--nocapture"], "parses").unwrap(),
            ["cargo", "test", "parses", "--", "--nocapture"]
        );
        assert_eq!(
            n(&["go", "test", "./..."], "TestNet").unwrap(),
            ["go", "test", "./...", "-run", "TestNet"]
        );
        assert_eq!(
            n(&["python3", "-m", "unittest"], "test_calc.CalcTests").unwrap(),
            ["python3", "-m", "unittest", "test_calc.CalcTests"]
        );
        assert!(n(&["make", "check"], "x").is_err());
        // A filter never smuggles in an option.
        assert!(n(&["pytest"], "--co").is_err());
    }

    fn result(
        code: i32,
        report: &str,
        failures: Vec<Failure>,
        counts: (Option<u32>, Option<u32>),
    ) -> RunResult {
        RunResult {
            command: TestCommand {
                argv: vec!["python3".into(), "-m".into(), "pytest".into()],
                reason: "configured".into(),
            },
            end: RunEnd::Exited { code },
            duration_ms: 1,
            format: Format::Generic,
            failures,
            passed: counts.0,
            failed: counts.1,
            report: report.into(),
            environment: None,
        }
    }

    fn import_failure(module: &str) -> Failure {
        Failure {
            test_id: "test_a.py".into(),
            location: None,
            message: format!("ModuleNotFoundError: No module named '{module}'"),
            frames: vec![],
        }
    }

    #[test]
    fn a_runner_that_is_not_installed_is_an_environment_problem_naming_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let r = result(
            1,
            "/usr/bin/python3: No module named pytest\n",
            vec![],
            (None, None),
        );
        assert_eq!(
            r.environment_problem(dir.path()).as_deref(),
            Some(
                "`python3 -m pytest`: No module named pytest; install pytest or set `test.command`"
            )
        );
        let r = result(
            2,
            "Segmentation fault\nsomething odd\n",
            vec![],
            (None, None),
        );
        let why = r.environment_problem(dir.path()).unwrap();
        assert!(
            why.contains("exited with 2") && why.contains("something odd"),
            "{why}"
        );
    }

    #[test]
    fn a_missing_module_is_the_environments_only_when_the_project_declares_it() {
        let dir = tempfile::tempdir().unwrap();
        let r = result(2, "", vec![import_failure("requests")], (None, Some(1)));
        // Not declared: perhaps a module the tests want written, so the model sees it.
        assert_eq!(r.environment_problem(dir.path()), None);
        std::fs::write(dir.path().join("requirements.txt"), "Requests>=2\n").unwrap();
        assert!(
            r.environment_problem(dir.path())
                .unwrap()
                .contains("install requests")
        );
        // A real failure among them makes it the code's.
        let mut failures = vec![import_failure("requests")];
        failures.push(Failure {
            test_id: "test_b".into(),
            location: None,
            message: "AssertionError".into(),
            frames: vec![],
        });
        let r = result(1, "", failures, (None, Some(2)));
        assert_eq!(r.environment_problem(dir.path()), None);
    }

    #[test]
    fn recognised_failures_passes_and_stops_are_not_environment_problems() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            result(0, "", vec![], (Some(3), Some(0))).environment_problem(dir.path()),
            None
        );
        assert_eq!(
            result(1, "", vec![], (Some(2), Some(1))).environment_problem(dir.path()),
            None
        );
        let mut r = result(1, "", vec![], (None, None));
        r.end = RunEnd::TimedOut;
        assert_eq!(r.environment_problem(dir.path()), None);
    }
}
