//! What a finished test run found (`RunResult`) and how it reads: its state, its one-line
//! summary, and whether the environment rather than the code failed it. Below the rest of
//! `tests_run/`: `summary.rs` and `mod.rs` use it, and it uses neither.

use std::path::Path;

use serde::Serialize;

use super::command::TestCommand;
use super::process::RunEnd;
use agent_ls_core::test_output::TestState;
use agent_ls_core::test_output::parse::{Failure, Format};

/// What a finished run found.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RunResult {
    pub command: TestCommand,
    pub end: RunEnd,
    pub duration_ms: u64,
    pub format: Format,
    /// Failures in the order the tool reported them, first failure first.
    pub failures: Vec<Failure>,
    pub passed: Option<u32>,
    pub failed: Option<u32>,
    /// The output for the model: normalised and cut to its head and tail
    /// (`test_output::report::model_report`).
    pub report: String,
    /// The output for the user: as the tool wrote it, cut to its head and tail.
    #[serde(skip)]
    pub output: String,
    /// Set when the command did not get as far as running the tests (see
    /// `environment_problem`): what went wrong and what to fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// The test that was running when a timeout stopped the run, when its output tells
    /// (`test_output::running`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// A sandbox limit the run reached and yet ended by itself: a test caught the refused
    /// fork or allocation. The result was shaped by the limit, so it is named beside it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reached: Option<crate::trust::limits::Limit>,
}

impl RunResult {
    /// Passed means the command exited 0 and no failure was found.
    pub fn passed_all(&self) -> bool {
        self.end == RunEnd::Exited { code: 0 } && self.failures.is_empty()
    }

    /// One line for a tool result or a client's tool call: the command, how it ended and
    /// the counts, then the output as the user reads it.
    pub fn summary(&self) -> String {
        self.summary_of(&self.output)
    }

    /// `summary` with the report a model reads.
    pub fn model_summary(&self) -> String {
        self.summary_of(&self.report)
    }

    fn summary_of(&self, text: &str) -> String {
        format!(
            "{}: {} ({} passed, {} failed){}\n{}",
            self.command.argv.join(" "),
            self.state().as_str(),
            self.passed.unwrap_or(0),
            self.failed.unwrap_or(self.failures.len() as u32),
            match (&self.environment, self.stopped().or_else(|| self.shaped())) {
                (_, Some(why)) => format!("; {why}"),
                (Some(e), None) => format!("; it did not run: {e}"),
                (None, None) => String::new(),
            },
            text
        )
    }

    /// The command ran and found no test: no failure, no count but zeros, and an exit of 0
    /// or pytest's 5 ("no tests ran").
    pub fn no_tests(&self) -> bool {
        self.failures.is_empty()
            && self.passed == Some(0)
            && self.failed.unwrap_or(0) == 0
            && matches!(self.end, RunEnd::Exited { code: 0 | 5 })
    }

    /// Why the run did not come to a result, when it was stopped: a timeout or a sandbox
    /// limit, named with its setting. Neither is a failing test.
    pub fn stopped(&self) -> Option<String> {
        match self.end {
            RunEnd::TimedOut => Some(format!(
                "the tests timed out: they were stopped after {} s (test.timeout_secs){}",
                self.duration_ms.div_ceil(1000),
                match &self.running {
                    Some(test) => format!(" while `{test}` was running; it hangs or is too slow"),
                    None => "; a test hangs or is too slow".into(),
                }
            )),
            RunEnd::Limit { limit } => Some(format!("the run was stopped: {limit}")),
            _ => None,
        }
    }

    /// What a run that ended by itself should say about a limit it reached on the way.
    pub fn shaped(&self) -> Option<String> {
        self.reached.map(|limit| {
            format!(
                "a limit was reached during the run, and a test went on past it: {limit}; the result may depend on it"
            )
        })
    }

    pub fn state(&self) -> TestState {
        match self.end {
            _ if self.no_tests() => TestState::NoTests,
            _ if self.passed_all() => TestState::Passed,
            RunEnd::TimedOut => TestState::TimedOut,
            RunEnd::Cancelled => TestState::Cancelled,
            RunEnd::Limit { .. } => TestState::Error,
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
        if self.passed_all()
            || matches!(
                self.end,
                RunEnd::TimedOut | RunEnd::Cancelled | RunEnd::Limit { .. }
            )
        {
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
