//! Server-sent events from a streaming HTTP answer, with a limit on how long the stream may
//! stay silent.

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{Event, Eventsource};
use futures::{Stream, StreamExt};

use super::ModelError;

pub(crate) struct Events {
    inner: Pin<Box<dyn Stream<Item = Result<Event, String>> + Send>>,
    idle: Duration,
    provider: String,
}

impl Events {
    pub fn new(response: reqwest::Response, idle: Duration, provider: String) -> Self {
        let inner = response
            .bytes_stream()
            .eventsource()
            .map(|r| r.map_err(|e| e.to_string()));
        Events {
            inner: Box::pin(inner),
            idle,
            provider,
        }
    }

    /// The next event; `Ok(None)` when the stream ended. A stream that stays silent past the
    /// idle limit, or breaks, is a truncated answer (worth a retry).
    pub async fn next(&mut self) -> Result<Option<Event>, ModelError> {
        let truncated = |reason: String| ModelError::Truncated {
            provider: self.provider.clone(),
            reason,
        };
        match tokio::time::timeout(self.idle, self.inner.next()).await {
            Err(_) => Err(truncated(format!("no data for {} s", self.idle.as_secs()))),
            Ok(None) => Ok(None),
            Ok(Some(Ok(e))) => Ok(Some(e)),
            Ok(Some(Err(e))) => Err(truncated(e)),
        }
    }
}
