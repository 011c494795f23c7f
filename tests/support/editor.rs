//! An editor's side of `workspace/applyEdit` for the tests that drive the server over stdio:
//! edits land in in-memory buffers (never on disk, as in VS Code and Neovim), and a
//! didChange follows for each buffer the server knows as open.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::{Client, apply_lsp_edits};

/// The editor's buffers by URI: text and version.
pub type Buffers = Arc<Mutex<HashMap<String, (String, i64)>>>;

/// Every workspace edit the server sent.
pub type Edits = Arc<Mutex<Vec<Value>>>;

/// Answers applyEdit like an editor: each document's edits go to its buffer (a file the edit
/// creates gets an empty buffer first, and one it deletes loses its buffer; the support
/// client makes and removes the files on disk), and a didChange follows for each of `open`.
/// Returns every edit the server sent, in order.
pub fn applies(c: &mut Client, buffers: Buffers, open: Vec<String>) -> Edits {
    let seen = Edits::default();
    let edits = seen.clone();
    c.on_request_then("workspace/applyEdit", move |p| {
        seen.lock().unwrap().push(p["edit"].clone());
        let mut b = buffers.lock().unwrap();
        let mut notes = Vec::new();
        for op in p["edit"]["documentChanges"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let uri = op["uri"].as_str().map(String::from);
            match op["kind"].as_str() {
                Some("create") => {
                    b.entry(uri.unwrap()).or_insert((String::new(), 0));
                    continue;
                }
                Some("delete") => {
                    b.remove(&uri.unwrap());
                    continue;
                }
                _ => {}
            }
            let uri = op["textDocument"]["uri"].as_str().unwrap().to_string();
            let entry = b.entry(uri.clone()).or_insert_with(|| {
                let path = uri.strip_prefix("file://").unwrap();
                (std::fs::read_to_string(path).unwrap_or_default(), 0)
            });
            entry.0 = apply_lsp_edits(&entry.0, op["edits"].as_array().unwrap());
            entry.1 += 1;
            if open.contains(&uri) {
                notes.push(json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                    "textDocument": {"uri": uri, "version": entry.1}, "contentChanges": [{"text": entry.0}]}}));
            }
        }
        (json!({"applied": true}), notes)
    });
    edits
}
