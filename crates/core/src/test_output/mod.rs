//! What a test run printed, read without running anything: `parse` turns output text into
//! failures, `report` turns it into the text a model reads, `running` tells which test was
//! running when a run was stopped; `TestState` names what a run came to.

pub mod parse;
pub mod report;
pub mod running;

pub use parse::{Failure, Format, Location, Parsed};

/// What a test run came to, as `agent-ls/testStatus` and the journal name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestState {
    Running,
    Passed,
    Failed,
    TimedOut,
    Cancelled,
    /// The run could not happen (no command, refused, would not start).
    Error,
    /// The command ran and found no test (pytest's "no tests ran", exit 5): the project has
    /// no tests yet, which is neither a pass nor a failure.
    NoTests,
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
            TestState::NoTests => "no_tests",
        }
    }
}
