//! The next-edit suggestion (`completion.next_edit`, docs/completion.md): after the user
//! edits a document, the coder role's model is asked for the one edit that should follow
//! elsewhere in it, from the few recent edits the session keeps (O(1) each in `didChange`).
//! The prediction is kept per document and offered, while the file still holds the text it
//! replaces, as the code action "Agent: apply the suggested next edit" (a `WorkspaceEdit`
//! the user chooses; nothing is applied otherwise) and, when it lies on one line at or
//! below the cursor's, as an inline completion item replacing that line's text. One
//! prediction in flight per document, started by an inline completion request that finds
//! newer edits than the last prediction's, and given up after `TIMEOUT`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tower_lsp_server::ls_types::{
    CodeAction, CodeActionKind, CodeActionOrCommand, InlineCompletionItem, Range, TextEdit, Uri,
    WorkspaceEdit,
};

use super::convert;
use super::session::SessionHandle;
use agent_ls_core::completion::next_edit::{self, Predicted, RecentEdit};
use agent_ls_core::conversation::{Message, Role};
use agent_ls_core::text::{Buffer, Encoding, to_position};
use agent_ls_runtime::model::{Models, Request};

/// The code action's title.
pub const TITLE: &str = "Agent: apply the suggested next edit";
/// The longest a prediction may take.
const TIMEOUT: Duration = Duration::from_secs(20);
/// The most bytes of the file the prompt shows.
const PROMPT_BYTES: usize = 6000;

/// The predictions, and the one call in flight, per document.
#[derive(Default)]
pub struct NextEdits {
    inflight: Mutex<HashMap<Uri, CancellationToken>>,
    predicted: Mutex<HashMap<Uri, Prediction>>,
}

struct Prediction {
    /// The document's edit count the prediction was made after.
    after: u64,
    /// The line of the latest edit then: the occurrence of `old` nearest it is meant.
    near: usize,
    edit: Predicted,
}

/// What a prediction is made from.
pub struct Asked {
    pub uri: Uri,
    pub root: PathBuf,
    pub path: String,
    pub buffer: Buffer,
    pub count: u64,
    pub edits: Vec<RecentEdit>,
}

impl NextEdits {
    /// Starts a prediction for `asked` unless one is in flight for its document or the last
    /// one already saw its edits.
    pub fn predict(self: &Arc<Self>, session: &SessionHandle, asked: Asked) {
        if asked.edits.is_empty() {
            return;
        }
        let seen = lock(&self.predicted)
            .get(&asked.uri)
            .is_some_and(|p| p.after >= asked.count);
        let cancel = CancellationToken::new();
        {
            let mut inflight = lock(&self.inflight);
            if seen || inflight.contains_key(&asked.uri) {
                return;
            }
            inflight.insert(asked.uri.clone(), cancel.clone());
        }
        let (me, session) = (self.clone(), session.clone());
        tokio::spawn(async move {
            let uri = asked.uri.clone();
            let found = tokio::time::timeout(TIMEOUT, ask(&session, &asked, &cancel)).await;
            lock(&me.inflight).remove(&uri);
            let mut predicted = lock(&me.predicted);
            match found {
                Ok(Some(edit)) => {
                    let near = asked.edits.last().map_or(0, |e| e.line as usize);
                    let after = asked.count;
                    predicted.insert(uri, Prediction { after, near, edit });
                }
                // The model sees nothing to follow: an older prediction goes too.
                Ok(None) => {
                    predicted.remove(&uri);
                }
                Err(_) => tracing::debug!("next-edit prediction timed out"),
            }
        });
    }

    /// The prediction for `uri` where it lands in `buffer` now, as a range and its text.
    fn located(&self, uri: &Uri, buffer: &Buffer, encoding: Encoding) -> Option<(Range, String)> {
        let (near, edit) = {
            let map = lock(&self.predicted);
            let p = map.get(uri)?;
            (p.near, p.edit.clone())
        };
        let text = buffer.text();
        let (start, end) = next_edit::locate(&text, &edit, near)?;
        let rope = buffer.rope();
        let at = |byte: usize| {
            let c = rope.byte_to_char(byte);
            convert::position_to_lsp(to_position(&rope, c, encoding))
        };
        Some((Range::new(at(start), at(end)), edit.new))
    }

    /// The code action applying the prediction, when the file still holds its text.
    pub fn action(
        &self,
        uri: &Uri,
        buffer: &Buffer,
        encoding: Encoding,
    ) -> Option<CodeActionOrCommand> {
        let (range, new_text) = self.located(uri, buffer, encoding)?;
        let changes = HashMap::from([(uri.clone(), vec![TextEdit { range, new_text }])]);
        Some(CodeActionOrCommand::CodeAction(CodeAction {
            title: TITLE.into(),
            kind: Some(CodeActionKind::REFACTOR_REWRITE),
            edit: Some(WorkspaceEdit {
                changes: Some(changes),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    /// The prediction as an inline item, when it replaces text of one line at or below
    /// `line` (an inline item's range must stay on one line).
    pub fn item(
        &self,
        uri: &Uri,
        buffer: &Buffer,
        encoding: Encoding,
        line: u32,
    ) -> Option<InlineCompletionItem> {
        let (range, new_text) = self.located(uri, buffer, encoding)?;
        if range.start.line != range.end.line || range.start.line < line || new_text.contains('\n')
        {
            return None;
        }
        Some(InlineCompletionItem {
            insert_text: new_text,
            filter_text: None,
            range: Some(range),
            command: None,
            insert_text_format: None,
        })
    }
}

/// Asks the coder role's model for the next edit of `asked`'s document.
async fn ask(
    session: &SessionHandle,
    asked: &Asked,
    cancel: &CancellationToken,
) -> Option<Predicted> {
    let config = session.query(|s| s.config().config.clone()).await.ok()?;
    let models = Models::new(&config, Some(&asked.root));
    let text = asked.buffer.text();
    let request = Request {
        messages: vec![
            Message::system(next_edit::SYSTEM),
            Message::user(next_edit::prompt(
                &asked.path,
                &text,
                &asked.edits,
                PROMPT_BYTES,
            )),
        ],
        max_tokens: Some(512),
        ..Default::default()
    };
    let answer = models.call(Role::Coder, &request, cancel, None).await;
    let answer = answer
        .map_err(|e| tracing::warn!("next-edit prediction: {e}"))
        .ok()?;
    next_edit::parse(&answer.text)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
