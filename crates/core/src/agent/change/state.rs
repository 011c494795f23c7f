//! A proposed change on its way to the files as the run keeps it (`Run::change`), owned by
//! `change/`; the other phases ask only whether the applied changes alternate, and a resumed
//! run forgets what was pending.

use serde::{Deserialize, Serialize};

use crate::edit::FileChange;

/// The change between the coder's proposal and the tests.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Change {
    /// A hash of the edits the coder proposed last, kept until they are located: edits that
    /// could not be applied and come again unchanged end the run.
    #[serde(default)]
    pub(super) proposal: u64,
    /// Each change refused so far (a hash of its files' new text, or of its edits) with the
    /// reason: the same change proposed again ends the run instead of being asked about again.
    #[serde(default)]
    pub(super) refused: Vec<(u64, String)>,
    /// The located change waiting for approval and applying. Checkpoints are taken before a
    /// coder call, when nothing is pending.
    #[serde(skip)]
    pub(super) pending: Vec<FileChange>,
    /// A hash of each applied change.
    #[serde(default)]
    pub(super) edit_history: Vec<u64>,
    /// The SEARCH and REPLACE of each edit of the proposal, by normalised path: what the
    /// written file must hold (`edit::verify`).
    #[serde(skip)]
    pub(super) replaces: Vec<(String, String, String)>,
    /// The change applied last, whose inverse undoes it when it made things worse.
    #[serde(skip)]
    pub(super) last_applied: Vec<FileChange>,
    /// Why the change being applied is an undo (`undo::if_worse`), while it is.
    #[serde(skip)]
    pub(super) undoing: Option<String>,
    /// Each changed file's text read back after the write (`Input::Written`).
    #[serde(skip)]
    pub(super) written: Vec<(String, String)>,
    /// The bytes of the latest answer that were not UTF-8 (`Input::BadBytes`).
    #[serde(skip)]
    pub(super) bad_bytes: Vec<String>,
    /// Rounds in a row spent on the language server's errors (reset by a clean edit). Not in
    /// the checkpoint, whose shape stays as it was: a resumed run counts afresh.
    #[serde(skip)]
    pub(super) error_rounds: u32,
}

impl Change {
    /// The files as read back after the change was written (`Input::Written`).
    pub(crate) fn written(&mut self, files: Vec<(String, String)>) {
        self.written = files;
    }

    /// The bytes of the latest answer that were not UTF-8 (`Input::BadBytes`).
    pub(crate) fn bad_bytes(&mut self, bytes: Vec<String>) {
        self.bad_bytes = bytes;
    }

    /// A checkpoint goes on with nothing pending.
    pub(crate) fn forget_pending(&mut self) {
        self.pending.clear();
    }

    /// A, B, A, B: the last four applied changes alternate between two different ones.
    pub(crate) fn alternating(&self) -> bool {
        matches!(self.edit_history.as_slice(), [.., a, b, c, d] if a == c && b == d && a != b)
    }

    /// Applied changes with these hashes, for the tests of `alternating`.
    #[cfg(test)]
    pub(crate) fn applied(edit_history: Vec<u64>) -> Change {
        Change {
            edit_history,
            ..Change::default()
        }
    }

    #[cfg(test)]
    pub(crate) fn pending(&self) -> &[FileChange] {
        &self.pending
    }

    /// Why this change (by its hash) was refused before, if it was.
    pub(super) fn refusal(&self, hash: u64) -> Option<&str> {
        self.refused
            .iter()
            .find(|(h, _)| *h == hash)
            .map(|(_, why)| why.as_str())
    }
}
