//! The client at the other end, as every part of `agent-ls acp` reaches it: what it said it can
//! do with files, session updates sent to it, and a file read through its buffers. Below the
//! rest of `acp/`: it names none of the other files.

use std::path::Path;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, ReadTextFileRequest, SessionNotification, SessionUpdate,
};
use agent_ls_core::edit::FileText;

/// What the client said it can do.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ClientFs {
    pub read: bool,
    pub write: bool,
}

/// Sends a session update; one that cannot be sent is only logged (the client went away).
pub(super) fn notify(conn: &ConnectionTo<Client>, session: &str, update: SessionUpdate) {
    if let Err(e) = conn.send_notification(SessionNotification::new(session.to_string(), update)) {
        tracing::debug!("a session update was not sent: {e}");
    }
}

pub(super) fn text_chunk(text: impl Into<String>) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text.into()))
}

/// Says `text` in the session as the agent's message.
pub(super) fn say(conn: &ConnectionTo<Client>, session: &str, text: impl Into<String>) {
    notify(
        conn,
        session,
        SessionUpdate::AgentMessageChunk(text_chunk(text)),
    );
}

/// A file's text as the client has it (the editor's buffer, unsaved edits included) when it
/// offers fs/read_text_file, else, or when it cannot say, as the disk has it.
pub(super) fn read_through(
    conn: &ConnectionTo<Client>,
    session: &str,
    root: &Path,
    fs: ClientFs,
    relative: &str,
) -> FileText {
    if !fs.read {
        return agent_ls_runtime::files::read_for_plan(root, relative);
    }
    let path = match agent_ls_runtime::files::resolve(root, relative) {
        Ok(p) => p,
        Err(e) => return FileText::Refused(e.to_string()),
    };
    if !path.is_file() {
        return agent_ls_runtime::files::read_for_plan(root, relative);
    }
    let request = conn.send_request(ReadTextFileRequest::new(session.to_string(), path));
    // A client that does not answer costs five seconds, then the disk is read.
    let answer = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(tokio::time::timeout(
            std::time::Duration::from_secs(5),
            request.block_task(),
        ))
    });
    match answer {
        Ok(Ok(r)) => FileText::Text(r.content),
        _ => agent_ls_runtime::files::read_for_plan(root, relative),
    }
}
