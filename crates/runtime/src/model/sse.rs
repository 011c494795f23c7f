//! Reading a model server's answer with bounds: server-sent events split into lines without
//! ever rescanning what was read (each byte is looked at once, so a line that never ends costs
//! no more than its bytes), a cap on the bytes of one answer and on the length of one line, and
//! a limit on how long the stream may stay silent. Every read is an await, so the call's
//! timeout and its cancellation are heard whatever the server sends.
//!
//! Written here rather than with eventsource-stream, which parses its whole buffer again for
//! every chunk: one long line without a newline kept a process busy for minutes.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};

use super::ModelError;

/// How much of an answer is read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Bytes of one answer, all events together.
    pub max_bytes: usize,
    /// Bytes of one line.
    pub max_line: usize,
    /// The longest the stream may stay silent.
    pub idle: Duration,
}

impl Limits {
    /// The bounds for an answer of at most `max_tokens` tokens: a streamed token costs an
    /// event of a few hundred bytes, and 1 MiB is room for everything around them.
    pub fn for_answer(max_tokens: u32, idle: Duration) -> Limits {
        Limits {
            max_bytes: (1 << 20) + max_tokens as usize * 512,
            max_line: 1 << 20,
            idle,
        }
    }
}

/// One server-sent event.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Event {
    pub event: String,
    pub data: String,
}

type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

pub(crate) struct Events {
    inner: ByteStream,
    limits: Limits,
    provider: String,
    /// Bytes read and not yet split into lines.
    buf: Vec<u8>,
    /// How far `buf` has been searched for a line end.
    scanned: usize,
    total: usize,
    ended: bool,
    pending: Event,
    /// The byte sequences of the answer that are not UTF-8, each with where it starts in
    /// the stream; adjacent ones are one.
    bad: Vec<(usize, Vec<u8>)>,
    /// Where in the stream `buf` starts.
    consumed: usize,
}

impl Events {
    pub fn new(response: reqwest::Response, limits: Limits, provider: String) -> Self {
        Events {
            inner: Box::pin(response.bytes_stream()),
            limits,
            provider,
            buf: Vec::new(),
            scanned: 0,
            total: 0,
            ended: false,
            pending: Event::default(),
            bad: Vec::new(),
            consumed: 0,
        }
    }

    fn too_long(&self, what: String) -> ModelError {
        ModelError::BadAnswer {
            provider: self.provider.clone(),
            reason: what,
        }
    }

    /// The next event; `Ok(None)` when the stream ended. A stream that stays silent past the
    /// idle limit, or breaks, is a truncated answer (worth a retry); one over its bounds is a
    /// bad answer.
    pub async fn next(&mut self) -> Result<Option<Event>, ModelError> {
        loop {
            // Every complete line in the buffer first, each searched for once.
            let mut start = 0;
            while let Some(at) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                let end = self.scanned + at;
                let line = &self.buf[start..end];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let line = decode(line, self.consumed + start, &mut self.bad);
                self.scanned = end + 1;
                start = self.scanned;
                if let Some(event) = self.field(&line) {
                    self.consumed += start;
                    self.buf.drain(..start);
                    self.scanned -= start;
                    return Ok(Some(event));
                }
            }
            self.consumed += start;
            self.buf.drain(..start);
            self.scanned = self.buf.len();
            if self.buf.len() > self.limits.max_line {
                return Err(self.too_long(format!(
                    "a line of the answer is over {} bytes",
                    self.limits.max_line
                )));
            }
            if self.ended {
                // A last event without its blank line still counts.
                let event = std::mem::take(&mut self.pending);
                return Ok((!event.data.is_empty()).then_some(event));
            }
            match tokio::time::timeout(self.limits.idle, self.inner.next()).await {
                Err(_) => {
                    return Err(ModelError::Truncated {
                        provider: self.provider.clone(),
                        reason: format!("no data for {} s", self.limits.idle.as_secs()),
                    });
                }
                Ok(None) => {
                    if !self.buf.is_empty() {
                        // The last line, without its newline.
                        self.buf.push(b'\n');
                    }
                    self.ended = true;
                }
                Ok(Some(Err(e))) => {
                    return Err(ModelError::Truncated {
                        provider: self.provider.clone(),
                        reason: e.to_string(),
                    });
                }
                Ok(Some(Ok(chunk))) => {
                    self.total += chunk.len();
                    if self.total > self.limits.max_bytes {
                        return Err(self.too_long(format!(
                            "the answer is over {} bytes (model.max_tokens bounds it)",
                            self.limits.max_bytes
                        )));
                    }
                    self.buf.extend_from_slice(&chunk);
                }
            }
        }
    }

    /// The bytes of the answer that were not UTF-8, in hex (`0xff 0xfe`), one entry for each
    /// run of them: each stands as U+FFFD in the text, and an edit that would write one is
    /// refused naming them (docs/repairs.md).
    pub fn bad_bytes(&self) -> Vec<String> {
        self.bad
            .iter()
            .map(|(_, b)| {
                b.iter()
                    .map(|x| format!("0x{x:02x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    /// Takes one line of the stream; a blank line ends an event.
    fn field(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.pending);
            return (!event.data.is_empty() || !event.event.is_empty()).then_some(event);
        }
        if line.starts_with(':') {
            return None;
        }
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match name {
            "data" => {
                if !self.pending.data.is_empty() {
                    self.pending.data.push('\n');
                }
                self.pending.data.push_str(value);
            }
            "event" => self.pending.event = value.to_string(),
            _ => {}
        }
        None
    }
}

/// The text of a line of the stream starting at byte `at` of it: each sequence that is not
/// UTF-8 becomes U+FFFD and is kept in `bad` (joined to the one before when they touch), so
/// the agent can refuse to write it and name the bytes, where failing the answer would end
/// the run.
fn decode(mut bytes: &[u8], mut at: usize, bad: &mut Vec<(usize, Vec<u8>)>) -> String {
    let mut out = String::with_capacity(bytes.len());
    loop {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                out.push_str(text);
                return out;
            }
            Err(e) => {
                let (good, rest) = bytes.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                let n = e.error_len().unwrap_or(rest.len()).min(rest.len()).max(1);
                let start = at + good.len();
                match bad.last_mut() {
                    Some((s, b)) if *s + b.len() == start => b.extend_from_slice(&rest[..n]),
                    _ => bad.push((start, rest[..n].to_vec())),
                }
                out.push('\u{FFFD}');
                at = start + n;
                bytes = &rest[n..];
            }
        }
    }
}

/// The text of an answer's bytes. Bytes that are not UTF-8 make it a bad answer, said with
/// where: written into a file as U+FFFD, they would change it without a word.
fn utf8(bytes: &[u8], provider: &str) -> Result<String, ModelError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_string()),
        Err(e) => Err(ModelError::BadAnswer {
            provider: provider.to_string(),
            reason: format!(
                "the answer is not valid UTF-8 (a bad byte after {} good ones); none of it is used",
                e.valid_up_to()
            ),
        }),
    }
}

/// Reads a whole body (an answer that is not streamed, an error's text), at most `max` bytes,
/// with the same silence limit.
pub(crate) async fn read_capped(
    response: reqwest::Response,
    limits: Limits,
    provider: String,
) -> Result<String, ModelError> {
    let mut stream = response.bytes_stream();
    let mut body = Vec::new();
    loop {
        match tokio::time::timeout(limits.idle, stream.next()).await {
            Err(_) => {
                return Err(ModelError::Truncated {
                    provider,
                    reason: format!("no data for {} s", limits.idle.as_secs()),
                });
            }
            Ok(None) => return utf8(&body, &provider),
            Ok(Some(Err(e))) => {
                return Err(ModelError::Truncated {
                    provider,
                    reason: e.to_string(),
                });
            }
            Ok(Some(Ok(chunk))) => {
                if body.len() + chunk.len() > limits.max_bytes {
                    return Err(ModelError::BadAnswer {
                        provider,
                        reason: format!("the answer is over {} bytes", limits.max_bytes),
                    });
                }
                body.extend_from_slice(&chunk);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(chunks: Vec<&'static [u8]>) -> reqwest::Response {
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c))),
        );
        let body = reqwest::Body::wrap_stream(stream);
        reqwest::Response::from(http_response(body))
    }

    fn http_response(body: reqwest::Body) -> http::Response<reqwest::Body> {
        http::Response::new(body)
    }

    fn limits() -> Limits {
        Limits {
            max_bytes: 1000,
            max_line: 100,
            idle: Duration::from_secs(5),
        }
    }

    async fn all(chunks: Vec<&'static [u8]>, limits: Limits) -> Result<Vec<Event>, ModelError> {
        let mut events = Events::new(response(chunks), limits, "test".into());
        let mut out = Vec::new();
        while let Some(e) = events.next().await? {
            out.push(e);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn events_split_across_chunks_with_crlf_comments_and_multiline_data() {
        let got = all(
            vec![
                b": ping\r\n\r\nevent: a\r\nda",
                b"ta: one\r\ndata: two\r\n\r\ndata:three\n",
                b"\ndata: last",
            ],
            limits(),
        )
        .await
        .unwrap();
        let data: Vec<_> = got
            .iter()
            .map(|e| (e.event.as_str(), e.data.as_str()))
            .collect();
        assert_eq!(data, [("a", "one\ntwo"), ("", "three"), ("", "last")]);
    }

    #[tokio::test]
    async fn bytes_that_are_not_utf8_are_named_and_never_pass_unnoticed() {
        let mut events = Events::new(
            response(vec![b"data: caf\xc3\n\ndata: x\xff\xfey\xf0\n\n"]),
            limits(),
            "test".into(),
        );
        assert_eq!(events.next().await.unwrap().unwrap().data, "caf\u{FFFD}");
        assert_eq!(
            events.next().await.unwrap().unwrap().data,
            "x\u{FFFD}\u{FFFD}y\u{FFFD}"
        );
        assert_eq!(events.bad_bytes(), ["0xc3", "0xff 0xfe", "0xf0"]);
        let err = read_capped(response(vec![b"{\"a\": \"\xff\"}"]), limits(), "t".into())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not valid UTF-8"), "{err}");
        // A character split across chunks is whole once its line is.
        let got = all(vec![b"data: caf\xc3", b"\xa9\n\n"], limits())
            .await
            .unwrap();
        assert_eq!(got[0].data, "café");
    }

    #[tokio::test]
    async fn a_line_over_its_limit_is_a_bad_answer() {
        let long: &'static [u8] = Box::leak(vec![b'x'; 150].into_boxed_slice());
        let err = all(vec![b"data: ", long], limits()).await.unwrap_err();
        assert!(matches!(err, ModelError::BadAnswer { .. }), "{err}");
        assert!(err.to_string().contains("line"), "{err}");
    }

    #[tokio::test]
    async fn an_answer_over_its_bytes_is_a_bad_answer() {
        let chunk: &'static [u8] = b"data: {\"x\": 1}\n\n";
        let err = all(vec![chunk; 100], limits()).await.unwrap_err();
        assert!(matches!(err, ModelError::BadAnswer { .. }), "{err}");
        assert!(err.to_string().contains("max_tokens"), "{err}");
    }

    #[tokio::test]
    async fn silence_past_the_idle_limit_is_a_truncated_answer() {
        let stream =
            futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"data: a\n\n"))])
                .chain(futures::stream::pending());
        let body = reqwest::Body::wrap_stream(stream);
        let limits = Limits {
            idle: Duration::from_millis(50),
            ..limits()
        };
        let mut events = Events::new(http_response(body).into(), limits, "test".into());
        assert_eq!(events.next().await.unwrap().unwrap().data, "a");
        let err = events.next().await.unwrap_err();
        assert!(matches!(err, ModelError::Truncated { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_whole_body_is_read_up_to_its_cap() {
        let body = read_capped(response(vec![b"{\"a\":", b" 1}"]), limits(), "t".into())
            .await
            .unwrap();
        assert_eq!(body, "{\"a\": 1}");
        let big: &'static [u8] = Box::leak(vec![b'x'; 600].into_boxed_slice());
        let err = read_capped(response(vec![big, big]), limits(), "t".into())
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::BadAnswer { .. }), "{err}");
    }
}
