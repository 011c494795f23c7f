//! The stdio transport in front of tower-lsp: it frames and checks every incoming message and
//! answers malformed ones itself, because tower-lsp's reader stops for good at the first
//! message it cannot decode (tokio-util's `FramedRead` ends the stream after an error).
//!
//! Well-formed messages are passed on unchanged through an in-memory pipe; tower-lsp's output
//! comes back through another pipe and is written to stdout whole frame by whole frame, merged
//! with our own error responses, so stdout never carries a torn or foreign byte.

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::{error, warn};

/// Larger messages are refused rather than buffered; no editor sends documents this big.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// What the framer made of the next message in the input.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A well-formed JSON-RPC message, as its body bytes.
    Message(Vec<u8>),
    /// A message that cannot be processed, with the error response it deserves (or `None`
    /// when it needs no answer, such as a malformed response from the client).
    Malformed {
        reason: String,
        response: Option<Value>,
    },
}

/// Splits a byte stream into `Content-Length` frames. Pure: the caller feeds bytes in.
#[derive(Default)]
pub struct Framer {
    buf: Vec<u8>,
    /// After a header error the byte count of the body is unknown, so input is skipped up to
    /// the next `Content-Length` header.
    resync: bool,
}

impl Framer {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, or `None` until more bytes arrive.
    pub fn next_frame(&mut self) -> Option<Frame> {
        if self.resync {
            match find(&self.buf, b"Content-Length") {
                Some(at) => {
                    self.buf.drain(..at);
                    self.resync = false;
                }
                None => {
                    // Keep a tail in case the header name is split across reads.
                    let keep = self.buf.len().min(13);
                    self.buf.drain(..self.buf.len() - keep);
                    return None;
                }
            }
        }
        let header_end = find(&self.buf, b"\r\n\r\n")?;
        let header = String::from_utf8_lossy(&self.buf[..header_end]).into_owned();
        let body_start = header_end + 4;
        let length = match content_length(&header) {
            Ok(length) => length,
            Err(reason) => {
                self.buf.drain(..body_start);
                self.resync = true;
                return Some(Frame::Malformed {
                    reason,
                    response: Some(error_response(
                        Value::Null,
                        -32700,
                        "Parse error: bad message header",
                    )),
                });
            }
        };
        if length > MAX_MESSAGE_BYTES {
            self.buf.drain(..body_start);
            self.resync = true;
            return Some(Frame::Malformed {
                reason: format!(
                    "message of {length} bytes is over the {MAX_MESSAGE_BYTES}-byte limit"
                ),
                response: Some(error_response(
                    Value::Null,
                    -32600,
                    "Invalid Request: message too large",
                )),
            });
        }
        if self.buf.len() < body_start + length {
            return None;
        }
        let body: Vec<u8> = self
            .buf
            .drain(..body_start + length)
            .skip(body_start)
            .collect();
        Some(check_message(body))
    }
}

fn content_length(header: &str) -> Result<usize, String> {
    let mut length = None;
    for line in header.split("\r\n") {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("header line without a colon: {line:?}"));
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| format!("Content-Length is not a number: {:?}", value.trim()))?,
            );
        }
    }
    length.ok_or_else(|| "no Content-Length header".to_string())
}

/// Checks that a body is a JSON-RPC 2.0 message tower-lsp can decode.
fn check_message(body: Vec<u8>) -> Frame {
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return Frame::Malformed {
                reason: format!("invalid JSON: {e}"),
                response: Some(error_response(Value::Null, -32700, "Parse error")),
            };
        }
    };
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let invalid = |reason: &str| Frame::Malformed {
        reason: reason.to_string(),
        response: Some(error_response(
            id.clone(),
            -32600,
            &format!("Invalid Request: {reason}"),
        )),
    };
    let Some(obj) = value.as_object() else {
        return invalid("a message must be a JSON object (batches are not part of LSP)");
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid("\"jsonrpc\" must be \"2.0\"");
    }
    if !matches!(
        obj.get("id"),
        None | Some(Value::Number(_) | Value::String(_) | Value::Null)
    ) {
        return invalid("\"id\" must be a number or a string");
    }
    match obj.get("method") {
        // Parameter types are checked per method by tower-lsp, which answers InvalidParams.
        Some(Value::String(_)) => Frame::Message(body),
        Some(_) => invalid("\"method\" must be a string"),
        None => {
            // A response from the client to one of our requests.
            let well_formed = obj.contains_key("id")
                && (obj.contains_key("result")
                    ^ obj
                        .get("error")
                        .is_some_and(|e| e["code"].is_i64() && e["message"].is_string()));
            if well_formed {
                Frame::Message(body)
            } else if obj.contains_key("id")
                && !obj.contains_key("result")
                && !obj.contains_key("error")
            {
                invalid(
                    "a message needs a \"method\" (request) or a \"result\"/\"error\" (response)",
                )
            } else {
                // Nothing to answer: answering a response would start a loop.
                Frame::Malformed {
                    reason: "malformed response from the client".into(),
                    response: None,
                }
            }
        }
    }
}

fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn frame_bytes(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// Reads the client's bytes, forwards well-formed frames to `to_server`, and sends error
/// responses for the rest to `replies`. Ends at end of input, which closes `to_server`.
pub async fn pump_input(
    mut input: impl AsyncRead + Unpin,
    mut to_server: impl AsyncWrite + Unpin,
    replies: mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut framer = Framer::default();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match input.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                error!("reading stdin failed: {e}");
                break;
            }
        };
        framer.push(&chunk[..n]);
        while let Some(frame) = framer.next_frame() {
            match frame {
                Frame::Message(body) => {
                    if let Err(e) = to_server.write_all(&frame_bytes(&body)).await {
                        error!("the server stopped reading: {e}");
                        return;
                    }
                }
                Frame::Malformed { reason, response } => {
                    warn!("malformed message from the client: {reason}");
                    if let Some(response) = response {
                        let _ = replies.send(frame_bytes(response.to_string().as_bytes()));
                    }
                }
            }
        }
    }
    let _ = to_server.shutdown().await;
}

/// Copies tower-lsp's output frames and our own replies to `output`, one whole frame at a time.
/// Ends when tower-lsp closes its side: the server is done, and the input task may sit in a
/// blocking read of stdin that never returns.
pub async fn pump_output(
    mut from_server: impl AsyncRead + Unpin,
    mut replies: mpsc::UnboundedReceiver<Vec<u8>>,
    mut output: impl AsyncWrite + Unpin,
) {
    let mut framer = Framer::default();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut server_open = true;
    let mut replies_open = true;
    while server_open {
        tokio::select! {
            read = from_server.read(&mut chunk), if server_open => match read {
                Ok(0) | Err(_) => server_open = false,
                Ok(n) => {
                    framer.push(&chunk[..n]);
                    while let Some(frame) = framer.next_frame() {
                        if let Frame::Message(body) = frame
                            && output.write_all(&frame_bytes(&body)).await.is_err()
                        {
                            return;
                        }
                    }
                    let _ = output.flush().await;
                }
            },
            reply = replies.recv(), if replies_open => match reply {
                Some(bytes) => {
                    if output.write_all(&bytes).await.is_err() {
                        return;
                    }
                    let _ = output.flush().await;
                }
                None => replies_open = false,
            },
        }
    }
    let _ = output.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8]) -> Vec<Frame> {
        let mut f = Framer::default();
        f.push(input);
        std::iter::from_fn(|| f.next_frame()).collect()
    }

    fn msg(body: &str) -> Vec<u8> {
        frame_bytes(body.as_bytes())
    }

    #[test]
    fn well_formed_messages_pass_whole_even_when_split() {
        let input = [
            msg(r#"{"jsonrpc":"2.0","method":"a"}"#),
            msg(r#"{"jsonrpc":"2.0","id":1,"result":null}"#),
        ]
        .concat();
        let mut f = Framer::default();
        let mut out = Vec::new();
        for b in &input {
            f.push(std::slice::from_ref(b));
            out.extend(std::iter::from_fn(|| f.next_frame()));
        }
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|f| matches!(f, Frame::Message(_))));
    }

    #[test]
    fn a_bad_content_length_is_a_parse_error_and_the_next_message_still_reads() {
        let input = [
            b"Content-Length: nope\r\n\r\n{}".to_vec(),
            msg(r#"{"jsonrpc":"2.0","method":"a"}"#),
        ]
        .concat();
        let out = frames(&input);
        assert!(
            matches!(&out[0], Frame::Malformed { response: Some(r), .. } if r["error"]["code"] == -32700)
        );
        assert!(matches!(&out[1], Frame::Message(_)));
    }

    #[test]
    fn invalid_json_is_a_parse_error() {
        let out = frames(&msg("{not json"));
        assert!(
            matches!(&out[0], Frame::Malformed { response: Some(r), .. } if r["error"]["code"] == -32700 && r["id"].is_null())
        );
    }

    #[test]
    fn wrong_envelopes_are_invalid_requests_with_their_id() {
        for body in [
            r#"{"jsonrpc":"2.0","id":4,"method":7}"#,
            r#"{"jsonrpc":"1.0","id":4,"method":"x"}"#,
            r#"{"id":4}"#,
        ] {
            let out = frames(&msg(body));
            assert!(
                matches!(&out[0], Frame::Malformed { response: Some(r), .. } if r["error"]["code"] == -32600 && r["id"] == 4),
                "{body}: {out:?}"
            );
        }
        let out = frames(&msg("[1,2]"));
        assert!(
            matches!(&out[0], Frame::Malformed { response: Some(r), .. } if r["error"]["code"] == -32600)
        );
    }

    #[test]
    fn a_malformed_response_from_the_client_is_dropped_without_an_answer() {
        let out = frames(&msg(r#"{"jsonrpc":"2.0","id":4,"error":"oops"}"#));
        assert!(matches!(&out[0], Frame::Malformed { response: None, .. }));
    }
}
