//! `/rewind STEP INSTRUCTION` (docs/rewind.md): the step's run taken back to that step, code
//! and conversation together, then INSTRUCTION run from there as a new run of the session.
//! The runtime decides it (`runs::rewind::plan`); its files are read and written through the
//! client when it offers `fs/*_text_file`, as an undo's are, so its buffers see the move.
//! Starting the run is `mod.rs`'s, as for any goal.

use std::path::PathBuf;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::WriteTextFileRequest;
use agent_ls_core::edit::{FileText, Limits};
use agent_ls_runtime::lock::{LockError, RunLock};
use agent_ls_runtime::runs::rewind::{self, NotRewound, Rewind};

use super::client::{ClientFs, read_through};

/// Why nothing (or not all) was rewound.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unrewound {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Refused(#[from] NotRewound),
    #[error("the rewind was not written whole: the client did not write {path}: {why}")]
    Write { path: String, why: String },
}

/// How to write a rewind, said to one without both its parts.
pub(super) const USAGE: &str = "/rewind STEP INSTRUCTION: the step's id (/status and /undo name steps by it), then what to do instead from there";

/// `/rewind STEP INSTRUCTION`: `Some(Some((step, instruction)))`; `Some(None)` for a rewind
/// without both (answered with `USAGE`); `None` when the prompt is not a rewind.
pub(super) fn parse(command: &str) -> Option<Option<(u64, String)>> {
    let rest = command.strip_prefix("/rewind")?;
    if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
        return None;
    }
    let rest = rest.trim();
    let (step, instruction) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    Some(match (step.parse::<u64>(), instruction.trim()) {
        (Ok(step), i) if !i.is_empty() => Some((step, i.to_string())),
        _ => None,
    })
}

/// Takes the step's run back to it under the workspace's lock, through the client when it
/// writes; says what was undone.
pub(super) async fn take_back(
    (conn, session): (ConnectionTo<Client>, String),
    root: PathBuf,
    fs: ClientFs,
    limits: Limits,
    step: u64,
) -> Result<Rewind, Unrewound> {
    let _lock = RunLock::acquire(&root, &format!("rewind to step {step}"))?;
    if !fs.write {
        return tokio::task::block_in_place(|| Ok(rewind::on_disk(&root, step, &limits)?));
    }
    let read = |rel: &str| match read_through(&conn, &session, &root, fs, rel) {
        FileText::Text(t) => Some(t),
        _ => None,
    };
    let r = rewind::plan(&root, step, &limits, read)?;
    for c in &r.changes {
        let failed = |why: String| Unrewound::Write {
            path: c.path.clone(),
            why,
        };
        let path =
            agent_ls_runtime::files::resolve(&root, &c.path).map_err(|e| failed(e.to_string()))?;
        let request = WriteTextFileRequest::new(session.clone(), path, c.new_text.clone());
        conn.send_request(request)
            .block_task()
            .await
            .map_err(|e| failed(e.to_string()))?;
    }
    // ACP has no delete: the files a later step created go on disk.
    agent_ls_runtime::steps::delete_created(&root, &r.deletes).map_err(NotRewound::from)?;
    rewind::settle(&root, &r)?;
    Ok(r)
}

/// What the session hears once the files are back.
pub(super) fn said(r: &Rewind) -> String {
    format!(
        "{}; the new run follows its conversation up to there",
        r.describe()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewind_takes_a_step_then_the_instruction() {
        assert_eq!(
            parse("/rewind 3 instead, use a loop"),
            Some(Some((3, "instead, use a loop".to_string())))
        );
        assert_eq!(parse("/rewind 3"), Some(None));
        assert_eq!(parse("/rewind three do it"), Some(None));
        assert_eq!(parse("/rewinder 3 x"), None);
        assert_eq!(parse("fix it"), None);
    }
}
