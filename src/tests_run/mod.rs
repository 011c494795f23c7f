//! Test runs: choosing the command, running it as a cancellable process group with capped
//! output, and turning its output into failures (`parse`, pure) and a report for the model.

pub mod parse;
