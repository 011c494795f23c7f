//! The reviewer's state as the run keeps it (`Run::reviewing`), owned by `reviewing/`: the
//! others read the latest review, the diff under review, and whether the run is a review
//! alone.

use serde::{Deserialize, Serialize};

use crate::agent::review;

/// The reviewer's state in a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Reviewer {
    /// The change under review (its diff and files) while the reviewer works.
    #[serde(skip)]
    pub(super) reviewing: Option<(String, Vec<review::ChangedFile>)>,
    /// The reviewer's unreadable answer was sent back once.
    #[serde(default)]
    pub(super) review_repaired: bool,
    /// The latest review of the run's diff.
    #[serde(default)]
    pub(super) last_review: Option<review::ReviewResult>,
    /// `agent-ls review`: the run is a review of a given diff, and nothing else.
    #[serde(default)]
    pub(super) review_only: bool,
}

impl Reviewer {
    pub(crate) fn last(&self) -> Option<&review::ReviewResult> {
        self.last_review.as_ref()
    }

    /// The diff under review (empty outside a review).
    pub(crate) fn diff(&self) -> &str {
        self.reviewing.as_ref().map_or("", |(d, _)| d.as_str())
    }

    pub(crate) fn review_only(&self) -> bool {
        self.review_only
    }
}
