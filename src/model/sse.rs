//! Server-sent events from a streaming HTTP answer, with a limit on how long the stream may
//! stay silent.

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{Event, Eventsource};
use futures::{Stream, StreamExt};

pub(crate) enum SseError {
    /// Nothing arrived for the idle limit.
    Stalled,
    /// The connection failed or the bytes were not an event stream.
    Read(String),
}

pub(crate) struct Events {
    inner: Pin<Box<dyn Stream<Item = Result<Event, String>> + Send>>,
    idle: Duration,
}

impl Events {
    pub fn new(response: reqwest::Response, idle: Duration) -> Self {
        let inner = response
            .bytes_stream()
            .eventsource()
            .map(|r| r.map_err(|e| e.to_string()));
        Events {
            inner: Box::pin(inner),
            idle,
        }
    }

    /// The next event; `Ok(None)` when the stream ended.
    pub async fn next(&mut self) -> Result<Option<Event>, SseError> {
        match tokio::time::timeout(self.idle, self.inner.next()).await {
            Err(_) => Err(SseError::Stalled),
            Ok(None) => Ok(None),
            Ok(Some(Ok(e))) => Ok(Some(e)),
            Ok(Some(Err(e))) => Err(SseError::Read(e)),
        }
    }
}
