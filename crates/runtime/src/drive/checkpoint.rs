//! The run's git checkpoint: the working tree recorded just before the run's first write (a
//! run that writes nothing leaves no ref behind), and at the run's end what it left in each
//! file it changed, so `agent-ls rollback` can tell a later edit of the user's from its own.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

use super::driver::Drive;
use super::observer::Observer;
use super::shell::Shell;
use crate::git::{self, GitError, Repo};
use agent_ls_core::agent::Event;
use agent_ls_core::agent::review::DiffError;
use agent_ls_core::events::RunEvent;

/// Where a run stands with its checkpoint.
#[derive(Default)]
pub(super) enum GitState {
    /// Nothing written yet.
    #[default]
    NotYet,
    /// Taken: the repository and the checkpoint's commit.
    Taken(Repo, String),
    /// Not in a repository, or turned off, or it failed (said once).
    Without,
}

/// Folders already told they have no checkpoints, so the notice is said once per process.
static TOLD: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

fn first_time(root: &std::path::Path) -> bool {
    let mut told = TOLD.lock().unwrap_or_else(|e| e.into_inner());
    told.get_or_insert_with(HashSet::new)
        .insert(root.to_path_buf())
}

impl Drive<'_> {
    /// Takes the checkpoint before the run's first write.
    pub(super) async fn checkpoint_before_write(
        &self,
        run_id: &str,
        (git, observer): (&mut GitState, &mut Observer<'_>),
        shell: &mut impl Shell,
    ) {
        if !matches!(git, GitState::NotYet) {
            return;
        }
        *git = GitState::Without;
        if !self.config.git.checkpoints {
            return;
        }
        let (root, id, keep) = (
            self.root.to_path_buf(),
            run_id.to_string(),
            self.config.git.keep_checkpoints,
        );
        let taken = tokio::task::spawn_blocking(move || {
            let repo = Repo::discover(&root)?;
            // agent-ls's own state stays out of the checkpoint whoever made `.agent-ls/`.
            let state = root.join(".agent-ls");
            if state.is_dir() {
                crate::store::ignore_state(&state);
            }
            // A resumed run keeps the checkpoint taken before its first write.
            if let Some(commit) = git::checkpoint::existing(&repo, &id) {
                let kept = git::Checkpoint {
                    id: commit,
                    left_out: Vec::new(),
                };
                return Ok((repo, kept));
            }
            let checkpoint = git::checkpoint::take(&repo, &id)?;
            // Older runs' checkpoints beyond the limit go now, as `agent-ls gc` would.
            git::checkpoint::gc(&repo, keep.max(1))?;
            Ok::<_, GitError>((repo, checkpoint))
        })
        .await;
        match taken {
            Ok(Ok((repo, checkpoint))) => {
                if let Some(w) = checkpoint.warning() {
                    shell.warn(&w);
                }
                tracing::info!(checkpoint = %checkpoint.id, "git checkpoint taken");
                observer.git_checkpoint(&checkpoint.id);
                observer.record(RunEvent::Checkpoint {
                    commit: checkpoint.id.clone(),
                    left_out: checkpoint.left_out.iter().map(|(p, _)| p.clone()).collect(),
                });
                *git = GitState::Taken(repo, checkpoint.id);
            }
            Ok(Err(GitError::NotARepo(_))) => {
                if first_time(self.root) {
                    let m = "not a git repository: no checkpoint of the whole tree; agent-ls undo still undoes each step";
                    tracing::info!("{m}");
                    shell.progress(m);
                }
            }
            Ok(Err(e)) => shell.warn(&format!("no git checkpoint for this run: {e}")),
            Err(e) => shell.warn(&format!("no git checkpoint for this run: {e}")),
        }
    }

    /// At the run's end: what it left in each file it changed, recorded with the run. Returns
    /// the branch the repository is on.
    pub(super) async fn record_run_files(
        &self,
        (git, observer): (&GitState, &mut Observer<'_>),
        files: &[String],
    ) -> Option<String> {
        let GitState::Taken(repo, _) = git else {
            return None;
        };
        let (repo, files) = (repo.clone(), files.to_vec());
        let now = tokio::task::spawn_blocking(move || {
            let branch = git::commit::current_branch(&repo);
            (git::checkpoint::files_now(&repo, &files), branch)
        })
        .await;
        let (now, branch) = match now {
            Ok((now, branch)) => (now, branch),
            Err(e) => {
                tracing::warn!("the run's files could not be recorded: {e}");
                return None;
            }
        };
        match now {
            Ok(now) => match serde_json::to_string(&now) {
                Ok(json) => observer.git_files(json),
                Err(e) => tracing::warn!("the run's files could not be recorded: {e}"),
            },
            Err(e) => tracing::warn!("the run's files could not be recorded: {e}"),
        }
        branch
    }
}

impl Drive<'_> {
    /// The run's git diff against its checkpoint, with a reviewer's context lines: `None`
    /// when the run has no checkpoint (the steps' diff is reviewed instead).
    pub(super) async fn run_diff(&self, git: &GitState, files: Vec<String>) -> Event {
        let GitState::Taken(repo, checkpoint) = git else {
            return Event::RunDiff(Ok(None));
        };
        let (repo, checkpoint) = (repo.clone(), checkpoint.clone());
        let context = agent_ls_core::agent::review::CONTEXT_LINES;
        let diff = tokio::task::spawn_blocking(move || {
            git::checkpoint::diff_with_context(&repo, &checkpoint, &files, context)
        })
        .await;
        Event::RunDiff(match diff {
            Ok(Ok(bytes)) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Ok(Err(e)) => Err(DiffError::Git(e.to_string())),
            Err(e) => Err(DiffError::Thread(e.to_string())),
        })
    }
}

impl GitState {
    /// The checkpoint's commit id, when one was taken.
    pub(super) fn id(&self) -> Option<String> {
        match self {
            GitState::Taken(_, id) => Some(id.clone()),
            _ => None,
        }
    }
}

/// A recorded run's checkpoint and what it left in each file it changed: what every front end
/// needs for `diff`, `rollback` and `commit`.
#[derive(Debug, Clone)]
pub struct RecordedRun {
    pub run_id: String,
    /// The checkpoint's commit id.
    pub checkpoint: String,
    /// What the run left in each file it changed.
    pub files: git::RunFiles,
    /// The run did not finish: its files are known from its recorded steps instead.
    pub interrupted: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordedRunError {
    #[error(transparent)]
    Resume(#[from] super::ResumeError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("run {0} has no git checkpoint (it wrote nothing, or not in a git repository)")]
    NoCheckpoint(String),
    #[error("there is no run {0} here; `agent-ls runs` lists this workspace's runs")]
    Unknown(String),
    #[error("no run has a git checkpoint here yet")]
    NoneYet,
    #[error("the files run {0} changed are unreadable in the store: {1}")]
    Unreadable(String, serde_json::Error),
    #[error(transparent)]
    Git(#[from] GitError),
}

/// The run `run` (default: the latest with a checkpoint) in the workspace at `root`. A run
/// that did not finish (killed, or the machine went down) has no record of what it left, so
/// that is rebuilt from the steps it recorded: the text each file had after its last step
/// that was not undone.
pub fn recorded_run(
    root: &std::path::Path,
    repo: &Repo,
    run: Option<&str>,
) -> Result<RecordedRun, RecordedRunError> {
    let store = super::recorded_store(root)?;
    let Some((run_id, checkpoint, files)) = store.git_run(run)? else {
        return Err(match run {
            Some(r) if store.resume_point(r)?.is_none() => RecordedRunError::Unknown(r.to_string()),
            Some(r) => RecordedRunError::NoCheckpoint(r.to_string()),
            None => RecordedRunError::NoneYet,
        });
    };
    if let Some(files) = files {
        let files = serde_json::from_str(&files)
            .map_err(|e| RecordedRunError::Unreadable(run_id.clone(), e))?;
        return Ok(RecordedRun {
            run_id,
            checkpoint,
            files,
            interrupted: false,
        });
    }
    let mut last: std::collections::BTreeMap<String, String> = Default::default();
    for (step, undone) in store.load_steps()? {
        if step.run_id != run_id || undone {
            continue;
        }
        for change in step.changes {
            last.insert(change.path, change.new_text);
        }
    }
    let mut files = git::RunFiles::new();
    for (path, text) in last {
        let id = repo
            .git(None)
            .run_in(&["hash-object", "--no-filters", "--stdin"], text.as_bytes())?;
        files.insert(path, Some(String::from_utf8_lossy(&id).trim().to_string()));
    }
    Ok(RecordedRun {
        run_id,
        checkpoint,
        files,
        interrupted: true,
    })
}
