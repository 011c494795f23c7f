//! Hands state-changing notifications to the session owner at the moment the transport reads
//! them, so they apply in arrival order however tower-lsp schedules handler futures.
//!
//! tower-lsp-server calls `Service::call` once per message, sequentially, in the order the
//! messages were read (its `read_input` loop), and only then runs the returned futures
//! concurrently (tower-lsp#284). Sending the event from `call` itself, before any future
//! exists, is therefore the one place where the order is guaranteed by construction.

use std::task::{Context, Poll};

use futures::future::{BoxFuture, FutureExt};
use serde::de::DeserializeOwned;
use tower_lsp_server::jsonrpc::{Error, Request, Response};
use tower_service::Service;
use tracing::error;

use super::session::{Event, SessionHandle};

pub struct Ordered<S> {
    inner: S,
    session: SessionHandle,
}

impl<S> Ordered<S> {
    pub fn new(inner: S, session: SessionHandle) -> Self {
        Ordered { inner, session }
    }
}

impl<S> Service<Request> for Ordered<S>
where
    S: Service<Request, Response = Option<Response>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Option<Response>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Option<Response>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // Only notifications (no id) are taken here; a request with one of these names is
        // malformed and goes on to tower-lsp, which answers it with the proper error.
        if req.id().is_none() {
            let event = match req.method() {
                "textDocument/didOpen" => parse(&req).map(Event::Opened),
                "textDocument/didChange" => parse(&req).map(Event::Changed),
                "textDocument/didClose" => parse(&req).map(Event::Closed),
                "textDocument/didSave" => parse(&req).map(Event::Saved),
                "workspace/didChangeConfiguration" => parse(&req).map(Event::ConfigurationChanged),
                // tower-lsp 0.23 has no handler for it; a cancel button on our progress.
                "window/workDoneProgress/cancel" => {
                    parse::<tower_lsp_server::ls_types::WorkDoneProgressCancelParams>(&req)
                        .map(|p| Event::ProgressCancelled(p.token))
                }
                _ => return self.inner.call(req).boxed(),
            };
            // A notification cannot be answered, so a malformed one is logged and dropped.
            if let Some(event) = event {
                self.session.send(event);
            }
            return futures::future::ready(Ok(None)).boxed();
        }
        // tower-lsp swallows the error for unknown `$/` methods, which is right for
        // notifications but leaves a request unanswered; the specification says to answer it
        // with MethodNotFound. Every `$/` method the protocol defines is a notification.
        if let Some(id) = req.id().filter(|_| req.method().starts_with("$/")) {
            let response = Response::from_error(id.clone(), Error::method_not_found());
            return futures::future::ready(Ok(Some(response))).boxed();
        }
        self.inner.call(req).boxed()
    }
}

fn parse<T: DeserializeOwned>(req: &Request) -> Option<T> {
    let params = req.params().cloned().unwrap_or(serde_json::Value::Null);
    match serde_json::from_value(params) {
        Ok(p) => Some(p),
        Err(err) => {
            error!("ignored malformed {} notification: {err}", req.method());
            None
        }
    }
}
