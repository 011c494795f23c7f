//! The driver's handle on everything a run uses from outside: the models, the configuration,
//! the workspace, the cancel, and where the run's tokens, records and events go. Its methods
//! are in `mod.rs` (the loop and one method per effect), `checkpoint.rs` (the git
//! checkpoint) and `recall.rs` (memory across runs).

use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::observer::OnEvent;
use crate::config::Config;
use crate::model::{Models, OnToken};
use crate::store::StoreThread;

/// One drive of a run: a surface makes it with what it has and calls `run`, `resume` or
/// `review`.
pub struct Drive<'a> {
    pub models: &'a Models,
    pub config: &'a Config,
    pub root: &'a Path,
    pub cancel: &'a CancellationToken,
    /// Receives streamed model text (the terminal's stderr for `agent-ls run`).
    pub on_token: Option<OnToken<'a>>,
    /// Record the run: its journal in `.agent-ls/runs/` and its figures in the store.
    pub record: Option<&'a StoreThread>,
    /// Receives the run's events as they happen (the editor's run view).
    pub events: Option<OnEvent<'a>>,
    /// What a change, a held tool call and an install need before they happen.
    pub policy: super::policy::Policy,
}
