//! `/rollback [RUN] [force]`: a whole run rolled back from its git checkpoint (docs/git.md).
//! When the client offered `fs/read_text_file` and `fs/write_text_file`, the files are
//! compared as its buffers have them and written back through it, as `/undo` does, so an
//! unsaved edit counts as a change and its buffers see the rollback; files the run created
//! are deleted on disk (ACP has no delete), and so are written what the client cannot take
//! (bytes that are not UTF-8, symbolic links).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::WriteTextFileRequest;
use agent_ls_core::edit::FileText;
use agent_ls_runtime::config::MemoryConfig;
use agent_ls_runtime::files::FileError;
use agent_ls_runtime::git::Repo;
use agent_ls_runtime::git::checkpoint::{self, Restore, RollbackPlan};
use agent_ls_runtime::runs::rollback::{self, NotRolledBack, Target};

use super::client::{ClientFs, read_through};

/// Why a run was not rolled back whole.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Rollback(#[from] NotRolledBack),
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
/// content again (by a rollback from any surface, or put back by hand).
pub(super) fn is_rolled_back(root: &Path, run_id: &str) -> bool {
    let target = Target::Run(Some(run_id.to_string()));
    rollback::plan(root, &target, true, &BTreeMap::new()).is_ok_and(|p| {
        !p.already.is_empty() && p.plan.files.is_empty() && p.plan.left_out.is_empty()
    })
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
    (root, memory): (PathBuf, MemoryConfig),
    fs: ClientFs,
    (run, force): (Option<String>, bool),
) -> String {
    // The files as the client's buffers have them, so an unsaved edit counts.
    let mut texts = BTreeMap::new();
    if fs.read {
        let target = Target::Run(run.clone());
        let files = tokio::task::block_in_place(|| {
            rollback::plan(&root, &target, true, &BTreeMap::new()).map(|p| p.files())
        });
        for f in files.unwrap_or_default() {
            if root.join(&f).is_file()
                && let FileText::Text(t) = read_through(&conn, &session, &root, fs, &f)
            {
                texts.insert(f, t.into_bytes());
            }
        }
    }
    let target = Target::Run(run);
    let planned =
        tokio::task::block_in_place(|| rollback::plan_here(&root, &target, force, &texts));
    let planned = match planned {
        Ok(p) => p,
        Err(e) => {
            let (id, force) = match e.refusal() {
                Some((id, _)) => (
                    format!(" (run {id})"),
                    " (/rollback force rolls back anyway)",
                ),
                None => (String::new(), ""),
            };
            return format!("nothing was rolled back{id}: {e}{force}");
        }
    };
    let id = &planned.id;
    if planned.plan.files.is_empty() && !planned.already.is_empty() {
        return format!("run {id} is rolled back already: its files hold the checkpoint's content");
    }
    let done = if fs.write {
        write_through(
            (&conn, &session),
            &planned.repo,
            &root,
            planned.plan.clone(),
        )
        .await
    } else {
        tokio::task::block_in_place(|| rollback::write(&planned)).map_err(Failure::from)
    };
    let note = if planned.interrupted {
        format!("run {id} did not finish; its files are taken from the steps it recorded\n")
    } else {
        String::new()
    };
    if done.as_ref().is_ok_and(|f| !f.is_empty())
        && let Err(e) = tokio::task::block_in_place(|| rollback::settle(&planned, &memory))
    {
        return format!("{note}rolled back run {id}, but the store did not record it: {e}");
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
    let written = tokio::task::block_in_place(|| checkpoint::apply(repo, &rest))
        .map_err(NotRolledBack::from)?;
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
