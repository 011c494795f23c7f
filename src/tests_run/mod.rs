//! Test runs: choosing the command, running it as a cancellable process group with capped
//! output, and turning its output into failures (`parse`, pure) and a report for the model.

pub mod command;
pub mod parse;
pub mod process;
pub mod report;

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::TestConfig;
use crate::trust::sandbox::{self, Sandbox};
pub use command::TestCommand;
pub use parse::{Failure, Format, Location, Parsed};
pub use process::RunEnd;

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
}

/// What a test run came to, as `agent-ls/testStatus` and the journal name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestState {
    Running,
    Passed,
    Failed,
    TimedOut,
    Cancelled,
    /// The run could not happen (no command, refused, would not start).
    Error,
}

impl TestState {
    pub fn as_str(self) -> &'static str {
        match self {
            TestState::Running => "running",
            TestState::Passed => "passed",
            TestState::Failed => "failed",
            TestState::TimedOut => "timed_out",
            TestState::Cancelled => "cancelled",
            TestState::Error => "error",
        }
    }
}

impl RunResult {
    /// Passed means the command exited 0 and no failure was found.
    pub fn passed_all(&self) -> bool {
        self.end == RunEnd::Exited { code: 0 } && self.failures.is_empty()
    }

    pub fn state(&self) -> TestState {
        match self.end {
            _ if self.passed_all() => TestState::Passed,
            RunEnd::TimedOut => TestState::TimedOut,
            RunEnd::Cancelled => TestState::Cancelled,
            _ => TestState::Failed,
        }
    }
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

/// Chooses the command for `root` and checks it against the allowlist, without running it.
pub fn prepare(root: &Path, config: &TestConfig) -> Result<TestCommand, RunError> {
    let command =
        command::choose(root, &config.command, config.nextest).ok_or(RunError::NoCommand)?;
    command::check_allowed(&command.argv, &config.allowlist, root).map_err(RunError::Refused)?;
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
    Ok(RunResult {
        command,
        end: finished.end,
        duration_ms: finished.duration.as_millis() as u64,
        format,
        failures: parsed.failures,
        passed: parsed.passed,
        failed: parsed.failed,
        report,
    })
}

/// The module path declared in `go.mod`, if there is one.
fn go_module(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join("go.mod")).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("module "))
        .map(|m| m.trim().to_string())
}
