//! What the coverage runs of every language share: why one found nothing (`LocateError`),
//! running a command of agent-ls's own under the test policy (`coverage_run`), and choosing
//! and running tests one at a time within one timeout (`sample`, `probe_each`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_ls_core::locate::TestLines;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::tests_run::{self, RunEnd, RunError, RunResult};
use crate::trust::sandbox::Sandbox;

/// The most tests run one at a time under coverage (node, go): up to `MAX_FAILING` failing
/// ones, then passing ones, those beside a failing one (its file, its package) first. All of
/// them share one `test.timeout_secs`: the ones not started when it is spent are left out.
pub const MAX_RUNS: usize = 12;
pub const MAX_FAILING: usize = 4;

/// Why no suspects were found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    /// The test command's ecosystem has no coverage agent-ls reads, or its tool is missing.
    #[error("{lacks} (the test command: `{command}`)")]
    NoTool { command: String, lacks: String },
    #[error("the coverage run could not start: {0}")]
    Run(#[from] RunError),
    #[error("the coverage run left no record ({0}); its output: {1}")]
    NoRecord(String, String),
    #[error("cannot write the coverage folder {}: {}", .0.display(), .1)]
    Write(PathBuf, std::io::Error),
    #[error("the coverage run was cancelled")]
    Cancelled,
}

/// Writes a file that must not exist yet (never through a link).
pub(super) fn new_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(text.as_bytes())
}

/// A command of agent-ls's own making run under the test policy: the configured test
/// command was allowed (`locate` checked it), and this one may run only as its own program
/// and subcommand (`node --test`, `go test`, the interpreter with the tracer). `extra` is set
/// beside the allowlisted environment.
pub(super) async fn coverage_run(
    root: &Path,
    config: &Config,
    argv: Vec<String>,
    extra: Vec<(String, String)>,
    cancel: &CancellationToken,
) -> Result<(RunResult, String), LocateError> {
    let mut test = tests_run::with_command(&config.test, argv.clone());
    test.allowlist = vec![argv.iter().take(2).cloned().collect::<Vec<_>>().join(" ")];
    let sandbox = Sandbox::from_config(&config.sandbox);
    let (result, output) = tests_run::run_with_env(root, &test, &sandbox, cancel, &extra).await?;
    if result.end == RunEnd::Cancelled {
        return Err(LocateError::Cancelled);
    }
    Ok((result, output))
}

/// One test to run alone under coverage.
pub(super) struct Probe {
    pub test: String,
    /// Where it lives (its file, its package): passing tests beside a failing one come first.
    pub group: String,
    pub failed: bool,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// The tests to run alone, at most `MAX_RUNS`: up to `MAX_FAILING` failing ones, then the
/// passing ones beside them, then the others, each in the order the runner listed them.
pub(super) fn sample(probes: Vec<Probe>) -> Vec<Probe> {
    let (failing, passing): (Vec<Probe>, Vec<Probe>) = probes.into_iter().partition(|p| p.failed);
    let mut chosen: Vec<Probe> = failing.into_iter().take(MAX_FAILING).collect();
    let groups: BTreeSet<String> = chosen.iter().map(|p| p.group.clone()).collect();
    let (near, far): (Vec<Probe>, Vec<Probe>) =
        passing.into_iter().partition(|p| groups.contains(&p.group));
    let room = MAX_RUNS.saturating_sub(chosen.len());
    chosen.extend(near.into_iter().chain(far).take(room));
    chosen
}

/// The lines one test run executed, by workspace file.
pub(super) type Lines = BTreeMap<String, BTreeSet<u32>>;

/// Runs each probe alone (the `i`th's record read by `lines_of(i)` after it ended), within
/// one `test.timeout_secs` for them all: each run's timeout is what is left of it.
pub(super) async fn probe_each(
    root: &Path,
    config: &Config,
    probes: Vec<Probe>,
    cancel: &CancellationToken,
    lines_of: &(dyn Fn(usize) -> Lines + Sync),
) -> Result<Vec<TestLines>, LocateError> {
    let until = Instant::now() + Duration::from_secs(config.test.timeout_secs);
    let mut runs = Vec::new();
    for (i, p) in probes.into_iter().enumerate() {
        if cancel.is_cancelled() {
            return Err(LocateError::Cancelled);
        }
        let left = until.saturating_duration_since(Instant::now()).as_secs();
        if left == 0 {
            break;
        }
        let mut limited = config.clone();
        limited.test.timeout_secs = left;
        coverage_run(root, &limited, p.argv, p.env, cancel).await?;
        runs.push(TestLines {
            test: p.test,
            failed: p.failed,
            lines: lines_of(i),
        });
    }
    Ok(runs)
}

/// A workspace file's path from an absolute one, when it is the project's own: not under
/// `node_modules`, a virtualenv, `vendor` or agent-ls's folder.
pub(super) fn own_file(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let rel = rel.to_str()?.replace('\\', "/");
    let skipped = [
        "node_modules",
        ".agent-ls",
        ".venv",
        "venv",
        "vendor",
        ".git",
    ];
    if rel.split('/').any(|d| skipped.contains(&d)) {
        return None;
    }
    Some(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(test: &str, group: &str, failed: bool) -> Probe {
        Probe {
            test: test.into(),
            group: group.into(),
            failed,
            argv: Vec::new(),
            env: Vec::new(),
        }
    }

    #[test]
    fn the_sample_takes_failing_tests_then_their_neighbours_within_the_cap() {
        let mut all = vec![probe("far", "b", false)];
        for i in 0..20 {
            all.push(probe(&format!("pass{i}"), "a", false));
            all.push(probe(&format!("fail{i}"), "a", true));
        }
        let chosen = sample(all);
        assert_eq!(chosen.len(), MAX_RUNS);
        assert_eq!(chosen.iter().filter(|p| p.failed).count(), MAX_FAILING);
        assert_eq!(chosen[MAX_FAILING].test, "pass0");
        // The passing test of another file comes after those beside the failing ones.
        assert!(chosen.iter().all(|p| p.test != "far"));
        let few = sample(vec![probe("far", "b", false), probe("f", "a", true)]);
        assert_eq!(
            few.iter().map(|p| p.test.as_str()).collect::<Vec<_>>(),
            ["f", "far"]
        );
    }

    #[test]
    fn only_the_projects_own_files_count() {
        let root = Path::new("/ws");
        assert_eq!(
            own_file(root, Path::new("/ws/src/a.js")).as_deref(),
            Some("src/a.js")
        );
        assert_eq!(own_file(root, Path::new("/ws/node_modules/x/a.js")), None);
        assert_eq!(own_file(root, Path::new("/elsewhere/a.js")), None);
    }
}
