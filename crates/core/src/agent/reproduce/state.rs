//! The tester's state as the run keeps it (`Run::reproducing`), owned by `reproduce/`: the
//! others read its record, and the tester's prompt (`messages.rs`) its work.

use serde::{Deserialize, Serialize};

use crate::agent::tester::{Record, Work};

/// The tester's state in a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Tester {
    /// The tester's turn while it goes (its attempts, the tests on trial).
    #[serde(default, rename = "tester_work")]
    pub(super) work: Option<Work>,
    /// What the tester did in this run.
    #[serde(default, rename = "tester_record")]
    pub(super) record: Option<Record>,
}

impl Tester {
    pub(crate) fn record(&self) -> Option<&Record> {
        self.record.as_ref()
    }

    /// The tester's turn while it goes, which its prompt shows (`messages::call`).
    pub(crate) fn work(&self) -> Option<&Work> {
        self.work.as_ref()
    }
}
