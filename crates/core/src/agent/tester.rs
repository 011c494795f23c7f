//! The tester's tests as data: the JSON it answers with (`{"tests": [{path, name, kind,
//! reason, expect, content}]}`), a strict parser with typed errors, and the judge that keeps
//! a new test only when it fails on the current code for the reason the tester named (not an
//! import, collection or syntax error) and gives the same result on every run. Pure: the
//! runs' parsed output is handed in; writing and running the tests is the runtime's.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conversation::Message;
use crate::test_output::Failure;

/// How many times a new test is run before it is trusted: a test that does not give the
/// same result every time is flaky, and proves nothing.
pub const TRIAL_RUNS: u32 = 3;

/// Whether the tester adds a regression test after a change no test covered
/// (`tester.after_fix`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AfterFix {
    Off,
    /// Say that no test covers the change, and how to get one; no model call.
    #[default]
    Suggest,
    /// The tester writes the regression test, which must fail on the code before the run
    /// and pass on the code after it; it is proposed as its own change.
    Always,
}

/// The tester's settings for a run (`[tester]`, and `agent-ls run --reproduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Tests the tester may write before the run gives up (each refused test counts).
    pub max_attempts: u32,
    pub after_fix: AfterFix,
    /// Reproduce first whatever the baseline says (`--reproduce`).
    #[serde(default)]
    pub reproduce: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_attempts: 3,
            after_fix: AfterFix::Suggest,
            reproduce: false,
        }
    }
}

/// Why the tester writes a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Before the fix: a test that fails now, for the bug the goal describes.
    Reproduce,
    /// After a change no test covered: a test that fails on the code before the run and
    /// passes on the code after it.
    AfterFix,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    Example,
    Property,
}

/// One test the tester wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTest {
    /// The test file, relative to the workspace root.
    pub path: String,
    /// The test's name as the runner reports it (`test_trailing_comma`).
    pub name: String,
    pub kind: TestKind,
    /// Why this test shows the bug.
    pub reason: String,
    /// The assertion or error text the test must fail with on the current code.
    pub expect: String,
    /// The whole text of the test file (a new file, or the existing one with the test
    /// added). Left out of the record: the change shows it.
    #[serde(skip_serializing, default)]
    pub content: String,
    /// A Rust property's plain function that takes the property's inputs and asserts (its
    /// body): the example test made from a counterexample calls it with the values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// A failing property's shrunk counterexample, as the arguments its example test calls
    /// its body with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterexample: Option<String>,
}

/// Why a tester's answer could not be read; the tester hears it in its repair request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TesterError {
    #[error("no JSON object in the answer")]
    NoJson,
    #[error("the JSON does not parse: {0}")]
    Json(String),
    #[error("`tests` must be a non-empty list")]
    NoTests,
    #[error("tests[{index}].{key} is missing or not a non-empty string")]
    Missing { index: usize, key: &'static str },
    #[error("tests[{index}].kind must be \"example\" or \"property\", not {value}")]
    BadKind { index: usize, value: String },
    #[error("tests[{index}].path `{path}` must be a relative path inside the workspace")]
    BadPath { index: usize, path: String },
    #[error(
        "tests[{index}] is a property test in Rust: `check` must name the plain function the \
         property calls with its inputs"
    )]
    NoCheck { index: usize },
    #[error(
        "tests[{index}] is a property test, which must be Python (Hypothesis) or Rust (proptest)"
    )]
    BadProperty { index: usize },
}

/// Reads the tester's answer: one JSON object (bare, fenced, or the outermost braces of prose
/// around it) with a non-empty `tests` list whose every field is given.
pub fn parse_tests(text: &str) -> Result<Vec<NewTest>, TesterError> {
    let v = super::json_answer::object(text).map_err(|e| match e {
        super::json_answer::JsonAnswerError::NoJson => TesterError::NoJson,
        super::json_answer::JsonAnswerError::Json(e) => TesterError::Json(e),
    })?;
    let items = match v.get("tests") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => return Err(TesterError::NoTests),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, t)| test_of(i, t))
        .collect()
}

fn test_of(index: usize, t: &Value) -> Result<NewTest, TesterError> {
    let text = |key: &'static str| {
        t.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or(TesterError::Missing { index, key })
    };
    let path = text("path")?.trim().trim_start_matches("./").to_string();
    let escapes = path.starts_with('/')
        || path.contains('\\')
        || path.split('/').any(|p| p == ".." || p.is_empty());
    if escapes {
        return Err(TesterError::BadPath { index, path });
    }
    let kind = match t.get("kind").and_then(Value::as_str).map(str::trim) {
        None | Some("example") => TestKind::Example,
        Some("property") => TestKind::Property,
        Some(other) => {
            return Err(TesterError::BadKind {
                index,
                value: format!("{other:?}"),
            });
        }
    };
    let check = t
        .get("check")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    if kind == TestKind::Property {
        match path.rsplit('.').next() {
            Some("py") => {}
            Some("rs") if check.is_some() => {}
            Some("rs") => return Err(TesterError::NoCheck { index }),
            _ => return Err(TesterError::BadProperty { index }),
        }
    }
    Ok(NewTest {
        path,
        name: text("name")?.trim().to_string(),
        kind,
        reason: text("reason")?.trim().to_string(),
        expect: text("expect")?.trim().to_string(),
        content: text("content")?.to_string(),
        check,
        counterexample: None,
    })
}

/// The repair request after an answer that could not be read.
pub fn repair(error: &TesterError) -> Message {
    Message::user(format!(
        "Your answer could not be read ({error}). Answer again with the JSON object only: \
         {{\"tests\": [{{\"path\", \"name\", \"kind\": \"example\" | \"property\", \"reason\", \
         \"expect\", \"content\", \"check\" (a Rust property's body function)}}]}}."
    ))
}

/// The tester's prompt: its system prompt, what to write and why, the test command, the
/// project's files, then what became of its earlier tests.
pub fn prompt(
    system: &str,
    (mode, goal, change): (Mode, &str, &str),
    files: &str,
    feedback: &[String],
) -> Vec<Message> {
    let task = match mode {
        Mode::Reproduce => format!(
            "The bug to reproduce: {goal}\n\nNo test fails yet. Write a test that fails on the \
             current code because of this bug, and would pass once it is fixed."
        ),
        Mode::AfterFix => format!(
            "The change was made for: {goal}\n\nNo test covered it. Write a regression test that \
             fails on the code before the change and passes on the code after it. The change:\n\
             ```diff\n{}\n```",
            change.trim_end()
        ),
    };
    let mut messages = vec![
        Message::system(system.to_string()),
        Message::user(format!("{task}\n\n{files}")),
    ];
    messages.extend(feedback.iter().map(|f| Message::user(f.clone())));
    messages
}

/// One run of the new tests, as the judge reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    /// The command ended well and no failure was found.
    pub passed: bool,
    pub failures: Vec<Failure>,
    /// The output, normalised and cut to its head and tail.
    pub report: String,
    /// The command did not get as far as running the tests, and why.
    pub problem: Option<String>,
}

/// What the driver is to do to try new tests: write `write` (a `None` text deletes the file),
/// run the tests (narrowed to `filter` when there is one) `times` times; then, when `after`
/// is not empty, write it and run them once more. Every file is put back as it was before
/// the trial, whatever happens. Answered with `Event::TestsTried`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrialPlan {
    pub write: Vec<(String, Option<String>)>,
    pub filter: Option<String>,
    pub times: u32,
    pub after: Vec<(String, Option<String>)>,
}

/// The runs a trial made: `before` on the code as the trial plan wrote it, `after` on the
/// code after the change (when the plan had one).
#[derive(Debug, Clone, PartialEq)]
pub struct Tried {
    pub before: Vec<Trial>,
    pub after: Option<Trial>,
}

/// Why a trial could not be made (`Event::TestsTried`). Most often the tester's doing (a
/// protected path, one outside the workspace): it hears why, and the attempt counts. The
/// runtime's causes are kept as their messages, so the event stays a plain value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrialError {
    /// The path is not one the trial may write (outside the workspace, not a file path).
    #[error("{path}: {reason}")]
    BadPath { path: String, reason: String },
    #[error("{path} is protected ({why}); write the test elsewhere")]
    Protected { path: String, why: String },
    #[error("{path}: {reason}")]
    Folder { path: String, reason: String },
    #[error("cannot write {path} for the trial: {reason}")]
    Write { path: String, reason: String },
    /// The test command could not run.
    #[error("{0}")]
    Run(String),
    #[error("cancelled")]
    Cancelled,
}

/// Why the property tests' library is not there (`Event::DevDependency`); the tester hears
/// it and is asked for an example test instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallError {
    #[error(
        "{library} is not installed, and tester.install = false allows no install (`{command}`)"
    )]
    NotAllowed { library: String, command: String },
    #[error(
        "{library} is not installed, and installing it as a dev dependency (`{command}`) was \
         not approved"
    )]
    NotApproved { library: String, command: String },
    #[error("installing {library} (`{command}`) failed: {why}")]
    Failed {
        library: String,
        command: String,
        why: String,
    },
    #[error("`{command}` ran, but {library} is still not there")]
    StillMissing { library: String, command: String },
    #[error("no property-test library is known as {0}")]
    Unknown(String),
    #[error("the workspace's path is not UTF-8")]
    NotUtf8,
    /// Whether the library is there could not be asked (the sandbox, a timeout, an unreadable
    /// Cargo.toml).
    #[error("{0}")]
    Unasked(String),
}

/// The runner's filter for the new tests: the file for runners that take one (pytest, node)
/// when they are all in one file, else a name every test's name contains (a property and
/// its example test: `round_trip`, `round_trip_example`); none when there is no such filter.
pub fn filter_of(tests: &[NewTest]) -> Option<String> {
    let first = tests.first()?;
    let by_file = [".py", ".js", ".mjs", ".cjs", ".ts"]
        .iter()
        .any(|e| first.path.ends_with(e));
    if by_file && tests.iter().all(|t| t.path == first.path) {
        return Some(first.path.clone());
    }
    tests
        .iter()
        .all(|t| t.name.contains(&first.name))
        .then(|| first.name.clone())
}

/// What a test's runs showed.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    /// It fails for the reason named: the failure's message.
    Fails(String),
    /// It was refused: why, for the tester (with the output where it helps).
    Refused(String),
}

/// What a failure that is not the bug looks like: the test could not even run. The first that
/// matches names it.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "ModuleNotFoundError",
        "an import error (ModuleNotFoundError)",
    ),
    ("ImportError", "an import error (ImportError)"),
    ("SyntaxError", "a syntax error"),
    ("IndentationError", "a syntax error (IndentationError)"),
    ("error[E", "a compile error"),
    ("could not compile", "a compile error"),
    ("[build failed]", "a build error"),
    ("[setup failed]", "a setup error"),
    ("Cannot find module", "an import error (Cannot find module)"),
    // Last: a collection error says more by its cause, when it names one above.
    ("ERROR collecting", "a collection error"),
    ("error collecting", "a collection error"),
];

/// Judges the runs of the new tests on the current code: kept only when every run fails the
/// same way, in one of the new tests, with a failure whose message holds the `expect` text
/// of its test, and that is not a failure to import, collect or compile it.
pub fn judge(tests: &[NewTest], trials: &[Trial]) -> Judgement {
    let Some(first) = trials.first() else {
        return Judgement::Refused("the test was not run".into());
    };
    let outcomes: Vec<Judgement> = trials.iter().map(|t| judge_one(tests, t)).collect();
    let key = |j: &Judgement| match j {
        Judgement::Fails(_) => "fails".to_string(),
        Judgement::Refused(why) => why.lines().next().unwrap_or("").to_string(),
    };
    if outcomes.iter().any(|o| key(o) != key(&outcomes[0])) {
        let seen: Vec<&str> = trials
            .iter()
            .map(|t| if t.passed { "passed" } else { "failed" })
            .collect();
        return Judgement::Refused(format!(
            "the test is flaky: its {} runs gave different results ({}); write a \
             deterministic test (no randomness, time or state kept between runs)",
            trials.len(),
            seen.join(", ")
        ));
    }
    match &outcomes[0] {
        Judgement::Refused(why) => Judgement::Refused(format!(
            "{why}\nThe output (cut to its head and tail):\n{}",
            first.report
        )),
        fails => fails.clone(),
    }
}

fn judge_one(tests: &[NewTest], trial: &Trial) -> Judgement {
    if let Some(problem) = &trial.problem {
        return Judgement::Refused(format!("the tests did not run: {problem}"));
    }
    let ours: Vec<&Failure> = trial
        .failures
        .iter()
        .filter(|f| tests.iter().any(|t| concerns(f, t)))
        .collect();
    if trial.passed || ours.is_empty() {
        return Judgement::Refused(
            "the test passes on the code with the bug, so it does not show the bug".into(),
        );
    }
    for f in &ours {
        let text = format!("{}\n{}", f.test_id, f.message);
        let test = tests.iter().find(|t| concerns(f, t)).unwrap_or(&tests[0]);
        if let Some((_, what)) = NOT_RUN
            .iter()
            .find(|(mark, _)| text.contains(mark) && !test.expect.contains(mark))
        {
            return Judgement::Refused(format!(
                "the test fails with {what}, not because of the bug: `{}`",
                first_line(&f.message)
            ));
        }
    }
    for f in &ours {
        let test = tests.iter().find(|t| concerns(f, t)).unwrap_or(&tests[0]);
        if loose(&f.message).contains(&loose(&test.expect)) {
            return Judgement::Fails(f.message.clone());
        }
    }
    let f = ours[0];
    let test = tests.iter().find(|t| concerns(f, t)).unwrap_or(&tests[0]);
    Judgement::Refused(format!(
        "the test fails, but not with the failure you named (`{}`): `{}`",
        test.expect,
        first_line(&f.message)
    ))
}

/// Whether a failure is of this new test: its id names the test or its file, or it happened
/// in the test's file.
fn concerns(f: &Failure, t: &NewTest) -> bool {
    let file = t.path.rsplit('/').next().unwrap_or(&t.path);
    f.test_id.contains(&t.name)
        || f.test_id.contains(&t.path)
        || f.test_id.contains(file)
        || f.location.iter().chain(&f.frames).any(|l| l.file == t.path)
}

/// Text compared without regard to whitespace, case or the kind of quotes.
fn loose(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| if c == '"' { '\'' } else { c })
        .flat_map(char::to_lowercase)
        .collect()
}

fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

/// Why a regression test does not tell the code before the change from the code after it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRegression {
    #[error("the tests did not run on the new code: {0}")]
    NotRun(String),
    #[error(
        "the test fails on the code after the change too ({failures}), so it does not tell the \
         two apart\nThe output (cut to its head and tail):\n{report}"
    )]
    FailsAfter { failures: String, report: String },
}

/// Judges the new tests' run on the code after the change (a regression test must pass).
pub fn passes_after(tests: &[NewTest], trial: &Trial) -> Result<(), NotRegression> {
    if let Some(problem) = &trial.problem {
        return Err(NotRegression::NotRun(problem.clone()));
    }
    if trial.passed {
        return Ok(());
    }
    let ours: Vec<String> = trial
        .failures
        .iter()
        .filter(|f| tests.iter().any(|t| concerns(f, t)))
        .map(|f| format!("{}: {}", f.test_id, first_line(&f.message)))
        .collect();
    Err(NotRegression::FailsAfter {
        failures: if ours.is_empty() {
            "other tests fail".to_string()
        } else {
            ours.join("; ")
        },
        report: trial.report.clone(),
    })
}

/// What became of the tester's work in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The latest test was refused; the tester tries again.
    Refused,
    /// A test was kept and proposed as its own change.
    Kept,
    /// Every attempt was refused (`tester.max_attempts`).
    Exhausted,
    /// The user rejected the kept test's change.
    Rejected,
    /// The tester could not be had: its model failed, its answer could not be read twice, or
    /// the tests could not run.
    Unavailable,
}

/// One run's result as the record shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ran {
    /// "failed" or "passed".
    pub state: String,
    /// How many times it ran with this result.
    pub runs: u32,
    /// The failure the test showed (its message), when it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Ran {
    pub fn failed(runs: u32, message: &str) -> Ran {
        Ran {
            state: "failed".into(),
            runs,
            message: cut_message(message),
        }
    }

    pub fn passed(runs: u32) -> Ran {
        Ran {
            state: "passed".into(),
            runs,
            message: String::new(),
        }
    }
}

/// A failure message for the record: its first 500 characters.
fn cut_message(text: &str) -> String {
    const MAX: usize = 500;
    match text.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The runs of the kept test: on the code before the fix, and after it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RanBoth {
    pub before: Option<Ran>,
    pub after: Option<Ran>,
}

/// The tester's record in a run: journaled (`tester`), in `--json` and `runFinished`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub mode: Mode,
    pub status: Status,
    /// The kept tests (the last ones tried, when none was kept).
    pub tests: Vec<NewTest>,
    pub ran: RanBoth,
    /// Tests written, the kept one included.
    pub attempts: u32,
    /// Why each refused attempt was refused (its first line).
    #[serde(default)]
    pub refused: Vec<String>,
    /// Why the tester gave up, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Record {
    /// The properties' shrunk counterexamples, for the summary: `; the counterexample of
    /// test_round_trip: s=','`.
    fn counterexamples(&self) -> String {
        self.tests
            .iter()
            .filter_map(|t| {
                t.counterexample
                    .as_ref()
                    .map(|c| format!("; the counterexample of {}: {c}", t.name))
            })
            .collect()
    }

    /// One line for a person.
    pub fn summary(&self) -> String {
        let names: Vec<String> = self
            .tests
            .iter()
            .map(|t| format!("{}::{}", t.path, t.name))
            .collect();
        match self.status {
            Status::Kept => format!(
                "tester: {} fails on the code before the fix ({} attempt(s)){}",
                names.join(", "),
                self.attempts,
                self.counterexamples()
            ),
            Status::Rejected => format!("tester: the test {} was rejected", names.join(", ")),
            Status::Refused => format!(
                "tester: {} refused (attempt {}): {}",
                names.join(", "),
                self.attempts,
                self.reason.as_deref().unwrap_or("")
            ),
            Status::Exhausted | Status::Unavailable => format!(
                "tester: no test kept: {}",
                self.reason.as_deref().unwrap_or("")
            ),
        }
    }
}

/// The tester's turn in progress: the mode, attempts so far, the tests on trial, and what it
/// hears next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    pub mode: Mode,
    pub attempts: u32,
    /// The unreadable answer was sent back once in this attempt.
    pub repaired: bool,
    pub tests: Vec<NewTest>,
    pub feedback: Vec<String>,
    pub refused: Vec<String>,
    /// The kept test's change is being proposed, applied and tested.
    pub applying: bool,
    /// The change the regression test is for (after a fix), as a diff.
    #[serde(default)]
    pub change: String,
    /// The example tests made from the properties' counterexamples are on trial: the last
    /// of `tests` are those examples.
    #[serde(default)]
    pub examples: bool,
    /// The property libraries found or installed in this run (`Effect::DevDependency`).
    #[serde(default)]
    pub ready: Vec<String>,
}

impl Work {
    pub fn new(mode: Mode, change: String) -> Work {
        Work {
            mode,
            attempts: 0,
            repaired: false,
            tests: Vec::new(),
            feedback: Vec::new(),
            refused: Vec::new(),
            applying: false,
            change,
            examples: false,
            ready: Vec::new(),
        }
    }

    /// The record of this work as it stands.
    pub fn record(&self, status: Status, ran: RanBoth, reason: Option<String>) -> Record {
        Record {
            mode: self.mode,
            status,
            tests: self.tests.clone(),
            ran,
            attempts: self.attempts,
            refused: self.refused.clone(),
            reason,
        }
    }
}

/// Whether a goal describes something to reproduce, beyond "fix the failing tests": a goal
/// of only such words has nothing a new test could show.
pub fn describes_bug(goal: &str) -> bool {
    const GENERIC: &[&str] = &[
        "fix", "the", "a", "all", "failing", "failed", "broken", "test", "tests", "make", "pass",
        "passing", "please", "them", "again", "suite", "and", "run",
    ];
    goal.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .filter(|w| !GENERIC.contains(&w.to_lowercase().as_str()))
        .count()
        >= 3
}

pub mod property;

#[cfg(test)]
mod tests;
