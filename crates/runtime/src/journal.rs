//! The run journal: each run appends one JSON object a line to
//! `.agent-ls/runs/<unix-ms>-<run_id>.jsonl`, never rewritten:
//! `{"ts", "run_id", "role", "type", "data"}`. Model answers also carry `content` and
//! `tool_calls` at the top level, the replay provider's format, so a journal replays as is.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use agent_ls_core::agent::RunStatus;
use agent_ls_core::events::{Audience, RunEvent, Wire};

use crate::clock::now_ms;

pub const DIR: &str = ".agent-ls/runs";
/// Inline completion's events (docs/completion.md): `shown`, `accepted`, `partial`, one a
/// line, for `agent-ls stats`.
pub const COMPLETIONS: &str = ".agent-ls/completions.jsonl";

pub struct Journal {
    file: Option<File>,
    /// Values removed from every line (the keys this process knows); key-shaped strings go
    /// too. Journals are read by people and replayed, and are never a place for a key.
    secrets: Vec<String>,
    run_id: String,
    pub path: Option<PathBuf>,
}

impl Journal {
    /// Opens a new journal for the run; when the folder cannot be written, the run goes on
    /// without one and says so in the log.
    pub fn create(root: &Path, run_id: &str) -> Journal {
        let dir = root.join(DIR);
        let path = dir.join(format!("{}-{run_id}.jsonl", now_ms()));
        let file = std::fs::create_dir_all(&dir)
            .inspect(|_| {
                if let Some(state) = dir.parent() {
                    crate::store::ignore_state(state);
                }
            })
            .and_then(|_| OpenOptions::new().create_new(true).append(true).open(&path));
        match file {
            Ok(f) => Journal {
                file: Some(f),
                secrets: Vec::new(),
                run_id: run_id.into(),
                path: Some(path),
            },
            Err(e) => {
                tracing::warn!("no run journal: cannot write {}: {e}", path.display());
                Journal::disabled(run_id)
            }
        }
    }

    /// Opens a run's existing journal to go on with it (a resumed run); a new one when it is
    /// gone.
    pub fn append(root: &Path, run_id: &str) -> Journal {
        match path_of(root, run_id).map(|p| (OpenOptions::new().append(true).open(&p), p)) {
            Some((Ok(mut f), path)) => {
                // A run killed mid-write may have left a torn last line: the resumed run's
                // lines start on a line of their own.
                if !ends_with_newline(&path) {
                    let _ = f.write_all(b"\n");
                }
                Journal {
                    file: Some(f),
                    secrets: Vec::new(),
                    run_id: run_id.into(),
                    path: Some(path),
                }
            }
            _ => Journal::create(root, run_id),
        }
    }

    pub fn disabled(run_id: &str) -> Journal {
        Journal {
            file: None,
            secrets: Vec::new(),
            run_id: run_id.into(),
            path: None,
        }
    }

    /// The same journal, with these secrets' values redacted from every line it writes.
    pub fn redacting(mut self, secrets: Vec<String>) -> Journal {
        self.secrets = secrets;
        self
    }

    /// Appends one event as its line; a write error stops the journal, never the run. A model
    /// call's line also carries the answer at the top level, the replay provider's format.
    pub fn record(&mut self, event: &RunEvent) {
        let Wire { role, kind, data } = event.wire(Audience::Journal);
        let mut line = json!({"ts": now_ms(), "run_id": self.run_id, "role": role, "type": kind, "data": data});
        if let RunEvent::ModelCall(m) = event {
            line["content"] = json!(m.content);
            line["tool_calls"] = json!(m.tool_calls);
        }
        self.line(line);
    }

    /// The run's phase timings (`type: "phases"`, docs/bigrepo.md): where its time went.
    pub fn phases(&mut self, data: Value) {
        let line = json!({"ts": now_ms(), "run_id": self.run_id, "role": "agent", "type": "phases", "data": data});
        self.line(line);
    }

    /// One `write` of the line and its newline together, so a process killed mid-run leaves
    /// whole lines (or, at worst, one torn last line that readers skip).
    fn line(&mut self, mut value: Value) {
        crate::memory::redact_value(&mut value, &self.secrets);
        let mut text = value.to_string();
        text.push('\n');
        if let Some(f) = &mut self.file
            && f.write_all(text.as_bytes()).is_err()
        {
            tracing::warn!("the run journal stopped: cannot write");
            self.file = None;
        }
    }
}

/// The journal of run `run_id` under `root`, if it has one.
pub fn path_of(root: &Path, run_id: &str) -> Option<PathBuf> {
    let suffix = format!("-{run_id}.jsonl");
    std::fs::read_dir(root.join(DIR)).ok().and_then(|entries| {
        entries
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(&suffix))
    })
}

/// The lines of run `run_id`'s journal under `root`, in order; none when it has no journal.
pub fn lines_of(root: &Path, run_id: &str) -> Vec<Value> {
    let Some(path) = path_of(root, run_id) else {
        return Vec::new();
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => read_lines(&text, &path),
        Err(_) => Vec::new(),
    }
}

/// The phase timings run `run_id` recorded at its end (its journal's last `phases` line), if
/// it recorded any.
pub fn phases_of(root: &Path, run_id: &str) -> Option<Value> {
    let path = path_of(root, run_id)?;
    let text = std::fs::read_to_string(&path).ok()?;
    // The line is written at the end, so it is searched from there.
    text.lines()
        .rev()
        .filter(|l| l.contains("\"type\":\"phases\""))
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["data"].clone())
}

/// A journal's summary for `agent-ls runs`.
#[derive(Debug, serde::Serialize)]
pub struct RunSummary {
    pub run_id: String,
    pub started_ms: u64,
    pub goal: String,
    /// How the run ended: its last `finished` line's status, or `interrupted` without one.
    pub status: RunStatus,
    pub path: String,
}

/// The runs recorded under `root`, newest first.
pub fn list(root: &Path) -> Vec<RunSummary> {
    let Ok(entries) = std::fs::read_dir(root.join(DIR)) else {
        return Vec::new();
    };
    let mut out: Vec<RunSummary> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|e| summary(&e.path()))
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.started_ms));
    out
}

pub fn summary(path: &Path) -> Option<RunSummary> {
    let text = std::fs::read_to_string(path).ok()?;
    let lines = read_lines(&text, path);
    let first = lines.first()?;
    let goal = lines
        .iter()
        .find(|l| l["type"] == "intent")
        .map(|l| l["data"]["goal"].as_str().unwrap_or("").to_string())?;
    let status = lines
        .iter()
        .rev()
        .filter(|l| l["type"] == "finished")
        .find_map(|l| l["data"]["status"].as_str().and_then(RunStatus::parse))
        .unwrap_or(RunStatus::Interrupted);
    Some(RunSummary {
        run_id: first["run_id"].as_str().unwrap_or("").into(),
        started_ms: first["ts"].as_u64().unwrap_or(0),
        goal,
        status,
        path: path.display().to_string(),
    })
}

/// Whether the file at `path` is empty or ends with a newline.
fn ends_with_newline(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return true;
    };
    let mut last = [0u8; 1];
    match f.seek(SeekFrom::End(-1)) {
        Ok(_) => f.read_exact(&mut last).is_err() || last[0] == b'\n',
        Err(_) => true, // empty
    }
}

/// A journal's lines as JSON. A line that does not parse (the torn end of a run that was
/// killed mid-write) is skipped with a warning naming the file and line.
pub fn read_lines(text: &str, path: &Path) -> Vec<Value> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .filter_map(|(i, l)| match serde_json::from_str(l) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(
                    "{}:{}: skipped a line that is not whole JSON ({e})",
                    path.display(),
                    i + 1
                );
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_journal_after_a_torn_line_starts_on_a_line_of_its_own() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join(DIR);
        std::fs::create_dir_all(&dir).expect("journal dir");
        let path = dir.join("1-run_torn.jsonl");
        let intent =
            r#"{"ts":1,"run_id":"run_torn","role":"agent","type":"intent","data":{"goal":"g"}}"#;
        std::fs::write(&path, format!("{intent}\n{{\"ts\":2,\"run_")).expect("write");
        let mut journal = Journal::append(root.path(), "run_torn");
        journal.line(
            json!({"ts": 3, "run_id": "run_torn", "role": "agent", "type": "finished",
            "data": {"status": "done"}}),
        );
        let text = std::fs::read_to_string(&path).expect("read");
        let lines = read_lines(&text, &path);
        assert_eq!(lines.len(), 2, "{text}");
        let summary = summary(&path).expect("a summary");
        assert_eq!(summary.status, RunStatus::Done);
        assert_eq!(summary.goal, "g");
    }
}

/// Appends one inline-completion event (`shown` with its latency, `accepted`, `partial`) to
/// the workspace's completions journal. Only where `.agent-ls/` exists already: a folder
/// merely opened in the editor is left as it was. A failed write costs the figure only.
pub fn completion_event(root: &Path, kind: &str, id: u64, latency_ms: Option<u64>) {
    if !root.join(".agent-ls").is_dir() {
        return;
    }
    let mut line = json!({"ts": now_ms(), "type": kind, "id": id});
    if let Some(ms) = latency_ms {
        line["latency_ms"] = json!(ms);
    }
    let mut text = line.to_string();
    text.push('\n');
    let written = OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join(COMPLETIONS))
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        tracing::debug!("completion event not recorded: {e}");
    }
}

/// Inline completion's figures over the completions journal.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CompletionStats {
    /// Suggestions answered non-empty.
    pub shown: u64,
    /// Suggestions the user took whole (the item's command ran).
    pub accepted: u64,
    /// Suggestions the user typed the start of (answered from the cache).
    pub partial: u64,
    /// The median and the 90th percentile of a shown suggestion's latency.
    pub latency_p50_ms: Option<u64>,
    pub latency_p90_ms: Option<u64>,
}

/// The figures of `root`'s completions journal (all zero without one).
pub fn completion_stats(root: &Path) -> CompletionStats {
    let path = root.join(COMPLETIONS);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut stats = CompletionStats::default();
    let mut latencies = Vec::new();
    for line in read_lines(&text, &path) {
        match line["type"].as_str() {
            Some("shown") => {
                stats.shown += 1;
                latencies.extend(line["latency_ms"].as_u64());
            }
            Some("accepted") => stats.accepted += 1,
            Some("partial") => stats.partial += 1,
            _ => {}
        }
    }
    latencies.sort_unstable();
    let at = |q: usize| {
        latencies
            .get((latencies.len() * q / 100).min(latencies.len().saturating_sub(1)))
            .copied()
    };
    stats.latency_p50_ms = at(50);
    stats.latency_p90_ms = at(90);
    stats
}

#[cfg(test)]
mod completion_tests {
    use super::*;

    #[test]
    fn completion_events_sum_to_figures_and_need_the_state_folder() {
        let dir = tempfile::tempdir().unwrap();
        completion_event(dir.path(), "shown", 1, Some(10));
        assert!(
            !dir.path().join(COMPLETIONS).exists(),
            "no .agent-ls/, no journal"
        );
        std::fs::create_dir(dir.path().join(".agent-ls")).unwrap();
        for (kind, id, ms) in [
            ("shown", 1, Some(10)),
            ("shown", 2, Some(30)),
            ("shown", 3, Some(20)),
            ("accepted", 1, None),
            ("partial", 2, None),
        ] {
            completion_event(dir.path(), kind, id, ms);
        }
        let s = completion_stats(dir.path());
        assert_eq!((s.shown, s.accepted, s.partial), (3, 1, 1));
        assert_eq!((s.latency_p50_ms, s.latency_p90_ms), (Some(20), Some(30)));
    }
}
