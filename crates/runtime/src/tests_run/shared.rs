//! The workspace's latest test result, shared by every agent-ls serving it: two editor
//! windows on one folder are two servers, and each publishes the other's runs too. The file
//! (`.agent-ls/tests/latest.json`) is written whole and renamed into place, so a reader sees
//! an old result or a new one, never half of one.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::RunResult;

/// The latest result and who wrote it (`writer`: an id each server makes for itself, so it
/// can tell its own runs from another window's).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Latest {
    pub writer: String,
    pub result: RunResult,
}

/// Why the shared result could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode the test result: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Where the latest result of `root` is kept.
pub fn path(root: &Path) -> PathBuf {
    root.join(".agent-ls").join("tests").join("latest.json")
}

/// An id for this server among those sharing the workspace.
pub fn writer_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// Records `result` as the workspace's latest, written by `writer`.
pub fn write(root: &Path, writer: &str, result: &RunResult) -> Result<(), SharedError> {
    let target = path(root);
    let io = |source| SharedError::Write {
        path: target.clone(),
        source,
    };
    let dir = target.parent().unwrap_or(root);
    std::fs::create_dir_all(dir).map_err(io)?;
    let body = serde_json::to_vec(&Latest {
        writer: writer.to_string(),
        result: result.clone(),
    })?;
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    std::io::Write::write_all(&mut file, &body).map_err(io)?;
    file.persist(&target).map_err(|e| io(e.error))?;
    Ok(())
}

/// The workspace's latest result, when there is one that reads; a file another version
/// wrote, or one cut short, is no result.
pub fn read(root: &Path) -> Option<Latest> {
    let text = std::fs::read(path(root)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// When the latest result was last written: a watcher compares it to know a new one came.
pub fn modified(root: &Path) -> Option<SystemTime> {
    std::fs::metadata(path(root)).ok()?.modified().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests_run::{Failure, Format, Location, RunEnd, TestCommand};

    #[test]
    fn a_result_written_reads_back_with_its_writer() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).is_none());
        let result = RunResult {
            command: TestCommand {
                argv: vec!["pytest".into()],
                reason: "configured".into(),
            },
            end: RunEnd::Exited { code: 1 },
            duration_ms: 12,
            format: Format::Pytest,
            failures: vec![Failure {
                test_id: "test_calc.py::test_add".into(),
                location: Some(Location {
                    file: "calc.py".into(),
                    line: 2,
                    column: None,
                }),
                message: "assert -1 == 3".into(),
                frames: Vec::new(),
            }],
            passed: Some(1),
            failed: Some(1),
            report: "1 failed".into(),
            output: "1 failed".into(),
            environment: None,
            running: None,
            reached: None,
        };
        write(dir.path(), "a", &result).unwrap();
        let latest = read(dir.path()).unwrap();
        assert_eq!(latest.writer, "a");
        assert_eq!(latest.result.failures, result.failures);
        assert_eq!(latest.result.end, result.end);
        assert!(modified(dir.path()).is_some());
        std::fs::write(path(dir.path()), "{\"writer\": ").unwrap();
        assert!(read(dir.path()).is_none());
    }
}
