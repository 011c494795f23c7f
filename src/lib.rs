//! agent-ls: a language server that runs a coding agent inside the editor. The library holds
//! the pure core (`text`), configuration, and the LSP shell (`server`).

pub mod agent;
pub mod config;
pub mod drive;
pub mod edit;
pub mod files;
pub mod headless;
pub mod journal;
pub mod logging;
pub mod model;
pub mod server;
pub mod store;
pub mod tests_run;
pub mod text;
