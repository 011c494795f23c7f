//! The editor `Shell` of a run, an undo or a rollback: what the runtime's `Drive` does to the
//! files and the user goes through the editor here. Reads come from the editor's buffers (a
//! snapshot from the session), approval through change annotations or
//! `window/showMessageRequest`, edits through `workspace/applyEdit` with version checks
//! before and after, and the disk is kept in step for the tests. Everything for the client
//! leaves through the outbox; the session is asked only through `AgentMessage`.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tower_lsp_server::ls_types::request::ApplyWorkspaceEdit;
use tower_lsp_server::ls_types::{
    ApplyWorkspaceEditParams, MessageType, ProgressToken, Uri, WorkDoneProgress,
    WorkDoneProgressReport, WorkspaceEdit,
};
use tracing::{info, warn};

use super::baseline;
use super::connection::{AgentMessage, AppliedStep, Connection, Snapshot};
use super::convert;
use super::ext;
use super::held::Held;
use super::outbox::Outbox;
use super::workspace_edit::{self, EditSupport, Target};
use agent_ls_core::edit::history::Step;
use agent_ls_core::edit::{self, FileChange, FileText};
use agent_ls_runtime::config::Approval;
use agent_ls_runtime::drive::policy::Asked;
use agent_ls_runtime::drive::{ApplyError, ChangeQuestion, Shell};
use agent_ls_runtime::files;
use agent_ls_runtime::tests_run::{RunError, RunResult};
use agent_ls_runtime::trust::Review;

/// The editor said it applied an edit, but these documents do not hold it.
#[derive(Debug, thiserror::Error)]
#[error("the editor reported the change as applied, but {} does not hold it (was it declined?)", .0.join(", "))]
struct NotHeld(Vec<String>);

/// Why the disk could not be brought in step with an applied edit.
#[derive(Debug, thiserror::Error)]
enum DiskSync {
    #[error("{0}")]
    Refused(String),
    #[error("{0} has unsaved changes around the agent's edit; save it so the tests see the change")]
    UnsavedAround(String),
    #[error("{0} was created or deleted on disk meanwhile")]
    CreatedOrDeleted(String),
    #[error(transparent)]
    Write(#[from] files::FileError),
}

/// The disk writes made before an edit is sent (`ServerShell::park`).
#[derive(Default)]
struct Early {
    /// What each file written before the edit held, to write back.
    restore: Vec<FileChange>,
    /// The files put back as the editor last saw them (the rest hold the change already).
    parked: Vec<String>,
    /// Parked files the change brings back to the text the editor last saw (an undo of the
    /// only change since): left as they are, text and time, so the editor's next save finds
    /// its file as it recorded it and asks nothing.
    left: Vec<String>,
}

/// Applies changes that restore known texts (a rollback) through workspace/applyEdit like an
/// undo, without asking, then writes exactly their texts to the disk the editor did not save.
pub async fn apply_restore(
    c: &Connection,
    snapshot: Snapshot,
    limits: edit::Limits,
    label: String,
    changes: &[FileChange],
) -> Result<(), ApplyError> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut shell = ServerShell {
        snapshot,
        exact_disk: true,
        ..ServerShell::new(c.clone(), label, limits)
    };
    shell.apply_now(changes).await
}

/// Deletes files an undone step created: through workspace/applyEdit when the client can
/// delete (so an open editor closes), then on disk if the file is still there.
pub async fn delete_files(c: &Connection, paths: &[String]) -> Result<(), ApplyError> {
    use tower_lsp_server::ls_types::{
        DeleteFile, DeleteFileOptions, DocumentChangeOperation, DocumentChanges, ResourceOp,
    };
    if paths.is_empty() {
        return Ok(());
    }
    if c.support.delete_files {
        let ops = paths
            .iter()
            .filter_map(|p| Uri::from_file_path(c.root.join(p)))
            .map(|uri| {
                DocumentChangeOperation::Op(ResourceOp::Delete(DeleteFile {
                    uri,
                    options: Some(DeleteFileOptions {
                        recursive: Some(false),
                        ignore_if_not_exists: Some(true),
                    }),
                    annotation_id: None,
                }))
            })
            .collect();
        let edit = WorkspaceEdit {
            document_changes: Some(DocumentChanges::Operations(ops)),
            ..Default::default()
        };
        send_edit(&c.outbox, edit, None).await?;
    }
    for p in paths {
        let path = c.root.join(p);
        if path.exists() {
            std::fs::remove_file(&path)
                .map_err(|e| ApplyError::Failed(format!("cannot delete {p}: {e}")))?;
        }
    }
    Ok(())
}

/// What an `ApplyError` says (whichever kind: an undo or a rollback that did not go through
/// is not redone, so stale or failed reads the same).
pub fn apply_failure(e: ApplyError) -> String {
    let (ApplyError::Stale(why) | ApplyError::Failed(why)) = e;
    why
}

/// The waits between the wake-ups sent while a `workspace/applyEdit` is unanswered
/// (`ext::WakeNotification`).
const WAKES: [std::time::Duration; 4] = [
    std::time::Duration::from_millis(50),
    std::time::Duration::from_millis(200),
    std::time::Duration::from_millis(750),
    std::time::Duration::from_secs(2),
];

/// Sends `workspace/applyEdit` and reads the client's answer; `applied: false` is a refusal.
async fn send_edit(
    outbox: &Outbox,
    edit: WorkspaceEdit,
    label: Option<String>,
) -> Result<(), ApplyError> {
    let answer = outbox.request::<ApplyWorkspaceEdit>(ApplyWorkspaceEditParams { label, edit });
    tokio::pin!(answer);
    // A few wake-ups while the answer is awaited, each in a write of its own; then none, so
    // a user who takes their time to confirm is not flooded.
    let mut wakes = WAKES.iter();
    let answered = loop {
        let Some(after) = wakes.next() else {
            break answer.await;
        };
        tokio::select! {
            r = &mut answer => break r,
            _ = tokio::time::sleep(*after) => {
                outbox.notify::<super::ext::WakeNotification>(serde_json::json!({}));
            }
        }
    };
    match answered {
        Ok(r) if r.applied => Ok(()),
        Ok(r) => {
            Err(ApplyError::Failed(r.failure_reason.unwrap_or_else(|| {
                "the change was rejected in the editor".into()
            })))
        }
        Err(e) => Err(ApplyError::Failed(format!(
            "the editor did not answer workspace/applyEdit: {e}"
        ))),
    }
}

/// The button of the question about a tool call an `ask` rule holds.
const ALLOW_CALL: &str = "Allow this call";

/// The editor shell of one run, undo or rollback.
pub(super) struct ServerShell {
    pub(super) c: Connection,
    pub(super) approval: Approval,
    pub(super) label: String,
    /// The open documents of the workspace, as of the last refresh.
    pub(super) snapshot: Snapshot,
    /// agent-ls.accept (true) and agent-ls.reject (false), for the question waiting.
    pub(super) decisions: mpsc::UnboundedReceiver<bool>,
    pub(super) cancel: CancellationToken,
    /// The run's `$/progress` token, when the client takes progress.
    pub(super) progress: Option<ProgressToken>,
    pub(super) limits: edit::Limits,
    /// The plan's task the change being applied works on, for the history.
    pub(super) task: String,
    pub(super) iteration: u32,
    /// The run and goal an applied change is recorded under in the history; `None` for an
    /// undo or redo, which moves an existing step instead.
    pub(super) record: Option<(String, String)>,
    /// The review of the change being applied, for the preview's labels.
    pub(super) review: Review,
    /// The disk gets exactly each change's new text, whatever it holds now (a rollback, which
    /// restores known contents; forced, it overwrites the user's changes on purpose).
    pub(super) exact_disk: bool,
    /// A run in a worktree of its own: it reads and writes that worktree's disk and runs its
    /// tests there, since no editor buffer is its.
    pub(super) on_disk: Option<agent_ls_runtime::runs::disk::OnDisk>,
    /// A run's edits held back from a client that confirms each edit itself, for one edit at
    /// the run's end (`held`).
    pub(super) held: Option<Held>,
}

impl ServerShell {
    /// Applies changes outside a run (an undo, a rollback): moved onto the buffers' text now,
    /// as the driver does before every write (`drive::rebase`).
    pub(super) async fn apply_now(&mut self, changes: &[FileChange]) -> Result<(), ApplyError> {
        self.refresh().await;
        let current = agent_ls_runtime::drive::rebase(changes, self, &self.limits)?;
        self.write(&current).await
    }

    /// A shell that applies without asking, records nothing, and cannot be cancelled or
    /// answered (an undo's or a rollback's); a run sets what it needs over it.
    pub(super) fn new(c: Connection, label: String, limits: edit::Limits) -> Self {
        ServerShell {
            c,
            approval: Approval::Auto,
            label,
            snapshot: Snapshot::new(),
            decisions: mpsc::unbounded_channel().1,
            cancel: CancellationToken::new(),
            progress: None,
            limits,
            task: String::new(),
            iteration: 0,
            record: None,
            review: Review::default(),
            exact_disk: false,
            on_disk: None,
            held: None,
        }
    }

    pub(super) async fn take_snapshot(&self) -> Snapshot {
        // The editor's buffers are the checkout's, not the worktree's.
        if self.on_disk.is_some() {
            return Snapshot::new();
        }
        let (reply, answer) = oneshot::channel();
        (self.c.report)(AgentMessage::Snapshot { reply });
        answer.await.unwrap_or_default()
    }

    /// Asks with window/showMessageRequest, or takes an agent-ls.accept/reject command,
    /// whichever comes first. No timeout: the user may take their time.
    async fn ask(&mut self, changes: &[FileChange], diff: &str, review: &Review) -> bool {
        let files: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        let mut flagged = if review.findings.is_empty() {
            String::new()
        } else {
            format!(
                " The static scan flagged: {}.",
                review.findings_joined("; ")
            )
        };
        // A change the review gate sent back: the findings it is to fix, one a line.
        if !review.fixes.is_empty() {
            flagged.push_str(&format!(
                " It is meant to fix the reviewer's findings:\n{}",
                review.fixes_joined("\n")
            ));
        }
        loop {
            let request = self.c.outbox.ask(
                MessageType::INFO,
                format!(
                    "{}: apply the proposed change to {}?{flagged}",
                    self.label,
                    files.join(", ")
                ),
                &["Accept", "Reject", "Show diff"],
            );
            let answer = tokio::select! {
                r = request => r,
                d = self.decisions.recv() => d.map(|yes| if yes { "Accept".to_string() } else { "Reject".to_string() }),
                _ = self.cancel.cancelled() => None,
            };
            match answer.as_deref() {
                Some("Accept") => return true,
                Some("Show diff") => self.c.outbox.show_message(MessageType::INFO, diff),
                _ => return false,
            }
        }
    }

    /// Asks whether the change may write one protected file, with a button that names it;
    /// agent-ls.reject (or a cancel) refuses.
    async fn allow_protected(&mut self, path: &str, why: &str) -> bool {
        let allow = format!("Allow {path}");
        let request = self.c.outbox.ask(
            MessageType::WARNING,
            format!(
                "{}: the change writes {path}, which is protected: {why}. Allow the agent to write it?",
                self.label
            ),
            &[&allow, "Refuse"],
        );
        tokio::select! {
            r = request => r.is_some_and(|title| title == allow),
            // agent-ls.accept does not name the file, so it allows nothing here.
            _ = self.decisions.recv() => false,
            _ = self.cancel.cancelled() => false,
        }
    }

    /// Waits until the editor's buffers hold the new text (the `didChange` after an applied
    /// edit can come after the reply), for at most 5 seconds.
    async fn confirm_applied(&mut self, changes: &[FileChange]) -> Result<(), NotHeld> {
        // The documents open now, which includes those the editor opened as it applied the
        // edit (Neovim loads a buffer for a file it creates or edits, and reports its text
        // only after a debounce): each must come to hold its change.
        self.snapshot = self.take_snapshot().await;
        let want: Vec<(Uri, String)> = changes
            .iter()
            .filter_map(|c| {
                // A file not open in the editor: it applied the edit to a buffer it did not
                // report to us, or to the file; the disk check settles it.
                let (uri, _) = self.snapshot.get(&c.path)?;
                Some((uri.clone(), c.new_text.clone()))
            })
            .collect();
        if !want.is_empty() {
            let (reply, answer) = oneshot::channel();
            (self.c.report)(AgentMessage::AwaitTexts { want, reply });
            let landed = tokio::time::timeout(Duration::from_secs(5), answer).await;
            self.snapshot = self.take_snapshot().await;
            if !matches!(landed, Ok(Ok(()))) {
                let pending = changes
                    .iter()
                    .filter(|c| {
                        self.snapshot
                            .get(&c.path)
                            .is_some_and(|(_, b)| b.text() != c.new_text)
                    })
                    .map(|c| c.path.clone())
                    .collect();
                return Err(NotHeld(pending));
            }
        }
        Ok(())
    }

    /// Asks an editor that can (`agent-ls/saveFiles`) to save the documents the step wrote,
    /// so its buffers and the disk agree with no conflict; returns the paths it saved. A
    /// document that held unsaved typing of the user's is saved with it, and the user is told.
    async fn save_in_editor(&mut self, changes: &[FileChange]) -> Vec<String> {
        if !self.c.support.save_files || changes.is_empty() {
            return Vec::new();
        }
        let mut files = Vec::new();
        let mut with_typing = Vec::new();
        for c in changes {
            let Ok(uri) = workspace_edit::file_uri(&self.c.root, &c.path) else {
                continue;
            };
            let (uri, version) = match self.snapshot.get(&c.path) {
                Some((uri, b)) => (uri.clone(), Some(b.version())),
                None => (uri, None),
            };
            // The buffer held text the disk did not: the user's unsaved typing.
            if let (FileText::Text(disk), Some(original)) =
                (files::read_for_plan(&self.c.root, &c.path), &c.original)
                && disk != *original
            {
                with_typing.push(c.path.clone());
            }
            files.push(ext::FileToSave { uri, version });
        }
        let asked = self
            .c
            .outbox
            .request::<ext::SaveFiles>(ext::SaveFilesParams { files });
        let saved = match tokio::time::timeout(Duration::from_secs(10), asked).await {
            Ok(Ok(r)) => r.saved,
            Ok(Err(e)) => {
                warn!("the editor did not save the agent's files: {e}");
                return Vec::new();
            }
            Err(_) => {
                warn!("the editor did not answer agent-ls/saveFiles within 10 s");
                return Vec::new();
            }
        };
        let saved: Vec<String> = changes
            .iter()
            .filter(|c| {
                workspace_edit::file_uri(&self.c.root, &c.path)
                    .is_ok_and(|u| saved.iter().any(|s| same_file(s, &u)))
            })
            .map(|c| c.path.clone())
            .collect();
        let told: Vec<&String> = with_typing.iter().filter(|p| saved.contains(p)).collect();
        if !told.is_empty() {
            self.c.outbox.show_message(
                MessageType::INFO,
                format!(
                    "agent-ls saved {} with your unsaved changes in it, so the tests run on what you see",
                    told.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
                ),
            );
        }
        saved
    }

    /// For a client without `agent-ls/saveFiles`, the files the server already wrote under the
    /// editor's buffer (see `WrittenUnder`), before the edit is sent: each is put back as the
    /// editor last saw it (parked), so it applies the edit asking nothing; one with no known
    /// baseline gets the change written first instead. Returns, for each, what the disk held
    /// before: written back once the edit lands (parked files, which then take the change) or
    /// does not (all).
    fn park(&self, changes: &[FileChange]) -> Result<Early, ApplyError> {
        let mut early = Early::default();
        if self.c.support.save_files {
            return Ok(early);
        }
        let mut written_first = Vec::new();
        for c in changes {
            let Some((uri, _)) = self.snapshot.get(&c.path) else {
                continue;
            };
            if !self.c.written_under.contains(uri) {
                continue;
            }
            let (FileText::Text(disk), Some(before)) = (
                files::read_for_plan(&self.c.root, &c.path),
                self.c.written_under.baseline(uri),
            ) else {
                written_first.push(c.clone());
                continue;
            };
            early.restore.push(held(c, disk));
            if let Err(e) = baseline::put_back(&self.c.root, &c.path, &before) {
                let _ = files::write_changes(&self.c.root, &early.restore);
                return Err(ApplyError::Failed(format!("cannot write {}: {e}", c.path)));
            }
            early.parked.push(c.path.clone());
        }
        for c in &written_first {
            if let FileText::Text(disk) = files::read_for_plan(&self.c.root, &c.path) {
                early.restore.push(held(c, disk));
            }
        }
        if let Err(e) = self.sync_disk(&written_first) {
            let _ = files::write_changes(&self.c.root, &early.restore);
            return Err(ApplyError::Failed(e.to_string()));
        }
        Ok(early)
    }

    /// Tests run on the disk, which holds neither the editor's edit (editors do not save) nor,
    /// in a buffer with unsaved work, that work. The agent's change alone is written: the new
    /// text where the disk matched the buffer, else the change re-located onto the disk's text,
    /// so the user's unsaved typing is never saved behind their back. A new file the editor
    /// created as it applied the edit (empty, or already holding the text) is the step's.
    fn sync_disk(&self, changes: &[FileChange]) -> Result<(), DiskSync> {
        let mut writes = Vec::new();
        for c in changes {
            let disk = match files::read_for_plan(&self.c.root, &c.path) {
                FileText::Text(t) => Some(t),
                FileText::Missing => None,
                FileText::Refused(why) => return Err(DiskSync::Refused(why)),
            };
            match (&disk, &c.original) {
                _ if self.exact_disk => writes.push(c.clone()),
                (None, None) => writes.push(c.clone()),
                (Some(d), None) if *d == c.new_text => {}
                (Some(d), None) if d.is_empty() => writes.push(c.clone()),
                (Some(d), Some(o)) if d == o => writes.push(c.clone()),
                (Some(d), Some(_)) if *d == c.new_text => {}
                (Some(d), Some(_)) => match edit::relocate(c, d, &self.limits) {
                    Some(moved) => writes.push(moved),
                    None => return Err(DiskSync::UnsavedAround(c.path.clone())),
                },
                (None, Some(_)) | (Some(_), None) => {
                    return Err(DiskSync::CreatedOrDeleted(c.path.clone()));
                }
            }
        }
        // An editor that cannot save on request will hold a buffer whose file changed behind
        // it: the file as it saw it is kept, to be parked under its next edit.
        let mut under = Vec::new();
        if !self.c.support.save_files {
            for w in &writes {
                if let Some((uri, _)) = self.snapshot.get(&w.path) {
                    let before = (!self.c.written_under.contains(uri))
                        .then(|| baseline::read(&self.c.root, &w.path))
                        .flatten();
                    under.push((uri.clone(), before));
                }
            }
        }
        files::write_changes(&self.c.root, &writes)?;
        for (uri, before) in under {
            self.c.written_under.mark(&uri, before);
        }
        Ok(())
    }

    /// The open documents the changes go to, at the versions they were computed for.
    fn targets(&self, changes: &[FileChange]) -> HashMap<String, Target> {
        changes
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
            .collect()
    }

    /// The changes as the editor's edit, annotated for its preview when it asks before
    /// applying (the approval mode asks, and the client can), with the review's notes.
    fn workspace_edit(
        &mut self,
        changes: &[FileChange],
        targets: &HashMap<String, Target>,
    ) -> Result<WorkspaceEdit, ApplyError> {
        let support = EditSupport {
            change_annotations: self.c.support.change_annotations
                && self.approval == Approval::Confirm,
            ..self.c.support
        };
        let review = std::mem::take(&mut self.review);
        workspace_edit::to_workspace_edit(
            changes,
            targets,
            &self.c.root,
            self.c.encoding,
            support,
            &self.label,
            &|path| review.note_for(path),
        )
        .map_err(|e| ApplyError::Failed(e.to_string()))
    }

    /// Sends the edit and waits until the buffers hold it. `early` are the disk writes made
    /// before it was sent (`park`), put back when it does not land.
    async fn land(
        &mut self,
        edit: WorkspaceEdit,
        changes: &[FileChange],
        targets: &HashMap<String, Target>,
        early: &[FileChange],
    ) -> Result<(), ApplyError> {
        let sent = send_edit(&self.c.outbox, edit, Some(self.label.clone())).await;
        if sent.is_err() && early.is_empty() {
            return sent;
        }
        let held = self.confirm_applied(changes).await;
        // An edit the editor refused but whose text the buffer holds anyway: it re-read the
        // file written first (Emacs, answered "yes" to "changed on disk"), at a new version.
        let Err(why) = held else {
            return Ok(());
        };
        // The disk goes back to what it held; the error below says why.
        let _ = files::write_changes(&self.c.root, early);
        sent?;
        // A buffer that moved past the version the edit was sent for means the user typed
        // while the edit was in flight, and the editor refused the stale edit: redo the
        // step on the fresh text rather than calling it a rejection.
        let typed = changes.iter().any(|c| {
            let sent = targets.get(&c.path).and_then(|t| t.version);
            let now = self.snapshot.get(&c.path).map(|(_, b)| b.version());
            matches!((sent, now), (Some(s), Some(n)) if n > s)
        });
        Err(if typed {
            ApplyError::Stale(format!("{why} while the edit was sent"))
        } else {
            ApplyError::Failed(why.to_string())
        })
    }

    /// Sends the edit with the files the server wrote under the editor parked (`park`), and
    /// once it landed puts back what they held. What was written before it was sent.
    async fn send_parked(&mut self, current: &[FileChange]) -> Result<Early, ApplyError> {
        let targets = self.targets(current);
        let edit = self.workspace_edit(current, &targets)?;
        let early = self.park(current)?;
        self.land(edit, current, &targets, &early.restore).await?;
        self.note_edited(current);
        // A parked file holds what it held before again (the caller writes the change),
        // unless the change brings it back to what the editor saw (parked, it holds that).
        let mut early = early;
        early.left = current
            .iter()
            .filter(|c| early.parked.contains(&c.path) && self.back_to_baseline(c))
            .map(|c| c.path.clone())
            .collect();
        let parked: Vec<FileChange> = early
            .restore
            .iter()
            .filter(|r| early.parked.contains(&r.path) && !early.left.contains(&r.path))
            .cloned()
            .collect();
        files::write_changes(&self.c.root, &parked)
            .map_err(|e| ApplyError::Failed(e.to_string()))?;
        Ok(early)
    }

    /// Whether `c` leaves its file with the text the editor last read or wrote (`baseline`).
    fn back_to_baseline(&self, c: &FileChange) -> bool {
        self.snapshot
            .get(&c.path)
            .and_then(|(uri, _)| self.c.written_under.baseline(uri))
            .is_some_and(|b| b.text == c.new_text)
    }

    /// A run's applied change goes into the session's history (an undo's or a rollback's
    /// does not: it moves existing steps, or none).
    fn record_step(&self, changes: Vec<FileChange>) {
        let Some((run_id, goal)) = &self.record else {
            return;
        };
        let files = Step::files_after(&changes, |path| {
            self.snapshot.get(path).map(|(_, b)| b.version())
        });
        (self.c.report)(AgentMessage::StepApplied(AppliedStep {
            run_id: run_id.clone(),
            goal: goal.clone(),
            task: self.task.clone(),
            iteration: self.iteration,
            changes,
            files,
        }));
    }

    /// Tells the editor's forwarded diagnostics at which document version each file holds
    /// the change, so a late word on the text before it is not taken for its result.
    fn note_edited(&self, changes: &[FileChange]) {
        let Some(forwarded) = &self.c.forwarded else {
            return;
        };
        for c in changes {
            if let Some((_, b)) = self.snapshot.get(&c.path) {
                forwarded.edited(&c.path, b.version());
            }
        }
    }
}

/// The write that puts back `disk`, what the file held before `c` was written early.
fn held(c: &FileChange, disk: String) -> FileChange {
    FileChange {
        path: c.path.clone(),
        original: Some(c.new_text.clone()),
        new_text: disk,
        edits: Vec::new(),
        inverse: Vec::new(),
    }
}

/// Whether two file URIs name the same file (clients differ in how they escape a path).
fn same_file(a: &Uri, b: &Uri) -> bool {
    a == b
        || matches!(
            (convert::path_from_uri(a), convert::path_from_uri(b)),
            (Some(x), Some(y)) if x == y
        )
}

impl Shell for ServerShell {
    fn read(&self, relative: &str) -> FileText {
        // A held run's files hold its change on disk only, not yet in the editor's buffers.
        if let Some(text) = self.held.as_ref().and_then(|h| h.text(relative)) {
            return text;
        }
        match self.snapshot.get(relative) {
            Some((_, b)) if b.needs_resync() => FileText::Refused(format!(
                "{relative} is out of sync with the editor; close and reopen it"
            )),
            Some((_, b)) => FileText::Text(b.text()),
            None => files::read_for_plan(&self.c.root, relative),
        }
    }

    async fn refresh(&mut self) {
        self.snapshot = self.take_snapshot().await;
    }

    /// The editor is there to answer.
    fn present(&self) -> bool {
        true
    }

    async fn ask_change(&mut self, q: &ChangeQuestion<'_>) -> bool {
        self.review = q.review.clone();
        // Under "confirm" the editor asks when it applies the annotated edit (VS Code's
        // preview, whose labels carry the review); "prompt" always asks here. eglot alone asks "Proceed?" before it applies: that is the
        // step's question. A worktree run's change is written on disk, with no preview: it
        // is asked here, as is a change the scan flagged.
        if q.why == Asked::Approval
            && self.approval == Approval::Confirm
            && (self.c.support.change_annotations || self.c.support.confirms_edits)
            && self.on_disk.is_none()
        {
            return true;
        }
        self.ask(q.changes, q.diff, q.review).await
    }

    fn show_change(&mut self, q: &ChangeQuestion<'_>, _written: bool) {
        self.review = q.review.clone();
    }

    async fn confirm_protected(&mut self, path: &str, why: &str) -> bool {
        self.allow_protected(path, why).await
    }

    /// Always asked, whatever the approval mode: the install runs a command, outside the
    /// sandbox, which no change preview shows.
    async fn ask_install(&mut self, library: &str, argv: &[String]) -> bool {
        let request = self.c.outbox.ask(
            MessageType::INFO,
            format!(
                "{}: the tester's property test needs {library}. Install it as a dev dependency (`{}`)?",
                self.label,
                argv.join(" ")
            ),
            &["Install", "Don't install"],
        );
        tokio::select! {
            r = request => r.is_some_and(|title| title == "Install"),
            // agent-ls.accept answers a change's question, not this one (and may be one the
            // user gave before this was asked): it approves no install.
            _ = self.decisions.recv() => false,
            _ = self.cancel.cancelled() => false,
        }
    }

    /// Always asked, whatever the approval mode: an `ask` rule holds the call for a yes.
    async fn ask_call(&mut self, name: &str, arguments: &serde_json::Value, why: &str) -> bool {
        let request = self.c.outbox.ask(
            MessageType::WARNING,
            format!(
                "{}: {why}. Let the agent call `{name}` ({})?",
                self.label,
                agent_ls_runtime::permissions::call_summary(name, arguments)
            ),
            &[ALLOW_CALL, "Refuse"],
        );
        tokio::select! {
            r = request => r.is_some_and(|title| title == ALLOW_CALL),
            // agent-ls.accept answers a change's question: it allows no call.
            _ = self.decisions.recv() => false,
            _ = self.cancel.cancelled() => false,
        }
    }

    /// The driver moved the change onto the snapshot it just took (`refresh`); `land` checks
    /// the buffers' versions against it, so typing since is never overwritten.
    async fn write(&mut self, current: &[FileChange]) -> Result<(), ApplyError> {
        if let Some(disk) = &self.on_disk {
            if let Some(warning) = disk.write(current)? {
                self.warn(&warning);
            }
            return Ok(());
        }
        if self.held.is_some() {
            return self.hold(current);
        }
        let current = current.to_vec();
        let early = self.send_parked(&current).await?;
        // The editor saves what it can; the disk is brought in step for the rest.
        let saved = self.save_in_editor(&current).await;
        // Files written before the edit already hold it (re-located around unsaved typing).
        let unsaved: Vec<FileChange> = current
            .iter()
            .filter(|c| {
                !saved.contains(&c.path)
                    && !early.left.contains(&c.path)
                    && (early.parked.contains(&c.path)
                        || !early.restore.iter().any(|e| e.path == c.path))
            })
            .cloned()
            .collect();
        self.sync_disk(&unsaved)
            .map_err(|e| ApplyError::Failed(e.to_string()))?;
        self.record_step(current);
        Ok(())
    }

    fn editor_diagnostics(
        &self,
    ) -> Option<std::sync::Arc<agent_ls_runtime::lsp_client::Forwarded>> {
        // A run in a worktree of its own edits files the editor does not show.
        self.on_disk
            .is_none()
            .then(|| self.c.forwarded.clone())
            .flatten()
    }

    fn buffers(&self) -> Vec<(String, FileText)> {
        self.snapshot
            .keys()
            .map(|rel| (rel.clone(), self.read(rel)))
            .collect()
    }

    async fn run_tests(
        &mut self,
        cancel: &CancellationToken,
        command: Option<Vec<String>>,
    ) -> Result<RunResult, RunError> {
        if let Some(disk) = &self.on_disk {
            return disk.run_tests(cancel, command).await;
        }
        let (reply, answer) = oneshot::channel();
        (self.c.report)(AgentMessage::RunTests { reply, command });
        // The run's own cancel reaches the test run through agent-ls.cancel, which cancels
        // both; a cancel that only ends the run stops waiting here.
        tokio::select! {
            r = answer => r.unwrap_or(Err(RunError::Superseded)),
            _ = cancel.cancelled() => Err(RunError::Superseded),
        }
    }

    fn progress(&mut self, message: &str) {
        info!("agent: {message}");
        match &self.progress {
            Some(token) => self.c.outbox.progress(
                token.clone(),
                WorkDoneProgress::Report(WorkDoneProgressReport {
                    message: Some(message.to_string()),
                    ..Default::default()
                }),
            ),
            // A client without workDoneProgress follows the run in its log instead.
            None => self
                .c
                .outbox
                .log_message(MessageType::INFO, format!("agent-ls: {message}")),
        }
    }

    fn warn(&mut self, message: &str) {
        warn!("agent: {message}");
        self.c
            .outbox
            .show_message(MessageType::WARNING, format!("agent-ls: {message}"));
    }

    fn task(&mut self, task: &str, iteration: u32) {
        self.task = task.to_string();
        self.iteration = iteration;
        if let Some(disk) = &mut self.on_disk {
            disk.task(task);
        }
    }
}

impl ServerShell {
    /// Writes an iteration's change of a held run (`held`) on disk only, for the tests; the
    /// editor gets it with the rest of the run's change at its end
    /// (`agent_runs::settle_held`).
    fn hold(&mut self, changes: &[FileChange]) -> Result<(), ApplyError> {
        self.sync_disk(changes)
            .map_err(|e| ApplyError::Failed(e.to_string()))?;
        if let Some(held) = &mut self.held {
            held.note(changes);
        }
        Ok(())
    }

    /// Sends the run's whole change to the editor as one edit: its one question. When the
    /// editor does not take it, the disk holds again what it held before the run.
    pub(super) async fn flush_held(&mut self, held: Held) -> Result<(), ApplyError> {
        let all = held.changes();
        if all.is_empty() {
            return Ok(());
        }
        self.refresh().await;
        // Files the editor does not have open are the disk's, which holds them already.
        let open: Vec<FileChange> = all
            .iter()
            .filter(|c| self.snapshot.contains_key(&c.path))
            .cloned()
            .collect();
        let open = agent_ls_runtime::drive::rebase(&open, self, &self.limits)?;
        // The disk holds the change already, and gets it back once the edit landed.
        let sent = match open.is_empty() {
            true => Ok(()),
            false => self.send_parked(&open).await.map(|_| ()),
        };
        match sent {
            Ok(()) => {
                self.record_step(all);
                Ok(())
            }
            Err(e) => {
                self.restore_before_run(&held);
                Err(e)
            }
        }
    }

    /// Each file as it was before the run: the file the editor last saw, put back with its
    /// time where the server kept it (so Emacs finds its file untouched), else its text.
    fn restore_before_run(&self, held: &Held) {
        for (path, before) in held.before_run() {
            let uri = self.snapshot.get(path).map(|(uri, _)| uri.clone());
            let baseline = uri.as_ref().and_then(|u| self.c.written_under.baseline(u));
            match (baseline, before) {
                (Some(b), Some(text)) if b.text == *text => {
                    let _ = baseline::put_back(&self.c.root, path, &b);
                    if let Some(uri) = &uri {
                        self.c.written_under.forget(uri);
                    }
                }
                _ => {
                    let back = FileChange {
                        path: path.clone(),
                        original: before.clone(),
                        new_text: before.clone().unwrap_or_default(),
                        edits: Vec::new(),
                        inverse: Vec::new(),
                    };
                    let _ = match before {
                        Some(_) => files::write_changes(&self.c.root, &[back]),
                        None => files::resolve(&self.c.root, path)
                            .and_then(|p| std::fs::remove_file(p).map_err(files::FileError::Io)),
                    };
                }
            }
        }
    }
}
