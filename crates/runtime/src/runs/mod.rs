//! A run is the runtime's: one place takes a request (goal, agent, reproduce first, approval,
//! how it begins) and owns it from set-up to its commit. `start.rs` sets the run up and drives
//! it; `commit.rs` decides what happens to its files when it went well. A front end gives a
//! `Shell` (how to ask and show) and what only it has (the editor's buffers, its events' view),
//! and builds neither the settings nor the `Drive`. `rewind.rs` takes a run back to one of
//! its steps and makes the request of the run that goes on from there (`earlier.rs` reads
//! its conversation back from the journal).

pub mod choices;
mod commit;
pub mod disk;
mod earlier;
pub mod history;
pub mod rewind;
pub mod rollback;
mod start;

pub use commit::{AfterRun, after_run, eligible};
pub use start::{
    Begin, Env, Prepared, RunRequest, configuration, drive, isolate, isolation, not_started,
    prepare,
};
