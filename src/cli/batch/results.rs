//! `DIR/results.jsonl`: one JSON result a line, appended in one write and synced when a task
//! ends, so a crash or a Ctrl-C never leaves half a line; the newest line for an id wins.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use agent_ls_runtime::clock::now_ms;
use serde::{Deserialize, Serialize};

/// The outcome of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    pub id: String,
    /// The run's status (`done`, `failed`, ...), `refused` (its config), or `error` (the
    /// task could not be set up or its run gave no outcome).
    pub status: String,
    /// The run's exit code (docs/agent.md), null when no run started.
    pub exit_code: Option<i32>,
    pub tokens: u64,
    /// What the run's model calls cost in US dollars, as `[prices]` counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Wall time of the task, setup included.
    pub duration_ms: u64,
    /// The task's change against the commit it started from (`git diff`), new files included.
    pub diff: String,
    pub checkpoint: Option<String>,
    pub branch: Option<String>,
    pub worktree: Option<String>,
    pub run_id: Option<String>,
    /// The run's journal (`agent-ls replay` reads it).
    pub journal: Option<String>,
    /// The run's stderr.
    pub log: Option<String>,
    /// Why a task was refused or did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unix time in milliseconds the line was written.
    pub finished_at: i64,
}

impl TaskResult {
    /// A task that succeeded is never run again; every other outcome is a failure that
    /// `--retry-failed` redoes.
    pub fn succeeded(&self) -> bool {
        self.status == "done"
    }

    /// A result with no run behind it: the task was refused, or could not start.
    pub fn without_run(id: &str, status: &str, reason: String, duration_ms: u64) -> Self {
        TaskResult {
            id: id.to_string(),
            status: status.to_string(),
            exit_code: None,
            tokens: 0,
            cost_usd: None,
            duration_ms,
            diff: String::new(),
            checkpoint: None,
            branch: None,
            worktree: None,
            run_id: None,
            journal: None,
            log: None,
            reason: Some(reason),
            finished_at: now_ms(),
        }
    }
}

/// The newest result of each id in the file (none when there is no file). A line that does
/// not parse is skipped with a warning: it cannot be one of ours, since each is one write.
pub fn newest(path: &Path) -> std::io::Result<HashMap<String, TaskResult>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(e),
    };
    let mut out = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<TaskResult>(line) {
            Ok(r) => {
                out.insert(r.id.clone(), r);
            }
            Err(e) => eprintln!(
                "agent-ls: warning: {} line {}: not a result ({e}); ignored",
                path.display(),
                n + 1
            ),
        }
    }
    Ok(out)
}

/// Appends results to the file, each as one whole line.
pub struct Writer {
    file: std::fs::File,
}

impl Writer {
    pub fn open(path: &Path) -> std::io::Result<Writer> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Writer { file })
    }

    /// One line in one write (O_APPEND puts it at the end whole), then synced to disk before
    /// the task counts as finished.
    pub fn append(&mut self, result: &TaskResult) -> std::io::Result<()> {
        let mut line = serde_json::to_string(result).map_err(std::io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()
    }
}
