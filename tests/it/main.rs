//! The integration tests, one binary for the whole package as rust-analyzer has it: each
//! module below was a test binary of its own, and each of those linked the whole crate graph
//! again. The shared test client (tests/support) is a module here too; the benchmarks include
//! it by path.

#[path = "../support/mod.rs"]
mod support;

mod acp;
mod agent_run;
mod agent_server;
mod apply_cli;
mod batch;
mod bigrepo;
mod cache;
mod completion;
mod config;
mod deploy;
mod docs;
mod doctor;
mod documents;
mod edit_corpus;
mod edit_properties;
mod editor_experience;
mod emacs;
mod first_hour_cli;
mod git;
mod git_commit;
mod hooks;
mod instructions;
mod isolation_lsp;
mod limits;
mod locate;
mod mcp;
mod memory;
mod memory_postgres;
mod memory_vectors;
mod mistakes;
mod model_providers;
mod neovim;
mod one_way;
mod parsers;
mod permissions;
mod proc_secrets;
mod processes;
mod project_lsp;
mod protocol;
mod pygls;
mod queue;
mod real_model;
mod resume;
mod review;
mod review_question;
mod rewind;
mod rollback_lsp;
mod runners;
mod skills;
mod surfaces;
mod test_diagnostics;
mod tester;
mod trust;
mod vendored;
mod vscode;
