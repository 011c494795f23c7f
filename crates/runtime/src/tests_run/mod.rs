//! Test runs: choosing the command, running it as a cancellable process group with capped
//! output, and turning its output into failures and a report for the model (the core's `test_output`).

pub mod command;
pub mod process;
mod result;
pub mod shared;
mod summary;

use agent_ls_core::test_output::{parse, report, running};

use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::TestConfig;
use crate::trust::sandbox::{self, Sandbox};
pub use agent_ls_core::test_output::TestState;
pub use command::TestCommand;
pub use parse::{Failure, Format, Location, Parsed};
pub use process::RunEnd;
pub use result::RunResult;
pub use summary::{diagnostics_of, summary};

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
    Ok(run_with_env(root, config, sandbox, cancel, &[]).await?.0)
}

/// `run` with `extra` variables set beside the allowlisted environment (agent-ls's own, as
/// the coverage runs' `NODE_V8_COVERAGE`), and the whole output (within the output cap,
/// secrets redacted) beside the result: a caller that reads a machine format (`go test
/// -json`) needs it uncut.
pub async fn run_with_env(
    root: &Path,
    config: &TestConfig,
    sandbox: &Sandbox,
    cancel: &CancellationToken,
    extra: &[(String, String)],
) -> Result<(RunResult, String), RunError> {
    let command = prepare(root, config)?;
    let mut env = command::filtered_env(std::env::vars(), &config.env_allow);
    env.extend_from_slice(extra);
    // Python caches compiled files keyed on the source's mtime (in whole seconds) and size,
    // so an edit made within a second of the last run that keeps the size (a - b to a + b)
    // would run the old code. Agent edits come that fast; no cache is written instead.
    env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
    // Dropped (so removed, with whatever the tests left in it) when the run ends.
    let (sandbox, _private_tmp) = with_private_tmp(sandbox, &mut env);
    let limits = process::Limits {
        timeout: Duration::from_secs(config.timeout_secs),
        grace: Duration::from_millis(config.grace_ms),
        output_cap: config.output_cap_bytes,
    };
    let argv = sandbox.wrap(root, &command.argv);
    let mut finished = process::run(&argv, root, &env, &limits, cancel)
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
    // Every key this process knows is out of the output before anything reads it: the model,
    // the journal, the store, diagnostics.
    let output = redact_secrets(&format!(
        "{}\n{}",
        finished.stdout.text(),
        finished.stderr.text()
    ));
    if let Some(limit) = limit_hit(&finished, &output, &sandbox) {
        finished.end = RunEnd::Limit { limit };
    }
    let reached = reached_anyway(&finished, &sandbox);
    let (format, parsed) = parse_output(root, &output);
    let mut report = report::model_report(&output, &root.to_string_lossy());
    let mut shown = report::user_report(&output);
    // Which test hung, told from what the runner announced before the kill.
    let running = (finished.end == RunEnd::TimedOut)
        .then(|| running::running_test(&output))
        .flatten();
    let stopped = stopped_note(&finished.end, config.timeout_secs, running.as_deref());
    report.push_str(&stopped);
    shown.push_str(&stopped);
    let mut result = RunResult {
        command,
        end: finished.end,
        duration_ms: finished.duration.as_millis() as u64,
        format,
        failures: parsed.failures,
        passed: parsed.passed,
        failed: parsed.failed,
        report,
        output: shown,
        environment: None,
        running,
        reached,
    };
    result.environment = result.environment_problem(root);
    Ok((result, output))
}

/// The line a run that did not end by itself adds to its report: timed out (naming the test
/// that was running, when the runner said), stopped at a limit, or cancelled.
fn stopped_note(end: &RunEnd, timeout_secs: u64, running: Option<&str>) -> String {
    match end {
        RunEnd::TimedOut => format!(
            "\n[the run timed out: it was stopped after {timeout_secs} s (test.timeout_secs){}]",
            running
                .map(|t| format!(" while `{t}` was running"))
                .unwrap_or_default()
        ),
        RunEnd::Limit { limit } => format!("\n[the run was stopped: {limit}]"),
        RunEnd::Cancelled => "\n[the run was cancelled]".to_string(),
        _ => String::new(),
    }
}

/// The sandbox limit a failed run hit: the one the helper named, else one the output tells
/// of (a program that caught the refused fork, allocation or write itself).
fn limit_hit(
    finished: &process::Finished,
    output: &str,
    sandbox: &Sandbox,
) -> Option<crate::trust::limits::Limit> {
    use crate::trust::limits;
    if sandbox.mode == sandbox::SandboxMode::Off
        || !matches!(finished.end, RunEnd::Exited { code } if code != 0)
            && finished.end != RunEnd::Signaled
    {
        return None;
    }
    sandbox::limit_named(&finished.stderr.text())
        .or_else(|| limits::limit_of_output(output, &sandbox.limits))
}

/// The limit a run that ended by itself reached on the way: a test caught the refused fork
/// or allocation and went on, so the run passed (or failed) shaped by the limit. Only the
/// helper's count says so (a control group's `pids.events`, its memory failures); a test's
/// output that mentions MemoryError may be a test of MemoryError.
fn reached_anyway(
    finished: &process::Finished,
    sandbox: &Sandbox,
) -> Option<crate::trust::limits::Limit> {
    if sandbox.mode == sandbox::SandboxMode::Off || !matches!(finished.end, RunEnd::Exited { .. }) {
        return None;
    }
    sandbox::limit_named(&finished.stderr.text())
}

/// The sandbox and environment a run uses with its own `TMPDIR` (`private_tmp`), and that
/// folder, which the caller keeps until the run ends.
fn with_private_tmp(
    sandbox: &Sandbox,
    env: &mut Vec<(String, String)>,
) -> (Sandbox, Option<tempfile::TempDir>) {
    let private = private_tmp(sandbox);
    let mut sandbox = sandbox.clone();
    if let Some(dir) = &private {
        env.retain(|(k, _)| k != "TMPDIR");
        env.push(("TMPDIR".into(), dir.path().to_string_lossy().into_owned()));
        // The helper allows its own TMPDIR (now the private folder) whole; the shared temp
        // folder stays writable as it was, for tests that name `/tmp` outright.
        sandbox.writable.push(std::env::temp_dir());
    }
    (sandbox, private)
}

/// A folder of the run's own for `TMPDIR`, in the machine's temporary folder: a user file
/// the sandbox denies there (a configuration under `/tmp`, as CI runners set XDG folders)
/// leaves the temporary folder's top level unwritable, and a linker or `mkstemp` then fails.
/// A rule on this folder allows it whole. Owned by `sandbox.run_as`'s user when commands
/// run as one. None when it cannot be made; the run then uses the shared folder as before.
fn private_tmp(sandbox: &Sandbox) -> Option<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("agent-ls-test-")
        .tempdir()
        .ok()?;
    if sandbox.mode != sandbox::SandboxMode::Off && !sandbox.run_as.is_empty() {
        let user = crate::trust::privileges::user(&sandbox.run_as)
            .ok()
            .flatten()?;
        nix::unistd::chown(dir.path(), Some(user.uid), Some(user.gid)).ok()?;
    }
    Some(dir)
}

/// `output` with the values of every key this process knows replaced by `<redacted>`: the
/// environment's (by name or shape) and those of every configuration it loaded (the user
/// file's roles and fallbacks included). By value only: a key-shaped expected value in an
/// assertion stays for the model to read.
fn redact_secrets(output: &str) -> String {
    let mut secrets = crate::memory::known_secrets(&crate::config::Config::default());
    secrets.extend(crate::config::remembered_secrets());
    // The longest first, so a key that contains another is replaced whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.iter().fold(output.to_string(), |out, s| {
        out.replace(s.as_str(), "<redacted>")
    })
}

/// The failures the runner's parser reads in `report` (a run's normalised report, the one
/// the model sees), each located where the runner says it failed.
pub(crate) fn failures_in(root: &Path, report: &str) -> Vec<Failure> {
    parse_output(root, report).1.failures
}

/// The runner's format and what it reported, read from `output`.
fn parse_output(root: &Path, output: &str) -> (Format, Parsed) {
    let go_module = go_module(root);
    let ctx = parse::Context {
        root,
        go_module: go_module.as_deref(),
    };
    parse::parse(output, &ctx)
}

/// The module path declared in `go.mod`, if there is one.
pub(crate) fn go_module(root: &Path) -> Option<String> {
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
            output: report.into(),
            environment: None,
            running: None,
            reached: None,
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

    #[test]
    fn a_timeout_names_the_test_that_was_running_when_known() {
        let mut r = result(1, "", vec![], (None, None));
        r.end = RunEnd::TimedOut;
        r.duration_ms = 3_000;
        let plain = r.stopped().unwrap();
        assert!(plain.contains("after 3 s (test.timeout_secs)"), "{plain}");
        assert!(plain.contains("a test hangs"), "{plain}");
        r.running = Some("test_hang.Hang.test_hang".into());
        for said in [
            r.stopped().unwrap(),
            r.summary(),
            summary(&r).stopped.unwrap(),
        ] {
            assert!(
                said.contains("while `test_hang.Hang.test_hang` was running"),
                "{said}"
            );
        }
    }
}
