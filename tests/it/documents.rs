//! Document sync through the real binary: encodings with non-ASCII text, out-of-range
//! positions, refused changes and resync, and the ordering of a burst of changes.

use crate::support;

use serde_json::{Value, json};
use support::{Client, capabilities_with_encodings, workspace};

const URI: &str = "file:///ws/doc.txt";

/// The (line, character) of a char index in `encoding` ("utf-8", "utf-16" or "utf-32").
fn pos(text: &str, char_idx: usize, encoding: &str) -> Value {
    let (mut line, mut col) = (0, 0);
    for c in text.chars().take(char_idx) {
        if c == '\n' {
            line += 1;
            col = 0;
        } else {
            col += match encoding {
                "utf-8" => c.len_utf8(),
                "utf-16" => c.len_utf16(),
                _ => 1,
            };
        }
    }
    json!({"line": line, "character": col})
}

fn change(uri: &str, version: i32, start: Value, end: Value, text: &str) -> Value {
    json!({
        "textDocument": {"uri": uri, "version": version},
        "contentChanges": [{"range": {"start": start, "end": end}, "text": text}]
    })
}

fn started(encodings: &[&str]) -> (Client, tempfile::TempDir) {
    let ws = workspace(&[]);
    let client = Client::start(ws.path(), capabilities_with_encodings(encodings));
    (client, ws)
}

#[test]
fn the_server_negotiates_the_encoding_the_client_offers() {
    for (offered, expected) in [
        (vec![], "utf-16"),
        (vec!["utf-16"], "utf-16"),
        (vec!["utf-8", "utf-16"], "utf-8"),
        (vec!["utf-32", "utf-16"], "utf-32"),
    ] {
        let ws = workspace(&[]);
        let mut c = Client::spawn(Default::default());
        let result = c.initialize(
            ws.path(),
            capabilities_with_encodings(&offered),
            Value::Null,
        );
        assert_eq!(
            result["capabilities"]["positionEncoding"], expected,
            "offered {offered:?}"
        );
        assert_eq!(result["serverInfo"]["name"], "agent-ls");
        assert!(c.shutdown().success());
    }
}

#[test]
fn non_ascii_edits_land_in_the_right_place_in_utf16_and_utf8() {
    for (encoding, emoji_end, cjk_end) in [("utf-16", 3, 2), ("utf-8", 5, 6)] {
        let (mut c, _ws) = started(&[encoding]);
        c.open(URI, "a😀b\n漢字x\n");
        // Insert after the emoji, and replace the two CJK characters.
        c.edit(URI, 2, (0, emoji_end), (0, emoji_end), "Ü");
        c.edit(URI, 3, (1, 0), (1, cjk_end), "中文🎉");
        let state = c.document_state(URI);
        assert_eq!(state["text"], "a😀Üb\n中文🎉x\n", "{encoding}");
        assert_eq!(state["version"], 3);
        assert_eq!(state["positionEncoding"], encoding);
        assert_eq!(state["needsResync"], false);
    }
}

#[test]
fn out_of_range_positions_clamp_to_line_end_and_document_end() {
    let (mut c, _ws) = started(&[]);
    c.open(URI, "ab\r\ncd");
    c.edit(URI, 2, (0, 99), (0, 99), "!");
    c.edit(URI, 3, (40, 0), (41, 5), "$");
    assert_eq!(c.document_state(URI)["text"], "ab!\r\ncd$");
}

#[test]
fn a_change_splitting_a_surrogate_pair_is_refused_and_the_document_marked_for_resync() {
    let (mut c, _ws) = started(&["utf-16"]);
    c.open(URI, "x😀y\n");
    c.edit(URI, 2, (0, 2), (0, 2), "!");
    let warning = c.wait_notification("window/showMessage", |p| {
        p["message"].as_str().unwrap_or("").contains("refused")
    });
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("inside a character"),
        "{warning}"
    );
    let state = c.document_state(URI);
    assert_eq!(state["text"], "x😀y\n", "the text must be untouched");
    assert_eq!(state["version"], 1);
    assert_eq!(state["needsResync"], true);
    // Further range changes are refused until a full-text change resyncs the document.
    c.edit(URI, 3, (0, 0), (0, 0), "z");
    assert_eq!(c.document_state(URI)["text"], "x😀y\n");
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 4}, "contentChanges": [{"text": "fresh 😀\n"}]}),
    );
    let state = c.document_state(URI);
    assert_eq!(state["text"], "fresh 😀\n");
    assert_eq!(state["needsResync"], false);
    assert!(c.stderr_says("refused a change"), "the refusal is logged");
}

#[test]
fn a_change_between_cr_and_lf_is_refused() {
    let (mut c, _ws) = started(&[]);
    c.open(URI, "ab\r\ncd");
    c.edit(URI, 2, (0, 3), (0, 3), "X");
    let state = c.document_state(URI);
    assert_eq!(state["text"], "ab\r\ncd");
    assert_eq!(state["needsResync"], true);
}

#[test]
fn several_changes_in_one_notification_apply_in_order() {
    let (mut c, _ws) = started(&[]);
    c.open(URI, "one\ntwo\n");
    c.notify(
        "textDocument/didChange",
        json!({
            "textDocument": {"uri": URI, "version": 2},
            "contentChanges": [
                {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 3}}, "text": "1\n1.5"},
                {"range": {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 3}}, "text": "2"},
            ]
        }),
    );
    assert_eq!(c.document_state(URI)["text"], "1\n1.5\n2\n");
}

#[test]
fn closing_forgets_the_document() {
    let (mut c, _ws) = started(&[]);
    c.open(URI, "text");
    c.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": URI}}),
    );
    let err = c
        .request(
            "agent-ls/documentState",
            json!({"textDocument": {"uri": URI}}),
        )
        .unwrap_err();
    assert_eq!(err["code"], -32602);
}

/// A small deterministic generator so the burst is varied but reproducible.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % bound.max(1)
    }
}

#[test]
fn a_burst_of_a_thousand_changes_sent_without_waiting_ends_in_the_exact_text() {
    const INSERTS: &[&str] = &["a", "é", "😀", "漢字", "\n", "xy\nz", "🎉!", " "];
    for encoding in ["utf-16", "utf-8"] {
        let (mut c, _ws) = started(&[encoding]);
        let mut text = String::from("start 😀\nsecond line\n");
        c.open(URI, &text);
        let mut rng = Lcg(42);
        for version in 2..=1001 {
            let len = text.chars().count();
            let start = rng.next(len + 1);
            let (end, insert) = if rng.next(3) == 0 {
                ((start + 1 + rng.next(3)).min(len), "")
            } else {
                (start, INSERTS[rng.next(INSERTS.len())])
            };
            let params = change(
                URI,
                version,
                pos(&text, start, encoding),
                pos(&text, end, encoding),
                insert,
            );
            let chars: Vec<char> = text.chars().collect();
            text = chars[..start].iter().collect::<String>()
                + insert
                + &chars[end..].iter().collect::<String>();
            c.notify("textDocument/didChange", params);
        }
        let state = c.document_state(URI);
        assert_eq!(state["version"], 1001, "{encoding}");
        assert_eq!(state["text"].as_str(), Some(text.as_str()), "{encoding}");
        assert_eq!(state["needsResync"], false);
    }
}
