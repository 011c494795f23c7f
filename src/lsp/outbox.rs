//! The one ordered way out to the client. Every message bound for it (notifications,
//! `$/progress`, diagnostics, server-to-client requests, and tower-lsp's responses) is put on
//! one queue, in the order it was produced, and one task writes that queue to stdout.
//!
//! Putting a message on the queue never waits, so the order on the wire is the order of the
//! calls, whichever task made them. A server-to-client request is enqueued at once and its
//! answer awaited separately: the writer never waits on the client.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use tokio::sync::{mpsc, oneshot};
use tower_lsp_server::ls_types::notification::{
    LogMessage, Notification, Progress, PublishDiagnostics, ShowMessage,
};
use tower_lsp_server::ls_types::request::{Request, ShowMessageRequest};
use tower_lsp_server::ls_types::{
    Diagnostic, LogMessageParams, MessageActionItem, MessageType, ProgressParams,
    ProgressParamsValue, ProgressToken, PublishDiagnosticsParams, ShowMessageParams,
    ShowMessageRequestParams, Uri, WorkDoneProgress,
};
use tracing::{debug, warn};

/// What the writer task takes off the queue.
enum Item {
    Frame(Vec<u8>),
    /// Write what came before, then stop.
    Close,
}

/// The answer the client gave to one of our requests.
type Answer = Result<Value, Value>;

/// Requests sent to the client and not answered yet, by id.
type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Answer>>>>;

/// The sending side, cloned into the session and every subsystem.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Item>,
    pending: Pending,
    next_id: Arc<AtomicI64>,
}

/// Why a request to the client brought no usable answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RequestError {
    #[error("the client answered with an error: {0}")]
    Client(String),
    #[error("the client's answer has the wrong shape: {0}")]
    Shape(String),
    #[error("the connection to the client is closed")]
    Closed,
}

impl Outbox {
    /// A new queue and the receiving end for `write`.
    pub fn new() -> (Outbox, Writer) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Outbox {
                tx,
                pending: Arc::default(),
                next_id: Arc::new(AtomicI64::new(1)),
            },
            Writer { rx },
        )
    }

    /// Enqueues one whole message body (a JSON-RPC message already serialised).
    pub fn frame(&self, body: Vec<u8>) {
        let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        out.extend_from_slice(&body);
        if self.tx.send(Item::Frame(out)).is_err() {
            debug!("a message for the client was dropped: the writer has stopped");
        }
    }

    fn message(&self, message: &impl Serialize) {
        match serde_json::to_vec(message) {
            Ok(body) => self.frame(body),
            Err(e) => warn!("a message for the client could not be serialised: {e}"),
        }
    }

    pub fn notify<N: Notification>(&self, params: N::Params) {
        self.message(&serde_json::json!({
            "jsonrpc": "2.0",
            "method": N::METHOD,
            "params": params,
        }));
    }

    /// Sends a request to the client now and returns a future of its answer. The request is
    /// on the queue before this returns, so it keeps its place among the other messages.
    pub fn request<R>(
        &self,
        params: R::Params,
    ) -> impl Future<Output = Result<R::Result, RequestError>> + Send + 'static
    where
        R: Request,
        R::Result: Send + 'static,
    {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id, reply);
        }
        // Registered before it is sent, so an answer can never arrive unclaimed.
        let waiter = Waiter {
            id,
            pending: self.pending.clone(),
            tx: self.tx.downgrade(),
        };
        self.message(&serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": R::METHOD,
            "params": params,
        }));
        async move {
            let _waiter = waiter;
            match answer.await {
                Ok(Ok(result)) => serde_json::from_value(result)
                    .map_err(|e| RequestError::Shape(format!("{}: {e}", R::METHOD))),
                Ok(Err(error)) => Err(RequestError::Client(
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .map_or_else(|| error.to_string(), String::from),
                )),
                Err(_) => Err(RequestError::Closed),
            }
        }
    }

    /// Hands the client's answer to the request that waits for it. `false` when no request of
    /// ours has that id (the answer is then not ours to take).
    pub fn answer(&self, id: &Value, answer: Answer) -> bool {
        let Some(id) = id.as_i64() else {
            return false;
        };
        let waiting = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        match waiting {
            Some(reply) => {
                // The requester may have given up meanwhile (a cancelled run); that is fine.
                let _ = reply.send(answer);
                true
            }
            None => false,
        }
    }

    /// Asks the user with `window/showMessageRequest`, one button a title. The answer is the
    /// title chosen, or `None` when the message was dismissed or the client did not answer.
    pub fn ask(
        &self,
        typ: MessageType,
        message: String,
        titles: &[&str],
    ) -> impl Future<Output = Option<String>> + Send + 'static {
        let actions = titles
            .iter()
            .map(|t| MessageActionItem {
                title: t.to_string(),
                properties: Default::default(),
            })
            .collect();
        let request = self.request::<ShowMessageRequest>(ShowMessageRequestParams {
            typ,
            message,
            actions: Some(actions),
        });
        async move { request.await.ok().flatten().map(|item| item.title) }
    }

    pub fn show_message(&self, typ: MessageType, message: impl Into<String>) {
        self.notify::<ShowMessage>(ShowMessageParams {
            typ,
            message: message.into(),
        });
    }

    /// A line for the client's log: where a client without `workDoneProgress` (eglot 1.9)
    /// can still follow a run.
    pub fn log_message(&self, typ: MessageType, message: impl Into<String>) {
        self.notify::<LogMessage>(LogMessageParams {
            typ,
            message: message.into(),
        });
    }

    pub fn publish_diagnostics(
        &self,
        uri: Uri,
        diagnostics: Vec<Diagnostic>,
        version: Option<i32>,
    ) {
        self.notify::<PublishDiagnostics>(PublishDiagnosticsParams {
            uri,
            diagnostics,
            version,
        });
    }

    pub fn progress(&self, token: ProgressToken, value: WorkDoneProgress) {
        self.notify::<Progress>(ProgressParams {
            token,
            value: ProgressParamsValue::WorkDone(value),
        });
    }

    /// Asks the writer to stop once everything enqueued before is written.
    pub fn close(&self) {
        let _ = self.tx.send(Item::Close);
    }
}

/// Removes a request's entry when whoever waited for its answer stops waiting.
struct Waiter {
    id: i64,
    pending: Pending,
    /// Weak, so a request still waiting never keeps the writer from ending.
    tx: mpsc::WeakUnboundedSender<Item>,
}

impl Drop for Waiter {
    /// A request given up on before the client answered (a review question that an undo, a
    /// rollback or a new run answered) is cancelled with `$/cancelRequest`, so a client can
    /// take its question off the screen rather than leave one that no longer matters.
    fn drop(&mut self) {
        let unanswered = self
            .pending
            .lock()
            .map(|mut p| p.remove(&self.id).is_some())
            .unwrap_or(false);
        if let (true, Some(tx)) = (unanswered, self.tx.upgrade()) {
            let body = serde_json::json!({
                "jsonrpc": "2.0",
                "method": "$/cancelRequest",
                "params": {"id": self.id},
            })
            .to_string();
            let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
            out.extend_from_slice(body.as_bytes());
            let _ = tx.send(Item::Frame(out));
        }
    }
}

/// The receiving end of the queue.
pub struct Writer {
    rx: mpsc::UnboundedReceiver<Item>,
}

impl Writer {
    /// Writes every message in queue order until `close` (or until no sender is left),
    /// flushing whenever the queue runs empty. Stops early when the output is gone. Runs on a
    /// thread of its own, so writing costs no hop through the async runtime.
    pub fn write_blocking(mut self, mut output: impl Write) {
        while let Some(item) = self.rx.blocking_recv() {
            let mut next = Some(item);
            while let Some(item) = next.take() {
                match item {
                    Item::Frame(bytes) => {
                        if output.write_all(&bytes).is_err() {
                            return;
                        }
                    }
                    Item::Close => {
                        let _ = output.flush();
                        return;
                    }
                }
                next = self.rx.try_recv().ok();
            }
            if output.flush().is_err() {
                return;
            }
        }
        let _ = output.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_lsp_server::ls_types::request::ShowMessageRequest;

    fn frames(bytes: &[u8]) -> Vec<Value> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while let Some(at) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
            let header = std::str::from_utf8(&rest[..at]).unwrap();
            let len: usize = header
                .trim_start_matches("Content-Length: ")
                .parse()
                .unwrap();
            let body = &rest[at + 4..at + 4 + len];
            out.push(serde_json::from_slice(body).unwrap());
            rest = &rest[at + 4 + len..];
        }
        out
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn messages_leave_in_the_order_they_were_enqueued_and_answers_find_their_request() {
        let (outbox, writer) = Outbox::new();
        outbox.show_message(MessageType::INFO, "first");
        let answer = outbox.request::<ShowMessageRequest>(
            tower_lsp_server::ls_types::ShowMessageRequestParams {
                typ: MessageType::INFO,
                message: "second".into(),
                actions: None,
            },
        );
        outbox.frame(br#"{"jsonrpc":"2.0","id":9,"result":null}"#.to_vec());
        outbox.close();
        let out = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            writer.write_blocking(&mut out);
            out
        })
        .await
        .unwrap();
        let sent = frames(&out);
        assert_eq!(sent[0]["params"]["message"], "first");
        assert_eq!(sent[1]["params"]["message"], "second");
        assert_eq!(sent[2]["id"], 9);
        assert!(outbox.answer(&sent[1]["id"], Ok(Value::Null)));
        assert!(matches!(answer.await, Ok(None)));
        assert!(!outbox.answer(&serde_json::json!(12345), Ok(Value::Null)));
    }

    #[tokio::test]
    async fn a_request_given_up_leaves_nothing_pending() {
        let (outbox, _writer) = Outbox::new();
        let answer = outbox.request::<ShowMessageRequest>(
            tower_lsp_server::ls_types::ShowMessageRequestParams {
                typ: MessageType::INFO,
                message: "q".into(),
                actions: None,
            },
        );
        drop(answer);
        assert!(outbox.pending.lock().unwrap().is_empty());
    }
}
