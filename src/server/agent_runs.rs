//! Agent runs inside the server: the `Shell` that reaches the editor (approval through change
//! annotations or `window/showMessageRequest`, edits through `workspace/applyEdit` with
//! version checks before and after, the disk kept in step for the tests), progress, and the
//! `agent-ls/runFinished` notification.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower_lsp_server::Client;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::{
    MessageActionItem, MessageType, ProgressParams, ProgressParamsValue, ProgressToken, Uri,
    WorkDoneProgress, WorkDoneProgressBegin, WorkDoneProgressEnd, WorkDoneProgressReport,
};
use tracing::{info, warn};

use super::session::{Event, SessionHandle};
use super::workspace_edit::{self, EditSupport, Target};
use crate::agent::{self, Budget, Run};
use crate::config::{Approval, Config};
use crate::drive::{self, ApplyError, Drive, Outcome, Shell};
use crate::edit::{self, FileChange, FileText};
use crate::files;
use crate::model::Models;
use crate::tests_run::RunResult;
use crate::text::{Buffer, Encoding};

/// Notification `agent-ls/runFinished`.
pub enum RunFinished {}

impl Notification for RunFinished {
    type Params = Outcome;
    const METHOD: &'static str = super::ext::RUN_FINISHED;
}

/// Arguments of `agent-ls.run`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct RunArgs {
    pub goal: String,
    pub uri: Option<Uri>,
    pub range: Option<tower_lsp_server::ls_types::Range>,
}

/// What the session keeps of the run in progress.
pub struct Active {
    pub id: String,
    pub goal: String,
    pub cancel: CancellationToken,
    pub decisions: mpsc::UnboundedSender<bool>,
}

/// Everything a run needs, taken from the session when it starts.
pub struct StartRun {
    pub id: String,
    pub goal: String,
    pub config: Config,
    pub root: PathBuf,
    pub encoding: Encoding,
    pub support: EditSupport,
    pub progress: bool,
    pub client: Client,
    pub session: SessionHandle,
    pub cancel: CancellationToken,
    pub decisions: mpsc::UnboundedReceiver<bool>,
    /// An interrupted run's checkpoint to go on from (agent-ls.resume).
    pub resume: Option<Run>,
}

/// Runs the loop to its end on a task of its own; the outcome goes back to the session.
pub fn spawn(s: StartRun) {
    tokio::spawn(async move {
        let started = Instant::now();
        let models = Models::new(&s.config, Some(&s.root));
        let intent = agent::classify(&s.goal);
        let mut run = Run::new(
            &s.goal,
            intent,
            Budget {
                max_retries: s.config.agent.max_retries,
                max_iterations: s.config.agent.max_iterations,
            },
            String::new(),
        );
        run.evaluate = s.config.agent.evaluate;
        let resumed = s.resume.is_some();
        if let Some(checkpoint) = s.resume {
            run = checkpoint;
        }
        let token = ProgressToken::String(format!("agent-ls/run/{}", s.id));
        let progress = if s.progress
            && s.client
                .create_work_done_progress(token.clone())
                .await
                .is_ok()
        {
            send_progress(
                &s.client,
                &token,
                WorkDoneProgress::Begin(WorkDoneProgressBegin {
                    title: "agent-ls".into(),
                    message: Some(s.goal.clone()),
                    // The client's cancel button sends window/workDoneProgress/cancel.
                    cancellable: Some(true),
                    ..Default::default()
                }),
            );
            Some(token)
        } else {
            None
        };
        let mut shell = ServerShell {
            client: s.client.clone(),
            session: s.session.clone(),
            root: s.root.clone(),
            encoding: s.encoding,
            support: s.support,
            approval: s.config.agent.approval,
            label: format!("agent-ls: {}", s.goal),
            snapshot: HashMap::new(),
            decisions: s.decisions,
            cancel: s.cancel.clone(),
            progress,
            limits: s.config.edit.limits(),
            record: Some((s.id.clone(), s.goal.clone())),
            task: String::new(),
        };
        let driver = Drive {
            models: &models,
            config: &s.config,
            root: &s.root,
            cancel: &s.cancel,
            on_token: None,
            journal: true,
        };
        let outcome = if resumed {
            driver.resume(&mut run, &mut shell, s.id.clone()).await
        } else {
            driver.run(&mut run, &mut shell, s.id.clone()).await
        };
        if let Some(token) = shell.progress.take() {
            send_progress(
                &s.client,
                &token,
                WorkDoneProgress::End(WorkDoneProgressEnd {
                    message: Some(outcome.status.clone()),
                }),
            );
        }
        info!(run = %s.id, status = %outcome.status, ms = started.elapsed().as_millis() as u64, "agent run finished");
        let kind = if outcome.status == "done" {
            MessageType::INFO
        } else {
            MessageType::WARNING
        };
        // The session hears of the end first, so a client that reacts to runFinished (an
        // undo, a new run) never finds this run still in progress.
        s.session.send(Event::RunEnded {
            id: s.id,
            outcome: Box::new(outcome.clone()),
        });
        s.client
            .show_message(kind, format!("agent-ls: {}", outcome.answer))
            .await;
        s.client.send_notification::<RunFinished>(outcome).await;
    });
}

struct ServerShell {
    client: Client,
    session: SessionHandle,
    root: PathBuf,
    encoding: Encoding,
    support: EditSupport,
    approval: Approval,
    label: String,
    /// The open documents of the workspace, by relative path, as of the last refresh.
    snapshot: HashMap<String, (Uri, Buffer)>,
    decisions: mpsc::UnboundedReceiver<bool>,
    cancel: CancellationToken,
    /// The run's `$/progress` token, when the client takes progress.
    progress: Option<ProgressToken>,
    limits: edit::Limits,
    /// The plan's task the change being applied works on, for the history.
    task: String,
    /// The run and goal an applied change is recorded under in the history; `None` for an
    /// undo or redo, which moves an existing step instead.
    record: Option<(String, String)>,
}

/// What an undo or redo needs to reach the editor.
pub struct UndoStart {
    pub step: u64,
    pub redo: bool,
    pub goal: String,
    pub changes: Vec<FileChange>,
    /// Files the step created, to delete (checked unchanged by `history::revert`).
    pub deletes: Vec<String>,
    pub client: Client,
    pub session: SessionHandle,
    pub root: PathBuf,
    pub encoding: Encoding,
    pub support: EditSupport,
    pub limits: edit::Limits,
}

/// Applies an undo or redo through workspace/applyEdit like any agent edit (so the editor's
/// own undo sees it), on a task of its own, and reports back to the session.
pub fn spawn_undo(u: UndoStart) {
    tokio::spawn(async move {
        let what = if u.redo { "redid" } else { "undid" };
        let mut shell = ServerShell {
            client: u.client.clone(),
            session: u.session.clone(),
            root: u.root.clone(),
            encoding: u.encoding,
            support: u.support,
            approval: Approval::Auto,
            label: format!(
                "agent-ls: {} step {}",
                if u.redo { "redo" } else { "undo" },
                u.step
            ),
            snapshot: HashMap::new(),
            decisions: mpsc::unbounded_channel().1,
            cancel: CancellationToken::new(),
            progress: None,
            limits: u.limits,
            record: None,
            task: String::new(),
        };
        let applied = if u.changes.is_empty() {
            Ok(())
        } else {
            shell.apply(&u.changes).await
        };
        let applied = match applied {
            Ok(()) => delete_files(&u.client, &u.root, &u.deletes, u.support).await,
            Err(e) => Err(e),
        };
        match applied {
            Ok(()) => {
                u.session.send(Event::UndoApplied {
                    step: u.step,
                    redo: u.redo,
                });
                u.client
                    .show_message(
                        MessageType::INFO,
                        format!("agent-ls: {what} step {} ({})", u.step, u.goal),
                    )
                    .await;
            }
            Err(ApplyError::Stale(e) | ApplyError::Failed(e)) => {
                u.client
                    .show_message(
                        MessageType::ERROR,
                        format!(
                            "agent-ls: could not {} step {}: {e}",
                            if u.redo { "redo" } else { "undo" },
                            u.step
                        ),
                    )
                    .await;
            }
        }
    });
}

/// Deletes files an undone step created: through workspace/applyEdit when the client can
/// delete (so an open editor closes), then on disk if the file is still there.
async fn delete_files(
    client: &Client,
    root: &std::path::Path,
    paths: &[String],
    support: EditSupport,
) -> Result<(), ApplyError> {
    if paths.is_empty() {
        return Ok(());
    }
    if support.delete_files {
        let ops = paths
            .iter()
            .filter_map(|p| Uri::from_file_path(root.join(p)))
            .map(|uri| {
                tower_lsp_server::ls_types::DocumentChangeOperation::Op(
                    tower_lsp_server::ls_types::ResourceOp::Delete(
                        tower_lsp_server::ls_types::DeleteFile {
                            uri,
                            options: Some(tower_lsp_server::ls_types::DeleteFileOptions {
                                recursive: Some(false),
                                ignore_if_not_exists: Some(true),
                            }),
                            annotation_id: None,
                        },
                    ),
                )
            })
            .collect();
        let edit = tower_lsp_server::ls_types::WorkspaceEdit {
            document_changes: Some(tower_lsp_server::ls_types::DocumentChanges::Operations(ops)),
            ..Default::default()
        };
        match client.apply_edit(edit).await {
            Ok(r) if r.applied => {}
            Ok(r) => {
                return Err(ApplyError::Failed(
                    r.failure_reason
                        .unwrap_or_else(|| "the editor refused to delete the file".into()),
                ));
            }
            Err(e) => {
                return Err(ApplyError::Failed(format!(
                    "the editor did not answer workspace/applyEdit: {e}"
                )));
            }
        }
    }
    for p in paths {
        let path = root.join(p);
        if path.exists() {
            std::fs::remove_file(&path)
                .map_err(|e| ApplyError::Failed(format!("cannot delete {p}: {e}")))?;
        }
    }
    Ok(())
}

impl ServerShell {
    async fn take_snapshot(&self) -> HashMap<String, (Uri, Buffer)> {
        let root = self.root.clone();
        self.session
            .query(move |s| {
                s.documents()
                    .filter_map(|(uri, buffer)| {
                        let path = super::convert::path_from_uri(uri)?;
                        let rel = path
                            .strip_prefix(&root)
                            .ok()?
                            .to_string_lossy()
                            .into_owned();
                        Some((rel, (uri.clone(), buffer.clone())))
                    })
                    .collect()
            })
            .await
            .unwrap_or_default()
    }

    fn current_text(&self, rel: &str) -> Option<String> {
        match self.read(rel) {
            FileText::Text(t) => Some(t),
            _ => None,
        }
    }

    /// Asks with window/showMessageRequest, or takes an agent-ls.accept/reject command,
    /// whichever comes first. No timeout: the user may take their time.
    async fn ask(&mut self, changes: &[FileChange], diff: &str) -> bool {
        let files: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        loop {
            let actions = ["Accept", "Reject", "Show diff"].map(|t| MessageActionItem {
                title: t.into(),
                properties: Default::default(),
            });
            let question = format!(
                "{}: apply the proposed change to {}?",
                self.label,
                files.join(", ")
            );
            let request = self.client.show_message_request(
                MessageType::INFO,
                question,
                Some(actions.to_vec()),
            );
            let answer = tokio::select! {
                r = request => r.ok().flatten().map(|a| a.title),
                d = self.decisions.recv() => d.map(|yes| if yes { "Accept".to_string() } else { "Reject".to_string() }),
                _ = self.cancel.cancelled() => None,
            };
            match answer.as_deref() {
                Some("Accept") => return true,
                Some("Show diff") => {
                    self.client
                        .show_message(MessageType::INFO, diff.to_string())
                        .await
                }
                _ => return false,
            }
        }
    }

    /// Waits until the editor's buffers hold the new text (the `didChange` after an applied
    /// edit can come after the reply).
    async fn confirm_applied(&mut self, changes: &[FileChange]) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.snapshot = self.take_snapshot().await;
            let pending: Vec<&str> = changes
                .iter()
                .filter(|c| match self.snapshot.get(&c.path) {
                    Some((_, b)) => b.text() != c.new_text,
                    // Not open in the editor: it applied the edit to a buffer it did not report
                    // to us, or to the file; the disk check below settles it.
                    None => false,
                })
                .map(|c| c.path.as_str())
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the editor reported the change as applied, but {} does not hold it (was it declined?)",
                    pending.join(", ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Tests run on the disk, which holds neither the editor's edit (editors do not save) nor,
    /// in a buffer with unsaved work, that work. The agent's change alone is written: the new
    /// text where the disk matched the buffer, else the change re-located onto the disk's text,
    /// so the user's unsaved typing is never saved behind their back.
    fn sync_disk(&self, changes: &[FileChange]) -> Result<(), String> {
        let mut writes = Vec::new();
        for c in changes {
            let disk = match files::read_for_plan(&self.root, &c.path) {
                FileText::Text(t) => Some(t),
                FileText::Missing => None,
                FileText::Refused(why) => return Err(why),
            };
            match (&disk, &c.original) {
                (None, None) => writes.push(c.clone()),
                (Some(d), Some(o)) if d == o => writes.push(c.clone()),
                (Some(d), Some(_)) if *d == c.new_text => {}
                (Some(d), Some(_)) => match edit::relocate(c, d, &self.limits) {
                    Some(moved) => writes.push(moved),
                    None => {
                        return Err(format!(
                            "{} has unsaved changes around the agent's edit; save it so the tests see the change",
                            c.path
                        ));
                    }
                },
                (None, Some(_)) | (Some(_), None) => {
                    return Err(format!(
                        "{} was created or deleted on disk meanwhile",
                        c.path
                    ));
                }
            }
        }
        files::write_changes(&self.root, &writes)
    }
}

impl Shell for ServerShell {
    fn read(&self, relative: &str) -> FileText {
        match self.snapshot.get(relative) {
            Some((_, b)) if b.needs_resync() => FileText::Refused(format!(
                "{relative} is out of sync with the editor; close and reopen it"
            )),
            Some((_, b)) => FileText::Text(b.text()),
            None => files::read_for_plan(&self.root, relative),
        }
    }

    async fn refresh(&mut self) {
        self.snapshot = self.take_snapshot().await;
    }

    async fn approve(&mut self, changes: &[FileChange], diff: &str) -> bool {
        match self.approval {
            Approval::Auto => true,
            // The editor asks when it applies the annotated edit (VS Code's preview).
            Approval::Confirm if self.support.change_annotations => true,
            _ => self.ask(changes, diff).await,
        }
    }

    async fn apply(&mut self, changes: &[FileChange]) -> Result<(), ApplyError> {
        // Never send an edit against a buffer older than the one it was computed for: if the
        // user typed meanwhile, move the change onto the new text, or redo the step.
        self.snapshot = self.take_snapshot().await;
        let mut current = Vec::new();
        for c in changes {
            let now = self.current_text(&c.path);
            if now == c.original {
                current.push(c.clone());
                continue;
            }
            match now
                .as_deref()
                .and_then(|t| edit::relocate(c, t, &self.limits))
            {
                Some(moved) => current.push(moved),
                None => {
                    return Err(ApplyError::Stale(format!(
                        "{} changed while the change was prepared",
                        c.path
                    )));
                }
            }
        }
        let targets: HashMap<String, Target> = current
            .iter()
            .filter_map(|c| {
                let (uri, b) = self.snapshot.get(&c.path)?;
                Some((
                    c.path.clone(),
                    Target {
                        uri: uri.clone(),
                        version: Some(b.version()),
                    },
                ))
            })
            .collect();
        let support = EditSupport {
            change_annotations: self.support.change_annotations
                && self.approval == Approval::Confirm,
            ..self.support
        };
        let edit = workspace_edit::to_workspace_edit(
            &current,
            &targets,
            &self.root,
            self.encoding,
            support,
            &self.label,
        )
        .map_err(|e| ApplyError::Failed(e.to_string()))?;
        match self.client.apply_edit(edit).await {
            Ok(r) if r.applied => {}
            Ok(r) => {
                let why = r
                    .failure_reason
                    .unwrap_or_else(|| "the change was rejected in the editor".into());
                return Err(ApplyError::Failed(why));
            }
            Err(e) => {
                return Err(ApplyError::Failed(format!(
                    "the editor did not answer workspace/applyEdit: {e}"
                )));
            }
        }
        if let Err(why) = self.confirm_applied(&current).await {
            // A buffer that moved past the version the edit was sent for means the user typed
            // while the edit was in flight, and the editor refused the stale edit: redo the
            // step on the fresh text rather than calling it a rejection.
            let typed = current.iter().any(|c| {
                let sent = targets.get(&c.path).and_then(|t| t.version);
                let now = self.snapshot.get(&c.path).map(|(_, b)| b.version());
                matches!((sent, now), (Some(s), Some(n)) if n > s)
            });
            return Err(if typed {
                ApplyError::Stale(format!("{} while the edit was sent", why))
            } else {
                ApplyError::Failed(why)
            });
        }
        self.sync_disk(&current).map_err(ApplyError::Failed)?;
        if let Some((run_id, goal)) = &self.record {
            let files = crate::edit::history::Step::files_after(&current, |path| {
                self.snapshot.get(path).map(|(_, b)| b.version())
            });
            self.session.send(Event::StepApplied {
                run_id: run_id.clone(),
                goal: goal.clone(),
                task: self.task.clone(),
                changes: current,
                files,
            });
        }
        Ok(())
    }

    fn progress(&mut self, message: &str) {
        info!("agent: {message}");
        if let Some(token) = &self.progress {
            send_progress(
                &self.client,
                token,
                WorkDoneProgress::Report(WorkDoneProgressReport {
                    message: Some(message.to_string()),
                    ..Default::default()
                }),
            );
        }
    }

    fn warn(&mut self, message: &str) {
        warn!("agent: {message}");
        let client = self.client.clone();
        let msg = format!("agent-ls: {message}");
        tokio::spawn(async move { client.show_message(MessageType::WARNING, msg).await });
    }

    fn task(&mut self, task: &str) {
        self.task = task.to_string();
    }

    fn tests_ran(&mut self, result: &RunResult) {
        self.session
            .send(Event::PublishTests(Box::new(result.clone())));
    }
}

/// Builds the goal of a run from a command's arguments: a selection adds its text.
pub fn goal_with_selection(
    args: &RunArgs,
    documents: &HashMap<Uri, Buffer>,
    root: &Path,
    encoding: Encoding,
) -> String {
    let (Some(uri), Some(range)) = (&args.uri, &args.range) else {
        return args.goal.clone();
    };
    let Some(buffer) = documents.get(uri) else {
        return args.goal.clone();
    };
    let rope = buffer.rope();
    let at = |p: tower_lsp_server::ls_types::Position| {
        crate::text::to_char_index(rope, super::convert::position_from_lsp(p), encoding).ok()
    };
    let (Some(start), Some(end)) = (at(range.start), at(range.end)) else {
        return args.goal.clone();
    };
    let path = super::convert::path_from_uri(uri)
        .and_then(|p| {
            p.strip_prefix(root)
                .ok()
                .map(|r| r.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| uri.as_str().to_string());
    let selected: String = rope.slice(start.min(end)..end.max(start)).into();
    format!(
        "{}\n\nThe selection is in {path}, lines {}-{}:\n```\n{selected}\n```",
        args.goal,
        range.start.line + 1,
        range.end.line + 1
    )
}

pub fn new_id() -> String {
    drive::new_run_id()
}

/// Sends one `$/progress` notification from a task of its own (the shell's hooks are sync).
fn send_progress(client: &Client, token: &ProgressToken, value: WorkDoneProgress) {
    let client = client.clone();
    let params = ProgressParams {
        token: token.clone(),
        value: ProgressParamsValue::WorkDone(value),
    };
    tokio::spawn(async move {
        client
            .send_notification::<tower_lsp_server::ls_types::notification::Progress>(params)
            .await
    });
}
