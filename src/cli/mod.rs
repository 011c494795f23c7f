//! The command line's subcommands, each a thin shell over the runtime. `main.rs` only parses
//! arguments and dispatches here.

pub mod run;
