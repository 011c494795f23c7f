//! The change `agent-ls review` and the editor's "review changes" hand the reviewer: git's
//! diff of the user's uncommitted work, staged work, a branch against its base, or a run's
//! change against its checkpoint, with the reviewer's context lines, and each changed file's
//! line count in the working tree. Reads only; it changes nothing.

use std::path::Path;

use agent_ls_core::agent::review::{self, ChangedFile};
use serde::Deserialize;

use super::checkpoint::{RecordedRunError, recorded_run};
use crate::git::{self, GitError, Repo};

/// Which change to review. As a command's argument: `{}` (uncommitted work),
/// `{"staged": true}`, `{"base": "main"}` or `{"run": "run_1234abcd"}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ReviewTarget {
    /// The working tree against HEAD: staged and unstaged changes to tracked files.
    #[default]
    Uncommitted,
    /// The index against HEAD.
    Staged,
    /// HEAD against its merge base with REV (a branch against its base).
    Base(String),
    /// A recorded run's files against its checkpoint.
    Run(String),
}

impl<'de> Deserialize<'de> for ReviewTarget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize, Default)]
        #[serde(default, deny_unknown_fields)]
        struct Raw {
            staged: bool,
            base: Option<String>,
            run: Option<String>,
        }
        let raw = Option::<Raw>::deserialize(d)?.unwrap_or_default();
        Ok(match raw {
            Raw { staged: true, .. } => ReviewTarget::Staged,
            Raw { base: Some(b), .. } => ReviewTarget::Base(b),
            Raw { run: Some(r), .. } => ReviewTarget::Run(r),
            _ => ReviewTarget::Uncommitted,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReviewDiffError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Run(#[from] RecordedRunError),
}

/// The target's diff (paths relative to the workspace `root`) and its changed files.
pub fn review_diff(
    root: &Path,
    target: &ReviewTarget,
) -> Result<(String, Vec<ChangedFile>), ReviewDiffError> {
    let repo = Repo::discover(root)?;
    let bytes = match target {
        ReviewTarget::Run(id) => {
            let run = recorded_run(root, &repo, Some(id))?;
            let names: Vec<String> = run.files.keys().cloned().collect();
            git::checkpoint::diff_with_context(
                &repo,
                &run.checkpoint,
                &names,
                review::CONTEXT_LINES,
            )?
        }
        _ => git_diff(&repo, target)?,
    };
    let diff = String::from_utf8_lossy(&bytes).into_owned();
    let mut files = review::changed_files(&diff);
    for f in &mut files {
        f.lines = std::fs::read_to_string(root.join(&f.path))
            .ok()
            .map(|t| review::line_count(&t));
    }
    Ok((diff, files))
}

fn git_diff(repo: &Repo, target: &ReviewTarget) -> Result<Vec<u8>, GitError> {
    let context = format!("--unified={}", review::CONTEXT_LINES);
    let relative = format!("--relative={}", repo.prefix);
    let mut args = vec![
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        &context,
    ];
    if !repo.prefix.is_empty() {
        args.push(&relative);
    }
    let range;
    match target {
        ReviewTarget::Staged => args.push("--cached"),
        ReviewTarget::Base(rev) => {
            range = format!("{rev}...HEAD");
            args.push(&range);
        }
        ReviewTarget::Uncommitted | ReviewTarget::Run(_) => args.push("HEAD"),
    }
    args.push("--");
    repo.git(None).run(&args, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_argument_names_the_target() {
        let t = |v: serde_json::Value| serde_json::from_value::<ReviewTarget>(v).unwrap();
        assert_eq!(t(serde_json::Value::Null), ReviewTarget::Uncommitted);
        assert_eq!(t(serde_json::json!({})), ReviewTarget::Uncommitted);
        assert_eq!(t(serde_json::json!({"staged": true})), ReviewTarget::Staged);
        assert_eq!(
            t(serde_json::json!({"base": "main"})),
            ReviewTarget::Base("main".into())
        );
        assert_eq!(
            t(serde_json::json!({"run": "run_1"})),
            ReviewTarget::Run("run_1".into())
        );
        assert!(serde_json::from_value::<ReviewTarget>(serde_json::json!({"x": 1})).is_err());
    }
}
