//! agent-ls: a language server that runs a coding agent inside the editor. The library holds
//! the pure core (`text`, `edit`, `agent`, `tests_run::parse`), the IO edges (`model`,
//! `tests_run`, `files`, `store`, `journal`), the effect driver shared by the server and the
//! command line (`drive`, `headless`), and the LSP shell (`server`).

pub mod acp;
pub mod agent;
pub mod config;
pub mod drive;
pub mod edit;
pub mod files;
pub mod headless;
pub mod journal;
pub mod lock;
pub mod logging;
pub mod mcp;
pub mod model;
pub mod repomap;
pub mod server;
pub mod steps;
pub mod store;
pub mod syntax;
pub mod tests_run;
pub mod text;
pub mod tokens;
pub mod tools;
pub mod trust;
