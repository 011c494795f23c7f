//! A rollback as every surface makes it (the CLI, the editor, ACP, MCP): which run or
//! checkpoint it concerns, what each file becomes, and the decisions, written once: a file
//! changed since the run, a file the checkpoint left out, and a second rollback of the same
//! run are refusals a user overrides by forcing; a file already back is left alone. After
//! the files are back, `settle` records it: the run's steps are undone (so `undo` does not
//! take them back a second time), the rollback is remembered (so a second one knows the
//! changes it finds are the user's) and memory learns the fix did not stay. How the files are
//! written is the front end's: the disk here (`write`), an editor's WorkspaceEdit, an ACP
//! client's `fs/write_text_file`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::MemoryConfig;
use crate::drive::{RecordedRunError, recorded_run, recorded_store};
use crate::git::checkpoint::{self, RollbackError, RollbackPlan};
use crate::git::{GitError, Repo, isolate, since};
use crate::store::StoreError;

/// Where a checkpoint taken through MCP is named: `refs/agent-ls/checkpoints/mcp_<hex>`.
pub const CHECKPOINT_PREFIX: &str = "mcp_";

/// What to roll back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A recorded run (default: the latest with a checkpoint).
    Run(Option<String>),
    /// A checkpoint taken through MCP: every file changed since, whoever changed it.
    Checkpoint(String),
    /// Whichever is newer: the latest run with a checkpoint, or the latest MCP checkpoint.
    Newest,
}

impl Target {
    /// The target named `id` (a run, or an MCP checkpoint), or the newest when none.
    pub fn named(id: Option<String>) -> Target {
        match id {
            Some(id) if id.starts_with(CHECKPOINT_PREFIX) => Target::Checkpoint(id),
            Some(id) => Target::Run(Some(id)),
            None => Target::Newest,
        }
    }
}

/// Why nothing was rolled back. The first three are refusals forcing overrides; each surface
/// says how to force in its own words (`--force`, `force: true`, `/rollback force`, a
/// second button).
#[derive(Debug, thiserror::Error)]
pub enum NotRolledBack {
    #[error("changed since the run: {}; rolling back would lose those changes", .files.join(", "))]
    ChangedSince { id: String, files: Vec<String> },
    #[error("not in the checkpoint (too big, left out): {}; forcing rolls back the other files", .files.join(", "))]
    LeftOut { id: String, files: Vec<String> },
    #[error(
        "{id} was rolled back already, and {} changed since (made again by hand?); a second rollback would throw those changes away",
        .files.join(", ")
    )]
    Again { id: String, files: Vec<String> },
    #[error("there is no checkpoint {0} (dropped by `agent-ls gc`?)")]
    NoCheckpoint(String),
    #[error(
        "run {id} worked in the worktree {}, not in these files: roll it back there (`agent-ls rollback --workspace {}`)",
        .home.display(), .home.display()
    )]
    Elsewhere { id: String, home: PathBuf },
    #[error(transparent)]
    Recorded(#[from] RecordedRunError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Rollback(#[from] RollbackError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl NotRolledBack {
    /// A refusal that forcing overrides: the run or checkpoint and the files it names.
    pub fn refusal(&self) -> Option<(&str, &[String])> {
        match self {
            NotRolledBack::ChangedSince { id, files }
            | NotRolledBack::LeftOut { id, files }
            | NotRolledBack::Again { id, files } => Some((id, files)),
            _ => None,
        }
    }
}

/// A rollback decided but not written.
#[derive(Debug, Clone)]
pub struct Planned {
    pub repo: Repo,
    /// Where the run's store is: the workspace, or the worktree an isolated run worked in.
    pub home: PathBuf,
    /// The run's id, or the MCP checkpoint's.
    pub id: String,
    /// The checkpoint's commit.
    pub checkpoint: String,
    /// The run did not finish: its files are taken from the steps it recorded.
    pub interrupted: bool,
    /// The files to write back, without those already back (`already`).
    pub plan: RollbackPlan,
    /// Files that hold the checkpoint's content already: left alone.
    pub already: Vec<String>,
    /// When an MCP checkpoint was taken (ms): the steps recorded since are what it undoes.
    since_ms: Option<i64>,
}

impl Planned {
    /// The files it writes or deletes.
    pub fn files(&self) -> Vec<String> {
        self.plan.files.iter().map(|(f, _)| f.clone()).collect()
    }
}

/// `plan` for a front end that writes the files of `root` itself (an editor, an ACP client):
/// a run that worked in a worktree of its own is refused here, since its files are not these.
pub fn plan_here(
    root: &Path,
    target: &Target,
    force: bool,
    texts: &BTreeMap<String, Vec<u8>>,
) -> Result<Planned, NotRolledBack> {
    let planned = plan(root, target, force, texts)?;
    if planned.home != root {
        let (id, home) = (planned.id, planned.home);
        return Err(NotRolledBack::Elsewhere { id, home });
    }
    Ok(planned)
}

/// Decides the rollback of `target` in the workspace at `root`, comparing files as `texts`
/// (an editor's or ACP client's buffers) or else the disk has them. Blocking: git and files.
pub fn plan(
    root: &Path,
    target: &Target,
    force: bool,
    texts: &BTreeMap<String, Vec<u8>>,
) -> Result<Planned, NotRolledBack> {
    let target = match target {
        Target::Newest => newest(root)?,
        t => t.clone(),
    };
    let (home, repo, id, commit, left, interrupted, since_ms) = match target {
        Target::Checkpoint(id) => {
            let repo = Repo::discover(root)?;
            let commit = checkpoint::existing(&repo, &id)
                .ok_or_else(|| NotRolledBack::NoCheckpoint(id.clone()))?;
            let left = since::changed(&repo, &commit)?;
            let since = checkpoint::taken_at(&repo, &commit).map(|t| t as i64);
            (root.to_path_buf(), repo, id, commit, left, false, since)
        }
        other => {
            let run = match other {
                Target::Run(run) => run,
                _ => None,
            };
            let home = home_of(root, run.as_deref());
            let repo = Repo::discover(&home)?;
            let r = recorded_run(&home, &repo, run.as_deref())?;
            (
                home,
                repo,
                r.run_id,
                r.checkpoint,
                r.files,
                r.interrupted,
                None,
            )
        }
    };
    let mut plan = checkpoint::plan_rollback(&repo, &commit, &left)?;
    if !plan.left_out.is_empty() && !force {
        let files = plan.left_out.clone();
        return Err(NotRolledBack::LeftOut { id, files });
    }
    let already = plan.take_restored(&repo, texts);
    let names: Vec<String> = plan.files.iter().map(|(f, _)| f.clone()).collect();
    if !names.is_empty() && !force {
        // Rolled back before: what differs from the checkpoint now was made since, by hand,
        // even when it is the run's change made again.
        if rolled_back(&home, &id)? {
            return Err(NotRolledBack::Again { id, files: names });
        }
        let changed = checkpoint::changed_since(&repo, &left, &names, texts)?;
        if !changed.is_empty() {
            return Err(NotRolledBack::ChangedSince { id, files: changed });
        }
    }
    Ok(Planned {
        repo,
        home,
        id,
        checkpoint: commit,
        interrupted,
        plan,
        already,
        since_ms,
    })
}

/// Writes a planned rollback on disk (the CLI's and MCP's way); the files written.
pub fn write(planned: &Planned) -> Result<Vec<String>, NotRolledBack> {
    Ok(checkpoint::apply(&planned.repo, &planned.plan)?)
}

/// After the files are back: the rollback is remembered, the steps it took back are marked
/// undone (their ids returned, so an editor's history follows), and memory learns the fix
/// did not stay. Memory never fails a rollback; the store's answer is returned.
pub fn settle(planned: &Planned, memory: &MemoryConfig) -> Result<Vec<u64>, NotRolledBack> {
    let (store, _) = crate::store::Store::open(&planned.home)?;
    store.record_rollback(&planned.id)?;
    // A file left as it was (left out of the checkpoint, under force) keeps its steps.
    let restored = |path: &str| {
        planned.plan.files.iter().any(|(f, _)| f == path)
            || planned.already.iter().any(|f| f == path)
    };
    let undone = store.undo_steps(&planned.id, planned.since_ms, &restored)?;
    crate::memory::note_rollback(&planned.home, memory, &planned.id);
    Ok(undone)
}

/// Whether run `id`, recorded under `root` (or one of its worktrees), was rolled back and
/// not redone since, as the store recorded it from any surface.
pub fn was_rolled_back(root: &Path, id: &str) -> bool {
    rolled_back(&home_of(root, Some(id)), id).unwrap_or(false)
}

/// Whether `id` was rolled back before (and not redone since).
fn rolled_back(home: &Path, id: &str) -> Result<bool, NotRolledBack> {
    match recorded_store(home) {
        Ok(store) => Ok(store.rolled_back(id)?),
        // No store: nothing was ever recorded here, so no rollback either.
        Err(_) => Ok(false),
    }
}

/// The newer of the latest run with a checkpoint and the latest MCP checkpoint.
fn newest(root: &Path) -> Result<Target, NotRolledBack> {
    let repo = Repo::discover(root)?;
    let home = home_of(root, None);
    let run = recorded_store(&home)
        .ok()
        .and_then(|s| s.git_run_started(None).ok().flatten());
    let prefix = format!("{}{CHECKPOINT_PREFIX}", checkpoint::REFS);
    let mcp = checkpoint::list(&repo)?
        .into_iter()
        .find(|(name, _, _)| name.starts_with(&prefix))
        .map(|(name, _, at)| (name[checkpoint::REFS.len()..].to_string(), at as i64));
    Ok(match (run, mcp) {
        (Some(started), Some((id, taken))) if taken > started => Target::Checkpoint(id),
        (None, Some((id, _))) => Target::Checkpoint(id),
        _ => Target::Run(None),
    })
}

/// Where run `run` (default: the latest with a checkpoint) kept its store: the workspace, or
/// the worktree an isolated run worked in, whichever has the newest such run.
pub fn home_of(root: &Path, run: Option<&str>) -> PathBuf {
    let prefix = Repo::discover(root).map(|r| r.prefix).unwrap_or_default();
    let mut best: Option<(i64, PathBuf)> = None;
    for home in std::iter::once(root.to_path_buf()).chain(isolate::run_roots(root, &prefix)) {
        let started = recorded_store(&home)
            .ok()
            .and_then(|s| s.git_run_started(run).ok().flatten());
        if let Some(ms) = started
            && best.as_ref().is_none_or(|(b, _)| ms > *b)
        {
            best = Some((ms, home));
        }
    }
    best.map_or_else(|| root.to_path_buf(), |(_, home)| home)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::{self, StepError};
    use agent_ls_core::edit::Limits;

    /// `git ARGS` in `dir`, as a user runs it.
    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
            .args(args)
            .env_remove("GIT_INDEX_FILE")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    const BEFORE: &str = "def add(a, b):\n    return a - b\n";
    const AFTER: &str = "def add(a, b):\n    return a + b\n";

    /// A repository where run `run_1` fixed calc.py, as the driver records a run: its
    /// checkpoint first, its step, then what it left in the file.
    fn fixed_by_a_run() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q", "-b", "main"]);
        std::fs::write(root.join("calc.py"), BEFORE).unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "start"]);
        let repo = Repo::discover(root).unwrap();
        let (store, _) = crate::store::Store::open(root).unwrap();
        store.run_started("run_1", "fix add", None).unwrap();
        let taken = checkpoint::take(&repo, "run_1").unwrap();
        store.git_checkpoint("run_1", &taken.id).unwrap();
        std::fs::write(root.join("calc.py"), AFTER).unwrap();
        let change = agent_ls_core::edit::change_between("calc.py", Some(BEFORE), AFTER);
        steps::record(root, vec![change], "run_1", "fix add").unwrap();
        let files = checkpoint::files_now(&repo, &["calc.py".to_string()]).unwrap();
        let json = serde_json::to_string(&files).unwrap();
        store.git_files("run_1", &json).unwrap();
        dir
    }

    fn roll_back(root: &Path, target: &Target, force: bool) -> Result<Planned, NotRolledBack> {
        let planned = plan(root, target, force, &BTreeMap::new())?;
        write(&planned)?;
        settle(&planned, &MemoryConfig::default())?;
        Ok(planned)
    }

    #[test]
    fn a_rollback_undoes_the_runs_steps_and_a_second_one_keeps_a_change_made_again() {
        let dir = fixed_by_a_run();
        let root = dir.path();
        let read = || std::fs::read_to_string(root.join("calc.py")).unwrap();
        let done = roll_back(root, &Target::Run(None), false).unwrap();
        assert_eq!(
            (done.id.as_str(), done.files()),
            ("run_1", vec!["calc.py".into()])
        );
        assert_eq!(read(), BEFORE);
        // The run's step is undone with it: undo has nothing of the run's left to take back.
        let undo = steps::undo(root, None, &Limits::default());
        assert!(matches!(undo, Err(StepError::NothingToUndo)), "{undo:?}");
        // Rolled back again at once: nothing to do, nothing refused.
        let again = plan(root, &Target::Run(None), false, &BTreeMap::new()).unwrap();
        assert_eq!(
            (again.files(), again.already.clone()),
            (vec![], vec!["calc.py".into()])
        );
        // The user makes the same change by hand: a second rollback is refused, naming it,
        // and the file keeps the user's text.
        std::fs::write(root.join("calc.py"), AFTER).unwrap();
        let refused = roll_back(root, &Target::Run(None), false).unwrap_err();
        assert!(matches!(&refused, NotRolledBack::Again { files, .. } if files == &["calc.py"]));
        assert!(
            refused.to_string().contains("rolled back already"),
            "{refused}"
        );
        assert_eq!(read(), AFTER);
        // Forced, it goes.
        roll_back(root, &Target::Run(None), true).unwrap();
        assert_eq!(read(), BEFORE);
        // Redone, the run is applied again: its rollback is a first one once more.
        steps::redo(root, &Limits::default()).unwrap();
        assert_eq!(read(), AFTER);
        roll_back(root, &Target::Run(None), false).unwrap();
        assert_eq!(read(), BEFORE);
    }

    #[test]
    fn a_file_changed_since_the_run_is_refused_and_the_buffer_counts() {
        let dir = fixed_by_a_run();
        let root = dir.path();
        let mut texts = BTreeMap::new();
        texts.insert("calc.py".to_string(), b"typed, unsaved\n".to_vec());
        let refused = plan(root, &Target::Run(None), false, &texts).unwrap_err();
        assert!(
            matches!(&refused, NotRolledBack::ChangedSince { id, files } if id == "run_1" && files == &["calc.py"]),
            "{refused}"
        );
        assert!(plan(root, &Target::Run(None), false, &BTreeMap::new()).is_ok());
    }

    #[test]
    fn the_newest_of_a_run_and_a_checkpoint_is_what_a_bare_rollback_takes() {
        let dir = fixed_by_a_run();
        let root = dir.path();
        assert_eq!(newest(root).unwrap(), Target::Run(None));
        // A checkpoint taken after the run, then an edit: the bare rollback undoes the edit,
        // not the run.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let repo = Repo::discover(root).unwrap();
        checkpoint::take(&repo, "mcp_0000beef").unwrap();
        std::fs::write(root.join("new.py"), "x = 1\n").unwrap();
        assert_eq!(
            newest(root).unwrap(),
            Target::Checkpoint("mcp_0000beef".into())
        );
        let done = roll_back(root, &Target::Newest, false).unwrap();
        assert_eq!(
            (done.id.as_str(), done.files()),
            ("mcp_0000beef", vec!["new.py".into()])
        );
        assert!(!root.join("new.py").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("calc.py")).unwrap(),
            AFTER
        );
        assert_eq!(
            Target::named(Some("run_1".into())),
            Target::Run(Some("run_1".into()))
        );
    }
}
