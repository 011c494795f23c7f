//! What a test run printed, read without running anything: `parse` turns output text into
//! failures, `report` turns it into the text a model reads.

pub mod parse;
pub mod report;

pub use parse::{Failure, Format, Location, Parsed};
