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

use serde::Deserialize;
use serde_json::json;
use tokio::sync::oneshot;

use super::connection::{AgentMessage, Connection, Snapshot};
use super::jobs;
use super::refused::Refused;
use super::shell;
use agent_ls_core::edit::{self, FileChange, FileText};
use agent_ls_runtime::config::MemoryConfig;
use agent_ls_runtime::files;
use agent_ls_runtime::git::checkpoint::{self, Restore, RollbackPlan};
use agent_ls_runtime::git::{GitError, Repo};
use agent_ls_runtime::lock::RunLock;
use agent_ls_runtime::runs::rollback::{self, NotRolledBack, Target};

/// Why a rollback from the editor did not go through, or (for the run that just ended, rolled
/// back at its review question) was refused.
#[derive(Debug, thiserror::Error)]
pub enum Unrolled {
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
    pub memory: MemoryConfig,
    /// The command's answer: `{run_id, rolled_back}`, `{run_id, refused, changed}`, or why not.
    pub reply: oneshot::Sender<Result<serde_json::Value, Refused>>,
    pub lock: RunLock,
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
        let job = rollback(r.args, r.snapshot, r.connection, (r.limits, r.memory));
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
    (limits, memory): (edit::Limits, MemoryConfig),
) -> (Option<String>, Result<serde_json::Value, Refused>) {
    jobs::injected_panic(jobs::Kind::Rollback);
    let texts: BTreeMap<String, Vec<u8>> = snapshot
        .iter()
        .map(|(rel, (_, b))| (rel.clone(), b.text().into_bytes()))
        .collect();
    let root = c.root.clone();
    let target = Target::Run(args.run.clone());
    let force = args.force;
    let planned =
        tokio::task::spawn_blocking(move || rollback::plan_here(&root, &target, force, &texts))
            .await;
    let p = match planned {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return refused(e),
        Err(e) => return (None, Err(Refused::Failed(e.to_string()))),
    };
    let run_id = Some(p.id.clone());
    let mut answer = json!({"run_id": p.id, "checkpoint": p.checkpoint});
    if p.interrupted {
        answer["interrupted"] = true.into();
    }
    if !p.plan.left_out.is_empty() {
        answer["left_out"] = json!(p.plan.left_out);
    }
    let ways = ways(&p.plan, &snapshot, &c);
    let label = format!("agent-ls: roll back run {}", p.id);
    if let Err(why) = restore(&c, &p.repo, snapshot, limits, label, &ways).await {
        let why = format!("could not roll back run {}: {why}", p.id);
        return (run_id, Err(Refused::Failed(why)));
    }
    let files = p.files();
    if !files.is_empty() {
        let settled = p.clone();
        let done = tokio::task::spawn_blocking(move || rollback::settle(&settled, &memory)).await;
        let why = match done {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = why {
            tracing::warn!("the rollback of run {} was not recorded: {why}", p.id);
        }
    }
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

/// The command's answer when nothing was rolled back: a refusal the client asks a second
/// time about (`{run_id, refused, changed}`), or why not.
fn refused(e: NotRolledBack) -> (Option<String>, Result<serde_json::Value, Refused>) {
    let Some((id, files)) = e.refusal() else {
        return (None, Err(Refused::Failed(e.to_string())));
    };
    let mut answer = json!({"run_id": id, "refused": e.to_string(), "changed": files});
    if let NotRolledBack::LeftOut { files, .. } = &e {
        answer["changed"] = json!([]);
        answer["left_out"] = json!(files);
    }
    (Some(id.to_string()), Ok(answer))
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
    (limits, memory): (edit::Limits, MemoryConfig),
    (run_id, checkpoint): (&str, bool),
    originals: &[(String, Option<String>, String)],
) -> Result<bool, Unrolled> {
    if checkpoint {
        let args = RollbackArgs {
            run: Some(run_id.to_string()),
            force: false,
        };
        return match rollback(args, snapshot, c.clone(), (limits, memory))
            .await
            .1
        {
            Ok(answer) => match answer.get("rolled_back").and_then(|f| f.as_array()) {
                Some(files) => Ok(!files.is_empty()),
                None => Err(Unrolled::Refused(
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
                    return Err(Unrolled::Unreadable { path, why });
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
        return Err(Unrolled::ChangedSince(changed));
    }
    let label = format!("agent-ls: roll back run {run_id}");
    let failed = |e| Unrolled::Apply(shell::apply_failure(e));
    shell::apply_restore(c, snapshot, limits, label, &edits)
        .await
        .map_err(failed)?;
    shell::delete_files(c, &deletes).await.map_err(failed)?;
    // Without a checkpoint this was the run's undo; memory still learns its fix did not stay.
    let (root, id) = (c.root.clone(), run_id.to_string());
    tokio::task::spawn_blocking(move || {
        agent_ls_runtime::memory::note_rollback(&root, &memory, &id)
    });
    Ok(!edits.is_empty() || !deletes.is_empty())
}

/// Sorts the plan's files into the ways they go back, from the buffers and the disk now.
fn ways(plan: &RollbackPlan, snapshot: &Snapshot, c: &Connection) -> Ways {
    let mut w = Ways::default();
    for (path, restore) in &plan.files {
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
) -> Result<(), Unrolled> {
    let failed = |e| Unrolled::Apply(shell::apply_failure(e));
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
                .map_err(|source| Unrolled::Executable { file, source })?;
        }
        Ok(())
    })
    .await?
}
