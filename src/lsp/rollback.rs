//! `agent-ls.rollback`: a whole run rolled back to its git checkpoint from the editor
//! (docs/git.md). The plan comes from the checkpoint (`git::checkpoint::plan_rollback`); a
//! file the user changed since the run, in an open buffer (saved or not) or on disk, is a
//! refusal unless forced. Text files go back through workspace/applyEdit like an undo, so
//! unsaved buffers and the editor's own undo stay right; files the run created are deleted
//! with a `DeleteFile` when the client can; what an editor cannot hold (binary files,
//! symbolic links, a file the client cannot create) is written on disk by the server.
//!
//! All of it runs in a job of its own: git and the files are read here, never on the
//! session's task.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::json;
use tokio::sync::oneshot;

use super::connection::{AgentMessage, Connection, Snapshot};
use super::jobs;
use super::refused::Refused;
use super::shell;
use agent_ls_core::edit::{self, FileChange, FileText};
use agent_ls_runtime::drive::{RecordedRunError, recorded_run};
use agent_ls_runtime::files;
use agent_ls_runtime::git::checkpoint::{self, Restore, RollbackPlan};
use agent_ls_runtime::git::{GitError, Repo};
use agent_ls_runtime::lock::RunLock;

/// Why a rollback from the editor did not go through, or (for the run that just ended, rolled
/// back at its review question) was refused.
#[derive(Debug, thiserror::Error)]
pub enum NotRolledBack {
    /// Refused by the checkpoint's plan: files changed since the run, or left out of it.
    #[error("{0}")]
    Refused(String),
    /// Refused: these files no longer hold what the run left.
    #[error("changed since the run: {}", .0.join(", "))]
    ChangedSince(Vec<String>),
    #[error("{path}: {why}")]
    Unreadable { path: String, why: String },
    /// The editor or the disk did not take the restore.
    #[error("{0}")]
    Apply(String),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Record(#[from] RecordedRunError),
    #[error(transparent)]
    Checkpoint(#[from] checkpoint::RollbackError),
    #[error("{file}: {source}")]
    Executable {
        file: String,
        source: std::io::Error,
    },
    /// The blocking job that reads or writes git did not finish.
    #[error("{0}")]
    Job(#[from] tokio::task::JoinError),
    /// The rollback job itself failed (it panicked, or could not restore).
    #[error(transparent)]
    Failed(#[from] Refused),
}

/// Arguments of `agent-ls.rollback`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RollbackArgs {
    /// The run to roll back (default: the latest run with a checkpoint).
    #[serde(default)]
    pub run: Option<String>,
    /// Roll back even files changed since the run (the second confirmation).
    #[serde(default)]
    pub force: bool,
}

/// What a rollback needs, taken from the session when it starts.
pub struct RollbackStart {
    pub args: RollbackArgs,
    pub snapshot: Snapshot,
    pub connection: Connection,
    pub limits: edit::Limits,
    /// The command's answer: `{run_id, rolled_back}`, `{run_id, refused, changed}`, or why not.
    pub reply: oneshot::Sender<Result<serde_json::Value, Refused>>,
    pub lock: RunLock,
}

/// The run and its plan, read from git and the store.
struct Planned {
    repo: Repo,
    run_id: String,
    checkpoint: String,
    interrupted: bool,
    plan: RollbackPlan,
    /// Files whose content (buffer or disk) differs from what the run left, and from what the
    /// checkpoint holds.
    changed: Vec<String>,
    /// Files that already hold what the checkpoint has (rolled back before): left alone.
    already: Vec<String>,
}

/// How each file of the plan goes back.
#[derive(Default)]
struct Ways {
    /// Through workspace/applyEdit.
    edits: Vec<FileChange>,
    /// Files the run created: deleted.
    deletes: Vec<String>,
    /// Written on disk by the server (binary, symbolic links, not creatable by the client).
    disk: Vec<(String, Restore)>,
    /// Text files whose checkpoint mode is executable: the bit is set again on disk.
    executable: Vec<String>,
}

/// Starts the rollback on a task of its own, under the panic guard; the session hears of its
/// end whatever happens, and the command's answer waits until the files are back.
pub fn spawn_rollback(r: RollbackStart) {
    tokio::spawn(async move {
        let report = r.connection.report.clone();
        let (reply, lock) = (r.reply, r.lock);
        let job = rollback(r.args, r.snapshot, r.connection, r.limits);
        let (run_id, answer) = match jobs::caught(jobs::Kind::Rollback, job).await {
            Ok(done) => done,
            Err(panicked) => (None, Err(Refused::Panicked(panicked))),
        };
        drop(lock);
        let files = answer.as_ref().ok().and_then(|v| v.get("rolled_back"));
        report(AgentMessage::RollbackFinished {
            run_id,
            rolled_back: files.is_some(),
            changed: files
                .and_then(|f| f.as_array())
                .is_some_and(|f| !f.is_empty()),
        });
        let _ = reply.send(answer);
    });
}

/// The rollback itself; returns the run it concerned (when known) and the command's answer.
async fn rollback(
    args: RollbackArgs,
    snapshot: Snapshot,
    c: Connection,
    limits: edit::Limits,
) -> (Option<String>, Result<serde_json::Value, Refused>) {
    jobs::injected_panic(jobs::Kind::Rollback);
    let texts: BTreeMap<String, Vec<u8>> = snapshot
        .iter()
        .map(|(rel, (_, b))| (rel.clone(), b.text().into_bytes()))
        .collect();
    let root = c.root.clone();
    let planned =
        tokio::task::spawn_blocking(move || plan(&root, args.run.as_deref(), &texts)).await;
    let p = match planned.map_err(NotRolledBack::from).and_then(|p| p) {
        Ok(p) => p,
        Err(why) => return (None, Err(Refused::Failed(why.to_string()))),
    };
    let run_id = Some(p.run_id.clone());
    let mut answer = json!({"run_id": p.run_id, "checkpoint": p.checkpoint});
    if p.interrupted {
        answer["interrupted"] = true.into();
    }
    if !p.plan.left_out.is_empty() {
        answer["left_out"] = json!(p.plan.left_out);
    }
    if !args.force && (!p.changed.is_empty() || !p.plan.left_out.is_empty()) {
        answer["refused"] = refusal(&p).into();
        answer["changed"] = json!(p.changed);
        return (run_id, Ok(answer));
    }
    let ways = ways(&p.plan, &p.already, &snapshot, &c);
    let label = format!("agent-ls: roll back run {}", p.run_id);
    match restore(&c, &p.repo, snapshot, limits, label, &ways).await {
        Ok(()) => {
            let files: Vec<&String> = p
                .plan
                .files
                .iter()
                .map(|(f, _)| f)
                .filter(|f| !p.already.contains(f))
                .collect();
            answer["rolled_back"] = json!(files);
            if !p.already.is_empty() {
                answer["already_rolled_back"] = json!(p.already);
            }
            if !ways.disk.is_empty() {
                let on_disk: Vec<&String> = ways.disk.iter().map(|(f, _)| f).collect();
                answer["written_on_disk"] = json!(on_disk);
            }
            (run_id, Ok(answer))
        }
        Err(why) => (
            run_id,
            Err(Refused::Failed(format!(
                "could not roll back run {}: {why}",
                p.run_id
            ))),
        ),
    }
}

/// Rolls back the run that just ended, when the user chose "Roll back run" at its review
/// question (`review_decision`); returns whether any file changed, or why nothing was rolled
/// back. With a git checkpoint it is `agent-ls.rollback` for the run, unforced: the same plan
/// and restore, refused when a file changed since the run. Without one it is the run's undo:
/// each file goes back to its text before the run (a file the run created is deleted),
/// through the same restore, refused likewise when a file no longer holds what the run left.
pub(super) async fn roll_back_ended_run(
    c: &Connection,
    snapshot: Snapshot,
    limits: edit::Limits,
    (run_id, checkpoint): (&str, bool),
    originals: &[(String, Option<String>, String)],
) -> Result<bool, NotRolledBack> {
    if checkpoint {
        let args = RollbackArgs {
            run: Some(run_id.to_string()),
            force: false,
        };
        return match rollback(args, snapshot, c.clone(), limits).await.1 {
            Ok(answer) => match answer.get("rolled_back").and_then(|f| f.as_array()) {
                Some(files) => Ok(!files.is_empty()),
                None => Err(NotRolledBack::Refused(
                    answer
                        .get("refused")
                        .and_then(|r| r.as_str())
                        .unwrap_or("refused")
                        .to_string(),
                )),
            },
            Err(why) => Err(why.into()),
        };
    }
    let (mut edits, mut deletes, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    for (path, original, left) in originals {
        let now = match snapshot.get(path) {
            Some((_, b)) => Some(b.text()),
            None => match files::read_for_plan(&c.root, path) {
                FileText::Text(t) => Some(t),
                FileText::Missing => None,
                FileText::Refused(why) => {
                    let path = path.clone();
                    return Err(NotRolledBack::Unreadable { path, why });
                }
            },
        };
        if now.as_deref() != Some(left.as_str()) {
            changed.push(path.clone());
            continue;
        }
        match original {
            Some(text) => edits.push(edit::change_between(path, now.as_deref(), text)),
            None => deletes.push(path.clone()),
        }
    }
    if !changed.is_empty() {
        return Err(NotRolledBack::ChangedSince(changed));
    }
    let label = format!("agent-ls: roll back run {run_id}");
    let failed = |e| NotRolledBack::Apply(shell::apply_failure(e));
    shell::apply_restore(c, snapshot, limits, label, &edits)
        .await
        .map_err(failed)?;
    shell::delete_files(c, &deletes).await.map_err(failed)?;
    Ok(!edits.is_empty() || !deletes.is_empty())
}

/// "changed since the run: calc.py; not in the checkpoint (too big): data.bin".
fn refusal(p: &Planned) -> String {
    let mut parts = Vec::new();
    if !p.changed.is_empty() {
        parts.push(format!("changed since the run: {}", p.changed.join(", ")));
    }
    if !p.plan.left_out.is_empty() {
        parts.push(format!(
            "not in the checkpoint (too big): {}",
            p.plan.left_out.join(", ")
        ));
    }
    parts.join("; ")
}

/// Reads the run, its plan, and which of its files changed since (blocking: git and files).
fn plan(
    root: &Path,
    run: Option<&str>,
    texts: &BTreeMap<String, Vec<u8>>,
) -> Result<Planned, NotRolledBack> {
    let repo = Repo::discover(root)?;
    let run = recorded_run(root, &repo, run)?;
    let mut plan = checkpoint::plan_rollback(&repo, &run.checkpoint, &run.files)?;
    let already = plan.take_restored(&repo, texts);
    let names: Vec<String> = plan.files.iter().map(|(f, _)| f.clone()).collect();
    let changed = checkpoint::changed_since(&repo, &run.files, &names, texts)?;
    Ok(Planned {
        repo,
        run_id: run.run_id,
        checkpoint: run.checkpoint,
        interrupted: run.interrupted,
        plan,
        changed,
        already,
    })
}

/// Sorts the plan's files into the ways they go back, from the buffers and the disk now.
fn ways(plan: &RollbackPlan, already: &[String], snapshot: &Snapshot, c: &Connection) -> Ways {
    let mut w = Ways::default();
    for (path, restore) in plan.files.iter().filter(|(f, _)| !already.contains(f)) {
        let Restore::File { bytes, executable } = restore else {
            match restore {
                Restore::Delete => w.deletes.push(path.clone()),
                _ => w.disk.push((path.clone(), restore.clone())),
            }
            continue;
        };
        let Ok(text) = std::str::from_utf8(bytes) else {
            w.disk.push((path.clone(), restore.clone()));
            continue;
        };
        let current = match snapshot.get(path) {
            Some((_, b)) => Some(b.text()),
            None => match files::read_for_plan(&c.root, path) {
                FileText::Text(t) => Some(t),
                FileText::Missing => None,
                // A symbolic link, a binary file, or one too big to edit as text.
                FileText::Refused(_) => {
                    w.disk.push((path.clone(), restore.clone()));
                    continue;
                }
            },
        };
        if current.is_none() && !c.support.create_files {
            w.disk.push((path.clone(), restore.clone()));
            continue;
        }
        if *executable {
            w.executable.push(path.clone());
        }
        if current.as_deref() != Some(text) {
            w.edits
                .push(edit::change_between(path, current.as_deref(), text));
        }
    }
    w
}

/// Applies the ways: the edits through the editor, the deletions, then the disk writes.
async fn restore(
    c: &Connection,
    repo: &Repo,
    snapshot: Snapshot,
    limits: edit::Limits,
    label: String,
    ways: &Ways,
) -> Result<(), NotRolledBack> {
    let failed = |e| NotRolledBack::Apply(shell::apply_failure(e));
    shell::apply_restore(c, snapshot, limits, label, &ways.edits)
        .await
        .map_err(failed)?;
    shell::delete_files(c, &ways.deletes)
        .await
        .map_err(failed)?;
    let (repo, disk, root) = (repo.clone(), ways.disk.clone(), c.root.clone());
    let executable = ways.executable.clone();
    tokio::task::spawn_blocking(move || {
        let plan = RollbackPlan {
            files: disk,
            left_out: Vec::new(),
        };
        checkpoint::apply(&repo, &plan)?;
        for file in executable {
            checkpoint::set_executable(&root.join(&file), true)
                .map_err(|source| NotRolledBack::Executable { file, source })?;
        }
        Ok(())
    })
    .await?
}
