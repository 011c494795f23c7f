//! Hooks (`[[hooks]]`): commands the user configures to run at points of a run (before and
//! after a tool call, before a change is applied, after a run, when approval is needed), each
//! given the event as JSON on stdin. Exit code 2 blocks, with the hook's stderr as the reason
//! the model hears; any other failure is reported and does not block. A workspace file's hook
//! runs only once the user trusts its exact content (`trust::hooks`, by hash).

pub mod gate;
mod list;
mod run;

pub use agent_ls_core::permissions::{HookConfig, HookEvent};
pub use gate::{ChangeGate, Gate};
pub use list::{Hook, Origin, hooks, trust_one};
pub use run::{Fired, fire};
