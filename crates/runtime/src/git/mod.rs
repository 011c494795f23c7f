//! Git for agent-ls: the `git` binary run safely (`binary.rs`, re-exported here: every call
//! time-bound, with the repository's own programs turned off; docs/security.md), and what
//! builds on it: `checkpoint`, `commit`, `isolate`, `since` and the rest.

mod binary;
pub mod checkpoint;
pub mod commit;
pub mod isolate;
pub mod message;
pub mod pr;
pub mod run;
pub mod since;

pub(crate) use binary::nul_list;
pub use binary::{Ended, Git, GitError, MIN_VERSION, Repo, bounded, check_version};
pub use checkpoint::{Checkpoint, Restore, RollbackPlan, RunFiles};
pub use commit::{CommitError, Committed};
