//! The test `Shell`: it records every call the driver makes on it, in order, and answers from
//! a script (the test runs' results, the user's verdicts, how applying goes), so a test can
//! drive the loop in-process and check what reached the user and the files.

use std::collections::VecDeque;
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::super::{ApplyError, ChangeQuestion, Shell, Verdict};
use crate::tests_run::{Failure, Format, Location, RunEnd, RunError, RunResult, TestCommand};
use agent_ls_core::agent::review::ReviewResult;
use agent_ls_core::edit::{FileChange, FileText};

/// One call the driver made on the shell.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Call {
    Approve { files: Vec<String> },
    Apply { files: Vec<String> },
    RunTests { command: Option<Vec<String>> },
    Progress(String),
    Warn(String),
    Reviewed { report: String, loud: bool },
    Task { task: String, iteration: u32 },
}

impl Call {
    /// The call in a few words, for a test to compare traces.
    fn brief(&self) -> String {
        match self {
            Call::Approve { files } => format!("approve {}", files.join(", ")),
            Call::Apply { files } => format!("apply {}", files.join(", ")),
            Call::RunTests { command: None } => "run_tests".into(),
            Call::RunTests { command: Some(c) } => format!("run {}", c.join(" ")),
            Call::Progress(m) => format!("progress: {m}"),
            Call::Warn(m) => format!("warn: {m}"),
            Call::Reviewed { report, loud } => format!("reviewed (loud: {loud}): {report}"),
            Call::Task { task, iteration } => format!("task {task} (iteration {iteration})"),
        }
    }
}

/// When the shell fires the run's cancel token: after recording a call that matches.
type CancelWhen = (CancellationToken, Box<dyn Fn(&Call) -> bool>);

pub(super) struct TestShell {
    root: PathBuf,
    calls: Vec<Call>,
    /// The user's answers to approval, in order; once spent, every change is approved.
    verdicts: VecDeque<Verdict>,
    /// How each apply goes, in order; once spent, every change is written to the files.
    applies: VecDeque<Result<(), ApplyError>>,
    /// Each test run's result, in order; a run beyond the script is an error the test sees.
    tests: VecDeque<Result<RunResult, RunError>>,
    cancel: Option<CancelWhen>,
    /// How many files the loop read through the shell.
    reads: std::cell::Cell<usize>,
    /// Whether someone answers questions (else the policy refuses what needs one).
    present: bool,
}

impl TestShell {
    pub(super) fn new(root: impl Into<PathBuf>) -> TestShell {
        TestShell {
            root: root.into(),
            calls: Vec::new(),
            verdicts: VecDeque::new(),
            applies: VecDeque::new(),
            tests: VecDeque::new(),
            cancel: None,
            reads: std::cell::Cell::new(0),
            present: true,
        }
    }

    /// Nobody is there to answer.
    pub(super) fn absent(mut self) -> Self {
        self.present = false;
        self
    }

    /// How many files the loop has read through the shell.
    pub(super) fn reads(&self) -> usize {
        self.reads.get()
    }

    pub(super) fn tests(
        mut self,
        runs: impl IntoIterator<Item = Result<RunResult, RunError>>,
    ) -> Self {
        self.tests.extend(runs);
        self
    }

    pub(super) fn verdicts(mut self, verdicts: impl IntoIterator<Item = Verdict>) -> Self {
        self.verdicts.extend(verdicts);
        self
    }

    pub(super) fn applies(
        mut self,
        applies: impl IntoIterator<Item = Result<(), ApplyError>>,
    ) -> Self {
        self.applies.extend(applies);
        self
    }

    /// Fires `token` once a call matching `when` is recorded (the user cancels then).
    pub(super) fn cancel_on(
        mut self,
        token: &CancellationToken,
        when: impl Fn(&Call) -> bool + 'static,
    ) -> Self {
        self.cancel = Some((token.clone(), Box::new(when)));
        self
    }

    /// The calls that act (approve, apply, tests, task, review, warnings), in a few words
    /// each: the trace of the loop's effects without its progress lines.
    pub(super) fn effects(&self) -> Vec<String> {
        self.calls
            .iter()
            .filter(|c| !matches!(c, Call::Progress(_)))
            .map(Call::brief)
            .collect()
    }

    /// The progress lines, in order.
    pub(super) fn progress_lines(&self) -> Vec<&str> {
        self.calls
            .iter()
            .filter_map(|c| match c {
                Call::Progress(m) => Some(m.as_str()),
                _ => None,
            })
            .collect()
    }

    pub(super) fn count(&self, what: impl Fn(&Call) -> bool) -> usize {
        self.calls.iter().filter(|c| what(c)).count()
    }

    fn record(&mut self, call: Call) {
        if let Some((token, when)) = &self.cancel
            && when(&call)
        {
            token.cancel();
        }
        self.calls.push(call);
    }
}

fn paths(changes: &[FileChange]) -> Vec<String> {
    changes.iter().map(|c| c.path.clone()).collect()
}

impl Shell for TestShell {
    fn read(&self, relative: &str) -> FileText {
        self.reads.set(self.reads.get() + 1);
        crate::files::read_for_plan(&self.root, relative)
    }

    fn present(&self) -> bool {
        self.present
    }

    async fn ask_change(&mut self, question: &ChangeQuestion<'_>) -> bool {
        self.record(Call::Approve {
            files: paths(question.changes),
        });
        self.verdicts.pop_front().unwrap_or(Verdict::Approved) == Verdict::Approved
    }

    async fn confirm_protected(&mut self, path: &str, _why: &str) -> bool {
        self.record(Call::Approve {
            files: vec![path.to_string()],
        });
        self.verdicts.pop_front().unwrap_or(Verdict::Approved) == Verdict::Approved
    }

    async fn write(&mut self, changes: &[FileChange]) -> Result<(), ApplyError> {
        self.record(Call::Apply {
            files: paths(changes),
        });
        match self.applies.pop_front() {
            Some(Err(e)) => Err(e),
            Some(Ok(())) | None => crate::files::write_changes(&self.root, changes)
                .map_err(|e| ApplyError::Failed(e.to_string())),
        }
    }

    async fn run_tests(
        &mut self,
        _cancel: &CancellationToken,
        command: Option<Vec<String>>,
    ) -> Result<RunResult, RunError> {
        self.record(Call::RunTests { command });
        self.tests.pop_front().unwrap_or_else(|| {
            Err(RunError::Internal(
                "the test shell's script has no more test runs".into(),
            ))
        })
    }

    fn progress(&mut self, message: &str) {
        self.record(Call::Progress(message.into()));
    }

    fn warn(&mut self, message: &str) {
        self.record(Call::Warn(message.into()));
    }

    fn reviewed(&mut self, _result: &ReviewResult, report: &str, loud: bool) {
        self.record(Call::Reviewed {
            report: report.into(),
            loud,
        });
    }

    fn task(&mut self, task: &str, iteration: u32) {
        self.record(Call::Task {
            task: task.into(),
            iteration,
        });
    }
}

/// A pytest run (the command is only a name here) that ended as `end` with these counts.
fn pytest(end: RunEnd, failures: Vec<Failure>, passed: u32, report: &str) -> RunResult {
    RunResult {
        command: TestCommand {
            argv: vec!["pytest".into()],
            reason: "configured (test.command)".into(),
        },
        end,
        duration_ms: 7,
        format: Format::Pytest,
        failed: Some(failures.len() as u32),
        failures,
        passed: Some(passed),
        report: report.into(),
        output: report.into(),
        environment: None,
        running: None,
        reached: None,
    }
}

/// A run where `test` fails at `file:line` with `message`, and `passed` others pass.
pub(super) fn failing(test: &str, file: &str, line: u32, message: &str, passed: u32) -> RunResult {
    let failure = Failure {
        test_id: test.into(),
        location: Some(Location {
            file: file.into(),
            line,
            column: None,
        }),
        message: message.into(),
        frames: Vec::new(),
    };
    let report = format!("FAILED {test} - {message}\n{file}:{line}: {message}");
    pytest(RunEnd::Exited { code: 1 }, vec![failure], passed, &report)
}

/// A run where all `passed` tests pass.
pub(super) fn passing(passed: u32) -> RunResult {
    pytest(
        RunEnd::Exited { code: 0 },
        Vec::new(),
        passed,
        &format!("{passed} passed"),
    )
}

/// A run the cancel token stopped, as the real runner reports it.
pub(super) fn cancelled() -> RunResult {
    pytest(RunEnd::Cancelled, Vec::new(), 0, "")
}
