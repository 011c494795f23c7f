//! `workspace/textDocumentContent` (LSP 3.18) for `agent-ls:` URIs: documents an editor opens
//! read-only beside the workspace's files, made from a run's git checkpoint.
//!
//! - `agent-ls:/runs/RUN_ID/checkpoint/PATH`: the file PATH (workspace-relative) as the run's
//!   checkpoint held it, before the run's first write;
//! - `agent-ls:/runs/RUN_ID/diff`: the run's change, its files now against its checkpoint, as
//!   git's unified diff (what `agent-ls.review {"run": RUN_ID}` reviews).
//!
//! It must not write anything: it reads the store and git.

use std::path::Path;

use tower_lsp_server::ls_types::Uri;

use agent_ls_runtime::drive::{RecordedRunError, recorded_run};
use agent_ls_runtime::git::{self, GitError, Repo};

/// The URI scheme of these documents.
pub const SCHEME: &str = "agent-ls";

/// The request that asks for one (LSP 3.18; not in the 3.17 types the server is built on).
pub const METHOD: &str = "workspace/textDocumentContent";

/// A document an `agent-ls:` URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunDocument {
    Diff { run: String },
    Checkpoint { run: String, path: String },
}

#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    #[error(
        "{0} names no agent-ls document: agent-ls:/runs/RUN_ID/diff or agent-ls:/runs/RUN_ID/checkpoint/PATH"
    )]
    NotOurs(String),
    #[error(transparent)]
    Run(#[from] RecordedRunError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(
        "{path} is not in the checkpoint of {run} (the run did not touch it, or it did not exist then)"
    )]
    NotInCheckpoint { run: String, path: String },
    #[error("{0} is not text")]
    NotText(String),
}

/// The document `uri` names.
pub fn parse(uri: &Uri) -> Result<RunDocument, ContentError> {
    let not_ours = || ContentError::NotOurs(uri.as_str().to_string());
    if !uri.scheme().as_str().eq_ignore_ascii_case(SCHEME) {
        return Err(not_ours());
    }
    let segments: Vec<String> = uri
        .path()
        .segments_if_absolute()
        .ok_or_else(not_ours)?
        .map(|s| s.decode().to_string_lossy().into_owned())
        .collect();
    match segments.as_slice() {
        [runs, run, diff] if runs == "runs" && diff == "diff" && !run.is_empty() => {
            Ok(RunDocument::Diff { run: run.clone() })
        }
        [runs, run, checkpoint, path @ ..]
            if runs == "runs"
                && checkpoint == "checkpoint"
                && !run.is_empty()
                && !path.is_empty()
                && path.iter().all(|p| !p.is_empty() && p != "." && p != "..") =>
        {
            Ok(RunDocument::Checkpoint {
                run: run.clone(),
                path: path.join("/"),
            })
        }
        _ => Err(not_ours()),
    }
}

/// The document's text, for the workspace at `root`. Blocking: git and the store.
pub fn read(root: &Path, doc: &RunDocument) -> Result<String, ContentError> {
    let repo = Repo::discover(root)?;
    match doc {
        RunDocument::Diff { run } => {
            let recorded = recorded_run(root, &repo, Some(run))?;
            let names: Vec<String> = recorded.files.keys().cloned().collect();
            let bytes = git::checkpoint::diff(&repo, &recorded.checkpoint, &names)?;
            String::from_utf8(bytes)
                .map_err(|_| ContentError::NotText(format!("the diff of {run}")))
        }
        RunDocument::Checkpoint { run, path } => {
            let recorded = recorded_run(root, &repo, Some(run))?;
            let object = format!("{}:{}", recorded.checkpoint, repo.path(path));
            let bytes = repo
                .git(None)
                .run(&["cat-file", "blob", &object], None)
                .map_err(|_| ContentError::NotInCheckpoint {
                    run: run.clone(),
                    path: path.clone(),
                })?;
            String::from_utf8(bytes).map_err(|_| ContentError::NotText(path.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn doc(uri: &str) -> Result<RunDocument, ContentError> {
        parse(&Uri::from_str(uri).unwrap())
    }

    #[test]
    fn agent_ls_uris_name_a_runs_diff_or_a_file_of_its_checkpoint() {
        assert_eq!(
            doc("agent-ls:/runs/run_1/diff").unwrap(),
            RunDocument::Diff {
                run: "run_1".into()
            }
        );
        assert_eq!(
            doc("agent-ls:///runs/run_1/checkpoint/src/my%20calc.py").unwrap(),
            RunDocument::Checkpoint {
                run: "run_1".into(),
                path: "src/my calc.py".into()
            }
        );
        for bad in [
            "file:///runs/run_1/diff",
            "agent-ls:/runs/run_1",
            "agent-ls:/runs//diff",
            "agent-ls:/runs/run_1/checkpoint/",
            "agent-ls:/runs/run_1/checkpoint/../secret",
            "agent-ls:runs/run_1/diff",
        ] {
            assert!(matches!(doc(bad), Err(ContentError::NotOurs(_))), "{bad}");
        }
    }
}
