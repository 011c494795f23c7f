//! `/rollback [RUN] [force]`: a whole run rolled back from its git checkpoint (docs/git.md).
//! When the client offered `fs/read_text_file` and `fs/write_text_file`, the files are
//! compared as its buffers have them and written back through it, as `/undo` does, so an
//! unsaved edit counts as a change and its buffers see the rollback; files the run created
//! are deleted on disk (ACP has no delete), and so are written what the client cannot take
//! (bytes that are not UTF-8, symbolic links).

use std::collections::BTreeMap;
use std::path::PathBuf;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::WriteTextFileRequest;
use agent_ls_core::edit::FileText;
use agent_ls_runtime::drive::{RecordedRunError, recorded_run};
use agent_ls_runtime::files::FileError;
use agent_ls_runtime::git::checkpoint::{self, Restore, RollbackError, RollbackPlan};
use agent_ls_runtime::git::{GitError, Repo};

use super::client::{ClientFs, read_through};

/// Why a run was not rolled back, or not whole.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Recorded(#[from] RecordedRunError),
    #[error(transparent)]
    Rollback(#[from] RollbackError),
    #[error(transparent)]
    Path(#[from] FileError),
    /// Boxed: the protocol's error is large, and this one is rare.
    #[error("the client did not write {file}: {reason}")]
    ClientWrite {
        file: String,
        reason: Box<agent_client_protocol::Error>,
    },
    #[error("{file}: {reason}")]
    Mode {
        file: String,
        reason: std::io::Error,
    },
}

/// Whether run `run_id` is rolled back: it changed files, and each holds its checkpoint's
/// content again (by a rollback from any surface, or put back by hand). Nothing records a
/// rollback, and the files are what the user cares about.
pub(super) fn is_rolled_back(root: &std::path::Path, run_id: &str) -> bool {
    let Ok(repo) = Repo::discover(root) else {
        return false;
    };
    let Ok(recorded) = recorded_run(root, &repo, Some(run_id)) else {
        return false;
    };
    let Ok(mut plan) = checkpoint::plan_rollback(&repo, &recorded.checkpoint, &recorded.files)
    else {
        return false;
    };
    let already = plan.take_restored(&repo, &BTreeMap::new());
    !already.is_empty() && plan.files.is_empty() && plan.left_out.is_empty()
}

/// `/rollback ...`'s run (default: the latest with a checkpoint) and whether it is forced;
/// `None` when `command` is not `/rollback`.
pub(super) fn parse(command: &str) -> Option<(Option<String>, bool)> {
    let rest = command.strip_prefix("/rollback")?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let mut run = None;
    let mut force = false;
    for word in rest.split_whitespace() {
        match word {
            "force" | "--force" => force = true,
            w => run = Some(w.to_string()),
        }
    }
    Some((run, force))
}

/// Rolls the run back and says what was done, or why nothing was.
pub(super) async fn answer(
    (conn, session): (ConnectionTo<Client>, String),
    root: PathBuf,
    fs: ClientFs,
    (run, force): (Option<String>, bool),
) -> String {
    let planned = tokio::task::block_in_place(|| {
        let repo = Repo::discover(&root)?;
        let recorded = recorded_run(&root, &repo, run.as_deref())?;
        let plan = checkpoint::plan_rollback(&repo, &recorded.checkpoint, &recorded.files)?;
        Ok::<_, Failure>((repo, recorded, plan))
    });
    let (repo, recorded, mut plan) = match planned {
        Ok(p) => p,
        Err(e) => return format!("nothing was rolled back: {e}"),
    };
    let id = &recorded.run_id;
    if !plan.left_out.is_empty() && !force {
        return format!(
            "nothing was rolled back: run {id} changed files its checkpoint left out (too big): {}; /rollback force rolls back the other files",
            plan.left_out.join(", ")
        );
    }
    // The files as the client's buffers have them, so an unsaved edit counts.
    let mut texts = BTreeMap::new();
    if fs.read {
        for (f, _) in plan.files.iter().filter(|(f, _)| root.join(f).is_file()) {
            if let FileText::Text(t) = read_through(&conn, &session, &root, fs, f) {
                texts.insert(f.clone(), t.into_bytes());
            }
        }
    }
    // A file that already holds the checkpoint's content (rolled back before, or put back by
    // hand) is no conflict and needs nothing: a second /rollback changes nothing.
    let already = plan.take_restored(&repo, &texts);
    if !already.is_empty() && plan.files.is_empty() {
        return format!("run {id} is rolled back already: its files hold the checkpoint's content");
    }
    let names: Vec<String> = plan.files.iter().map(|(f, _)| f.clone()).collect();
    let changed = tokio::task::block_in_place(|| {
        checkpoint::changed_since(&repo, &recorded.files, &names, &texts)
    });
    match changed {
        Ok(c) if !c.is_empty() && !force => {
            return format!(
                "nothing was rolled back: changed since run {id}: {}; rolling back would lose those changes (/rollback force rolls back anyway)",
                c.join(", ")
            );
        }
        Ok(_) => {}
        Err(e) => return format!("nothing was rolled back: {e}"),
    }
    let done = if fs.write {
        write_through((&conn, &session), &repo, &root, plan).await
    } else {
        tokio::task::block_in_place(|| checkpoint::apply(&repo, &plan)).map_err(Failure::from)
    };
    let note = if recorded.interrupted {
        format!("run {id} did not finish; its files are taken from the steps it recorded\n")
    } else {
        String::new()
    };
    if done.as_ref().is_ok_and(|f| !f.is_empty()) {
        tokio::task::block_in_place(|| agent_ls_runtime::memory::note_rollback_in(&root, id));
    }
    match done {
        Ok(files) if files.is_empty() => format!("{note}run {id} changed no files"),
        Ok(files) => format!("{note}rolled back run {id}: {}", files.join(", ")),
        Err(e) => format!("{note}run {id} was not rolled back whole: {e}"),
    }
}

/// Writes the text files back through the client and the rest (deletions, links, bytes that
/// are not UTF-8) on disk; the files rolled back.
async fn write_through(
    (conn, session): (&ConnectionTo<Client>, &str),
    repo: &Repo,
    root: &std::path::Path,
    plan: RollbackPlan,
) -> Result<Vec<String>, Failure> {
    let mut on_disk = Vec::new();
    let mut done = Vec::new();
    for (file, restore) in plan.files {
        let Restore::File { bytes, executable } = &restore else {
            on_disk.push((file, restore));
            continue;
        };
        let Ok(text) = String::from_utf8(bytes.clone()) else {
            on_disk.push((file, restore));
            continue;
        };
        let path = agent_ls_runtime::files::resolve(root, &file)?;
        let request = WriteTextFileRequest::new(session.to_string(), path.clone(), text);
        if let Err(reason) = conn.send_request(request).block_task().await {
            let reason = Box::new(reason);
            return Err(Failure::ClientWrite { file, reason });
        }
        if let Err(reason) = checkpoint::set_executable(&path, *executable) {
            return Err(Failure::Mode { file, reason });
        }
        done.push(file);
    }
    let rest = RollbackPlan {
        files: on_disk,
        left_out: Vec::new(),
    };
    let written = tokio::task::block_in_place(|| checkpoint::apply(repo, &rest))?;
    done.extend(written);
    done.sort();
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn rollback_takes_a_run_and_force_in_any_order() {
        assert_eq!(parse("/rollback"), Some((None, false)));
        assert_eq!(parse("/rollback force"), Some((None, true)));
        assert_eq!(
            parse("/rollback run_1 force"),
            Some((Some("run_1".into()), true))
        );
        assert_eq!(parse("/rollbacks"), None);
        assert_eq!(parse("/undo"), None);
    }
}
