//! `FileChange`, what the edit engine makes of a file and every caller consumes: the text
//! before and after, the edits and their inverse. Below the rest of `edit/`: `mod.rs`
//! (applying a plan, relocating), `between.rs` and `history.rs` all use it, and it uses only
//! `apply.rs`'s `TextEdit`.

use serde::Serialize;

use super::apply::TextEdit;

/// The new state of one file: its text before (`None` when the plan creates it), after, the
/// edits in the original's coordinates, and their inverse in the new text's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FileChange {
    pub path: String,
    pub original: Option<String>,
    pub new_text: String,
    pub edits: Vec<TextEdit>,
    pub inverse: Vec<TextEdit>,
}

impl FileChange {
    pub fn creates(&self) -> bool {
        self.original.is_none()
    }
}
