//! The command line's subcommands, each a thin shell over the runtime. `main.rs` only parses
//! arguments and dispatches here; `setup` is what they all start with.

pub mod apply;
pub mod batch;
pub mod cache;
pub mod commit;
pub mod config;
pub mod doctor;
pub mod git;
pub mod headless;
pub mod hooks;
pub mod map;
pub mod memory;
pub mod review;
pub mod run;
pub mod runs;
pub mod serve;
pub mod setup;
pub mod stats;
pub mod trust;
pub mod undo;
