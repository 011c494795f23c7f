//! Trying the tester's new tests for real (`Effect::TryTests`): the files of the trial plan
//! are written on disk, the tests run (narrowed to the new test where the runner allows) as
//! many times as the plan says, then on the code after the change when the plan has it, and
//! every file is put back as it was, whatever happens (a guard restores them on drop, so a
//! cancel or a panic does not leave a trial's file behind). It decides nothing: the core's
//! `tester::judge` reads the runs.

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::tests_run::{self, RunEnd, RunError};
use crate::trust::sandbox::Sandbox;
use agent_ls_core::agent::tester::{Trial, TrialError, TrialPlan, Tried};

/// Files as they were before the trial, and the folders it made; put back when dropped.
struct Restore {
    saved: Vec<(PathBuf, Option<Vec<u8>>)>,
    made: Vec<PathBuf>,
}

impl Restore {
    /// Saves `path`'s bytes (or that it did not exist) the first time it is seen.
    fn save(&mut self, path: &Path) {
        if self.saved.iter().any(|(p, _)| p == path) {
            return;
        }
        self.saved
            .push((path.to_path_buf(), std::fs::read(path).ok()));
    }

    /// Makes `dir` and the folders above it that are missing, remembering each one made.
    fn make_dir(&mut self, dir: &Path) -> std::io::Result<()> {
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(dir)?;
        // Outermost first, so they are removed innermost first.
        self.made.extend(missing.into_iter().rev());
        Ok(())
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        // In reverse: the files written last are put back first.
        for (path, bytes) in self.saved.iter().rev() {
            let result = match bytes {
                Some(b) => crate::files::write_atomic(path, b),
                None => match std::fs::remove_file(path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                },
            };
            if let Err(e) = result {
                tracing::error!(path = %path.display(), error = %e, "a trial's file could not be put back");
            }
        }
        // Only while empty: what a test run left there (a cache) keeps its folder.
        for dir in self.made.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Runs the trial `plan` in `root`: the runs before and after, or why they could not be made.
pub(super) async fn try_tests(
    root: &Path,
    config: &Config,
    cancel: &CancellationToken,
    plan: &TrialPlan,
) -> Result<Tried, TrialError> {
    let mut restore = Restore {
        saved: Vec::new(),
        made: Vec::new(),
    };
    write_all(root, &plan.write, &mut restore)?;
    let test = match &plan.filter {
        Some(filter) => match tests_run::narrowed(root, &config.test, filter) {
            Ok(argv) => tests_run::with_command(&config.test, argv),
            // A runner that cannot be narrowed runs everything; the judge looks for the test.
            Err(_) => config.test.clone(),
        },
        None => config.test.clone(),
    };
    let sandbox = Sandbox::from_config(&config.sandbox);
    let mut before = Vec::new();
    for _ in 0..plan.times.max(1) {
        before.push(run_once(root, &test, &sandbox, cancel).await?);
    }
    let after = if plan.after.is_empty() {
        None
    } else {
        write_all(root, &plan.after, &mut restore)?;
        Some(run_once(root, &test, &sandbox, cancel).await?)
    };
    drop(restore);
    Ok(Tried { before, after })
}

/// Writes each file of `files` (`None` deletes it), saving what was there first.
fn write_all(
    root: &Path,
    files: &[(String, Option<String>)],
    restore: &mut Restore,
) -> Result<(), TrialError> {
    for (relative, text) in files {
        let bad = |reason: String| TrialError::BadPath {
            path: relative.clone(),
            reason,
        };
        let relative =
            agent_ls_core::edit::normalize_path(root, relative).map_err(|e| bad(e.to_string()))?;
        if let Some(why) = crate::trust::protected::reason(&relative) {
            return Err(TrialError::Protected {
                path: relative,
                why: why.to_string(),
            });
        }
        let path = crate::files::resolve(root, &relative).map_err(|e| bad(e.to_string()))?;
        restore.save(&path);
        let result = match text {
            Some(t) => {
                if let Some(dir) = path.parent() {
                    restore.make_dir(dir).map_err(|e| TrialError::Folder {
                        path: relative.clone(),
                        reason: e.to_string(),
                    })?;
                }
                crate::files::write_atomic(&path, t.as_bytes())
            }
            None => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
        };
        result.map_err(|e| TrialError::Write {
            path: relative.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(())
}

async fn run_once(
    root: &Path,
    test: &crate::config::TestConfig,
    sandbox: &Sandbox,
    cancel: &CancellationToken,
) -> Result<Trial, TrialError> {
    let r = tests_run::run(root, test, sandbox, cancel)
        .await
        .map_err(|e: RunError| TrialError::Run(e.to_string()))?;
    if r.end == RunEnd::Cancelled {
        return Err(TrialError::Cancelled);
    }
    Ok(Trial {
        passed: r.passed_all(),
        failures: r.failures.clone(),
        report: r.report.clone(),
        problem: r.environment.clone(),
    })
}
