//! Turns the edit engine's file changes into a `WorkspaceEdit` for `workspace/applyEdit`:
//! versioned `documentChanges`, positions in the session's encoding, a `CreateFile` for new
//! files, and change annotations that ask the user to confirm when the client supports them.

use std::collections::HashMap;
use std::path::Path;

use ropey::Rope;
use tower_lsp_server::ls_types::{
    AnnotatedTextEdit, ChangeAnnotation, ClientCapabilities, CreateFile, CreateFileOptions,
    DocumentChangeOperation, DocumentChanges, OneOf, OptionalVersionedTextDocumentIdentifier,
    ResourceOp, TextDocumentEdit, TextEdit, Uri, WorkspaceEdit,
};

use super::convert::position_to_lsp;
use agent_ls_core::edit::FileChange;
use agent_ls_core::text::{Encoding, to_position};

/// What the client can do with a workspace edit, read once from its capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EditSupport {
    pub change_annotations: bool,
    pub create_files: bool,
    pub delete_files: bool,
    /// The client saves documents on `agent-ls/saveFiles`.
    pub save_files: bool,
    /// The client asks its user before it applies a server's edit, with no preview we can
    /// annotate: eglot, whose "Server wants to edit … Proceed?" is then the step's question
    /// (`client_confirms_edits`).
    pub confirms_edits: bool,
}

impl EditSupport {
    pub fn from_capabilities(caps: &ClientCapabilities) -> Self {
        let ws = caps
            .workspace
            .as_ref()
            .and_then(|w| w.workspace_edit.as_ref());
        EditSupport {
            change_annotations: ws.is_some_and(|w| w.change_annotation_support.is_some()),
            create_files: ws
                .and_then(|w| w.resource_operations.as_ref())
                .is_some_and(|ops| {
                    ops.contains(&tower_lsp_server::ls_types::ResourceOperationKind::Create)
                }),
            delete_files: ws
                .and_then(|w| w.resource_operations.as_ref())
                .is_some_and(|ops| {
                    ops.contains(&tower_lsp_server::ls_types::ResourceOperationKind::Delete)
                }),
            save_files: caps
                .experimental
                .as_ref()
                .and_then(|e| e.pointer("/agentLs/saveFiles"))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            confirms_edits: false,
        }
    }
}

/// Whether the client at `pid` (initialize's `processId`) is an Emacs, which asks before it
/// applies a server's edit (eglot's `eglot-confirm-server-initiated-edits`, on by default).
/// eglot 1.9 sends no `clientInfo`, so its process is what tells; where `/proc` is not there
/// the answer is no, and the server asks its own question as for any client.
pub fn client_confirms_edits(pid: Option<u32>) -> bool {
    pid.and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok())
        .is_some_and(|comm| comm.trim().starts_with("emacs"))
}

/// One file of the edit: where it is and the buffer version the change was computed against
/// (`None` for a file that is not open, whose content on disk is the master).
pub struct Target {
    pub uri: Uri,
    pub version: Option<i32>,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceEditError {
    #[error("{0} cannot be expressed as a file URI")]
    BadPath(String),
    #[error("the client cannot create files, and the plan creates {0}")]
    CannotCreate(String),
}

pub fn file_uri(root: &Path, relative: &str) -> Result<Uri, WorkspaceEditError> {
    Uri::from_file_path(root.join(relative))
        .ok_or_else(|| WorkspaceEditError::BadPath(relative.to_string()))
}

/// Builds the edit. `label` names the step in the editor's confirmation UI (VS Code's
/// refactor preview groups edits under it).
pub fn to_workspace_edit(
    changes: &[FileChange],
    targets: &HashMap<String, Target>,
    root: &Path,
    encoding: Encoding,
    support: EditSupport,
    label: &str,
    note: &dyn Fn(&str) -> Option<String>,
) -> Result<WorkspaceEdit, WorkspaceEditError> {
    let mut operations = Vec::new();
    let mut annotations = HashMap::new();
    for change in changes {
        let (uri, version) = match targets.get(&change.path) {
            Some(t) => (t.uri.clone(), t.version),
            None => (file_uri(root, &change.path)?, None),
        };
        let annotation_id = support.change_annotations.then(|| {
            let id = format!("agent-ls:{}", change.path);
            annotations.insert(id.clone(), annotation(&change.path, label, note));
            id
        });
        if change.creates() {
            if !support.create_files {
                return Err(WorkspaceEditError::CannotCreate(change.path.clone()));
            }
            operations.push(create(uri.clone(), annotation_id.clone()));
        }
        operations.push(DocumentChangeOperation::Edit(TextDocumentEdit {
            text_document: OptionalVersionedTextDocumentIdentifier { uri, version },
            edits: text_edits(change, encoding, annotation_id.as_ref()),
        }));
    }
    Ok(WorkspaceEdit {
        changes: None,
        document_changes: Some(DocumentChanges::Operations(operations)),
        change_annotations: (!annotations.is_empty()).then_some(annotations),
    })
}

/// The annotation that has the user confirm the change to `path`, with what the review found
/// in it where the user confirms the file.
fn annotation(path: &str, label: &str, note: &dyn Fn(&str) -> Option<String>) -> ChangeAnnotation {
    let note = note(path);
    ChangeAnnotation {
        label: match &note {
            Some(n) => format!("{label} ({n})"),
            None => label.to_string(),
        },
        needs_confirmation: Some(true),
        description: Some(match &note {
            Some(n) => format!("{path}: {n}"),
            None => path.to_string(),
        }),
    }
}

/// The `CreateFile` of a new file, which must not exist yet.
fn create(uri: Uri, annotation_id: Option<String>) -> DocumentChangeOperation {
    DocumentChangeOperation::Op(ResourceOp::Create(CreateFile {
        uri,
        options: Some(CreateFileOptions {
            overwrite: Some(false),
            ignore_if_exists: Some(false),
        }),
        annotation_id,
    }))
}

/// The change's edits as LSP text edits on its original text, in `encoding`.
fn text_edits(
    change: &FileChange,
    encoding: Encoding,
    annotation_id: Option<&String>,
) -> Vec<OneOf<TextEdit, AnnotatedTextEdit>> {
    let original = Rope::from_str(change.original.as_deref().unwrap_or(""));
    let at = |byte: usize| to_position(&original, original.byte_to_char(byte), encoding);
    change
        .edits
        .iter()
        .map(|e| {
            let start = at(e.range.start);
            let mut end = position_to_lsp(at(e.range.end));
            // An empty document is one empty line to Neovim, and text inserted before
            // it keeps that line: a new file would gain a blank last line. An end on the
            // next line is the document's end to every client (positions past the end
            // are clamped), and Neovim then drops the line.
            if original.len_bytes() == 0 {
                end = tower_lsp_server::ls_types::Position::new(1, 0);
            }
            let text_edit = TextEdit {
                range: tower_lsp_server::ls_types::Range::new(position_to_lsp(start), end),
                new_text: e.text.clone(),
            };
            match annotation_id {
                Some(id) => OneOf::Right(AnnotatedTextEdit {
                    text_edit,
                    annotation_id: id.clone(),
                }),
                None => OneOf::Left(text_edit),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_ls_core::edit::{self, FileText, Limits};
    use serde_json::json;

    fn changes(files: &[(&str, &str)], answer: &str) -> Vec<FileChange> {
        let plan = edit::parse_plan(answer).unwrap();
        let outcome = edit::apply_plan(&plan, Path::new("/ws"), &Limits::default(), |p| {
            files
                .iter()
                .find(|(n, _)| *n == p)
                .map_or(FileText::Missing, |(_, t)| FileText::Text(t.to_string()))
        });
        assert!(outcome.all_applied(), "{outcome:?}");
        outcome.changes
    }

    #[test]
    fn positions_follow_the_encoding_with_non_ascii_text() {
        let c = changes(
            &[("a.txt", "😀 x = 1\n")],
            r#"{"path": "a.txt", "search": "x = 1", "replace": "x = 2"}"#,
        );
        let targets = HashMap::from([(
            "a.txt".to_string(),
            Target {
                uri: file_uri(Path::new("/ws"), "a.txt").unwrap(),
                version: Some(7),
            },
        )]);
        for (encoding, col) in [
            (Encoding::Utf16, 3),
            (Encoding::Utf8, 5),
            (Encoding::Utf32, 2),
        ] {
            let edit = to_workspace_edit(
                &c,
                &targets,
                Path::new("/ws"),
                encoding,
                EditSupport::default(),
                "fix",
                &|_| None,
            )
            .unwrap();
            let v = serde_json::to_value(&edit).unwrap();
            let doc = &v["documentChanges"][0];
            assert_eq!(doc["textDocument"]["version"], 7);
            assert_eq!(
                doc["edits"][0]["range"]["start"],
                json!({"line": 0, "character": col})
            );
            assert_eq!(doc["edits"][0]["newText"], "x = 2");
            assert!(v.get("changeAnnotations").is_none());
        }
    }

    #[test]
    fn annotations_ask_for_confirmation_and_new_files_are_created() {
        let c = changes(&[], r#"{"path": "new.py", "content": "X = 1\n"}"#);
        let support = EditSupport {
            change_annotations: true,
            create_files: true,
            delete_files: false,
            save_files: false,
            confirms_edits: false,
        };
        let edit = to_workspace_edit(
            &c,
            &HashMap::new(),
            Path::new("/ws"),
            Encoding::Utf16,
            support,
            "Agent: fix",
            &|_| None,
        )
        .unwrap();
        let v = serde_json::to_value(&edit).unwrap();
        let ops = v["documentChanges"].as_array().unwrap();
        assert_eq!(ops[0]["kind"], "create");
        assert_eq!(ops[0]["uri"], "file:///ws/new.py");
        assert_eq!(ops[1]["textDocument"]["version"], serde_json::Value::Null);
        assert_eq!(ops[1]["edits"][0]["annotationId"], "agent-ls:new.py");
        // The whole (empty) document, ending on the next line, so Neovim keeps no blank line.
        assert_eq!(
            ops[1]["edits"][0]["range"],
            json!({"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}})
        );
        assert_eq!(
            v["changeAnnotations"]["agent-ls:new.py"]["needsConfirmation"],
            true
        );
        assert_eq!(
            v["changeAnnotations"]["agent-ls:new.py"]["label"],
            "Agent: fix"
        );
        let err = to_workspace_edit(
            &c,
            &HashMap::new(),
            Path::new("/ws"),
            Encoding::Utf16,
            EditSupport::default(),
            "x",
            &|_| None,
        );
        assert!(matches!(err, Err(WorkspaceEditError::CannotCreate(_))));
    }
}
