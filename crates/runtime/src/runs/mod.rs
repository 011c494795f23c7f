//! A run is the runtime's: one place takes a request (goal, agent, reproduce first, approval,
//! how it begins) and owns it from set-up to its commit. `start.rs` sets the run up and drives
//! it; `commit.rs` decides what happens to its files when it went well. A front end gives a
//! `Shell` (how to ask and show) and what only it has (the editor's buffers, its events' view),
//! and builds neither the settings nor the `Drive`.

pub mod choices;
mod commit;
pub mod disk;
pub mod history;
pub mod rollback;
mod start;

pub use commit::{AfterRun, after_run, eligible};
pub use start::{
    Begin, Env, Prepared, RunRequest, configuration, drive, isolate, isolation, not_started,
    prepare,
};
