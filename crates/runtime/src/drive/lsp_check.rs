//! The driver's side of the project's language servers (`crate::lsp_client`,
//! docs/project-lsp.md): the errors already in the goal's files before the first edit, shown
//! to the model as context, and the check of each applied edit, whose new errors become the
//! edit's result (`Event::AppliedWithErrors`). Both are journaled and shown as
//! `RunEvent::Diagnostics`; a server given up is one warning.
//!
//! The errors before the first edit are asked for in the background, as the repo map is
//! built (`map.rs`): a server's start takes seconds (basedpyright's four), and the first
//! model request does not wait for it. They join the first context made after they came,
//! and the first edit's check waits for them, since it needs the same server.

use agent_ls_core::agent::{Event, Run};
use agent_ls_core::edit::{FileChange, FileText};
use agent_ls_core::events::RunEvent;

use super::observer::Observer;
use super::{Drive, Shell};
use std::sync::Arc;
use std::time::Duration;

use crate::lsp_client::{Checked, Edited, FileError, Forwarded, ProjectServers, introduced};

/// The servers' look at the goal's files before the first edit, under way: the servers
/// come back with what they found, for the files named.
type Pending = (
    tokio::task::JoinHandle<(ProjectServers, Checked)>,
    Vec<String>,
);

/// The run's servers and what they found before the first edit.
pub(super) struct RunServers {
    /// `None` while they look at the goal's files (`pending`), or once lost with that task.
    servers: Option<ProjectServers>,
    pending: Option<Pending>,
    /// The context block naming the errors already in the goal's files, when there are any.
    pub(super) before: Option<String>,
    /// Every error an edit introduced, in `path:line:column: error: message` lines.
    pub(super) reported: Vec<String>,
    /// The editor's forwarded diagnostics, used instead of the servers when there are.
    pub(super) editor: Option<Arc<Forwarded>>,
}

/// How long the editor must stay quiet about a file before its forwarded errors are taken.
const EDITOR_QUIET: Duration = Duration::from_millis(300);
/// The most an edit waits for the editor's word on a file it never published diagnostics of
/// (it may have no server for it): an error the edit made comes soon, a clean file says
/// nothing.
const EDITOR_UNKNOWN_WAIT: Duration = Duration::from_millis(2000);

impl RunServers {
    /// Whether edits of `path` are checked: by the editor's diagnostics, for a file of a
    /// language some server checks, else by a server that serves it.
    fn checks(&self, path: &str) -> bool {
        match (&self.editor, &self.servers) {
            (_, None) => false,
            (Some(_), Some(s)) => s.checked_language(path),
            (None, Some(s)) => s.serves(path),
        }
    }

    /// Ends the servers at the run's end; a look before the first edit still under way is
    /// dropped with its servers (their process groups are killed).
    pub(super) async fn shutdown(mut self) {
        if let Some((task, _)) = self.pending.take() {
            match task.is_finished() {
                true => self.servers = task.await.ok().map(|(s, _)| s),
                false => task.abort(),
            }
        }
        if let Some(servers) = self.servers {
            servers.shutdown().await;
        }
    }

    /// `context` with the errors already there before the first edit leading it.
    pub(super) fn with_before(
        &self,
        mut context: agent_ls_core::agent::context::Context,
    ) -> agent_ls_core::agent::context::Context {
        if let Some(before) = &self.before {
            context.pieces.insert(
                0,
                agent_ls_core::agent::context::Piece {
                    path: None,
                    text: before.clone(),
                },
            );
        }
        context
    }
}

impl Drive<'_> {
    /// The run's language servers, none started yet, or the editor's diagnostics when it
    /// forwards them.
    pub(super) fn run_servers(&self, shell: &impl Shell) -> RunServers {
        let sandbox = crate::trust::sandbox::Sandbox::from_config(&self.config.sandbox);
        let env =
            crate::tests_run::command::filtered_env(std::env::vars(), &self.config.test.env_allow);
        RunServers {
            servers: Some(ProjectServers::new(
                &self.config.lsp_servers,
                self.root,
                (sandbox, env),
                crate::tests_run::command::on_path,
            )),
            pending: None,
            before: None,
            reported: Vec::new(),
            editor: shell.editor_diagnostics(),
        }
    }

    /// The errors already in the files the goal names (those a server serves), before any
    /// edit: kept as context, so the model is not blamed for them. The editor's are there at
    /// once; the servers' are asked for in the background (`catch_up` takes them).
    pub(super) fn errors_before(
        &self,
        files: &[String],
        lsp: &mut RunServers,
        shell: &mut impl Shell,
        observer: &mut Observer<'_>,
    ) {
        let texts: Vec<(String, String)> = files
            .iter()
            .filter(|p| lsp.checks(p))
            .filter_map(|p| match shell.read(p) {
                FileText::Text(t) => Some((p.clone(), t)),
                _ => None,
            })
            .collect();
        if texts.is_empty() {
            return;
        }
        let names: Vec<String> = texts.iter().map(|(p, _)| p.clone()).collect();
        if let Some(editor) = &lsp.editor {
            let mark = editor.mark();
            let checked = Checked {
                new_errors: names.iter().flat_map(|p| editor.at(p, mark)).collect(),
                checked: true,
                ..Checked::default()
            };
            return took_before(&names, checked, lsp, shell, observer);
        }
        let Some(mut servers) = lsp.servers.take() else {
            return;
        };
        let task = tokio::spawn(async move {
            let files: Vec<(&str, &str)> = texts
                .iter()
                .map(|(p, t)| (p.as_str(), t.as_str()))
                .collect();
            let checked = servers.current(&files).await;
            (servers, checked)
        });
        lsp.pending = Some((task, names));
    }

    /// The servers' errors before the first edit, once they came (with `wait`, waiting for
    /// them: the first edit's check needs the servers back): journaled and kept as context.
    pub(super) async fn catch_up(
        &self,
        lsp: &mut RunServers,
        wait: bool,
        shell: &mut impl Shell,
        observer: &mut Observer<'_>,
    ) {
        let ready = lsp.pending.as_ref().is_some_and(|(t, _)| t.is_finished());
        if !(ready || wait) {
            return;
        }
        let Some((task, names)) = lsp.pending.take() else {
            return;
        };
        match task.await {
            Ok((servers, checked)) => {
                lsp.servers = Some(servers);
                took_before(&names, checked, lsp, shell, observer);
            }
            Err(e) => shell.warn(&format!("the project's language servers were lost: {e}")),
        }
    }

    /// After an applied change: the errors it introduced, as the edit's result, or
    /// `Event::Applied` when there are none (or no server could say). `mark` is the editor's
    /// publications' count before the change was applied.
    pub(super) async fn check_applied(
        &self,
        run: &Run,
        (changes, mark): (&[FileChange], u64),
        lsp: &mut RunServers,
        shell: &mut impl Shell,
        observer: &mut Observer<'_>,
    ) -> Event {
        self.catch_up(lsp, true, shell, observer).await;
        let edited: Vec<Edited<'_>> = changes
            .iter()
            .filter(|c| lsp.checks(&c.path))
            .map(|c| Edited {
                path: &c.path,
                before: c.original.as_deref(),
                after: &c.new_text,
            })
            .collect();
        if edited.is_empty() {
            return Event::Applied;
        }
        shell.progress(&format!(
            "checking the edit with the language server (iteration {})",
            run.iterations().max(1)
        ));
        let checked = match &lsp.editor {
            Some(editor) => self.editor_check(editor, &edited, mark).await,
            None => match &mut lsp.servers {
                Some(servers) => servers.check(&edited).await,
                None => return Event::Applied,
            },
        };
        for w in &checked.warnings {
            shell.warn(w);
        }
        if !checked.checked {
            return Event::Applied;
        }
        let lines = lines(&checked.new_errors);
        observer.record(RunEvent::Diagnostics {
            files: edited.iter().map(|e| e.path.to_string()).collect(),
            errors: lines.clone(),
            before_edit: false,
            wait_ms: checked.wait_ms,
        });
        if lines.is_empty() {
            return Event::Applied;
        }
        shell.progress(&format!(
            "the language server reports {} new error(s): {}",
            lines.len(),
            lines[0]
        ));
        lsp.reported.extend(lines.iter().cloned());
        Event::AppliedWithErrors(lines.join("\n"))
    }
}

impl Drive<'_> {
    /// An edit checked with the editor's forwarded diagnostics: each file's errors published
    /// by `mark` against those published since, within `lsp_servers.wait_ms` (2 s for a file
    /// the editor never published diagnostics of). A file the editor published nothing about
    /// in time is left unchecked.
    async fn editor_check(&self, editor: &Forwarded, edited: &[Edited<'_>], mark: u64) -> Checked {
        let started = tokio::time::Instant::now();
        let wait = Duration::from_millis(self.config.lsp_servers.wait_ms);
        let mut out = Checked::default();
        for file in edited {
            let deadline = started
                + match editor.known(file.path) {
                    true => wait,
                    false => wait.min(EDITOR_UNKNOWN_WAIT),
                };
            let before = editor.at(file.path, mark);
            let Some(after) = editor.after(file.path, mark, EDITOR_QUIET, deadline).await else {
                continue;
            };
            out.checked = true;
            let before_text = file.before.unwrap_or("");
            out.new_errors
                .extend(introduced(&before, &after, before_text, file.after));
        }
        out.wait_ms = started.elapsed().as_millis() as u64;
        out
    }

    /// The mark to take before applying a change: the editor's publications so far.
    pub(super) fn editor_mark(lsp: &RunServers) -> u64 {
        lsp.editor.as_ref().map_or(0, |e| e.mark())
    }
}

/// The errors before the first edit, as found: warnings shown, journaled, and kept as the
/// context's first piece when there are any.
fn took_before(
    files: &[String],
    checked: Checked,
    lsp: &mut RunServers,
    shell: &mut impl Shell,
    observer: &mut Observer<'_>,
) {
    for w in &checked.warnings {
        shell.warn(w);
    }
    if !checked.checked {
        return;
    }
    let lines = lines(&checked.new_errors);
    observer.record(RunEvent::Diagnostics {
        files: files.to_vec(),
        errors: lines.clone(),
        before_edit: true,
        wait_ms: checked.wait_ms,
    });
    if !lines.is_empty() {
        lsp.before = Some(format!(
            "Errors the project's language server already reports in these files, before any edit (not yours unless the goal is about them):\n{}\n\n",
            lines.join("\n")
        ));
    }
}

fn lines(errors: &[FileError]) -> Vec<String> {
    errors.iter().map(FileError::line_text).collect()
}
