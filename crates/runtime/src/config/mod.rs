//! Layered configuration: built-in defaults, the user file, the workspace file, `AGENT_LS_*`
//! environment variables, then the client's settings, with the source of every value kept.
//! Secrets are taken only from the environment or the user file.
//!
//! The work is split by job: `schema` (the section types and their defaults), `layer` (reading,
//! validating and merging layers with the source of every value), `policy` (which keys a
//! workspace may set), `load` (the order of layers and what trust lets apply), `prompts`
//! (override files) and `redact` (URLs printed without their password, the secrets'
//! values). This file only
//! declares and re-exports, so callers keep naming `crate::config::X`.

mod layer;
mod load;
mod narrow;
mod policy;
mod prompts;
mod redact;
mod schema;
mod secrets;
#[cfg(test)]
mod tests;

pub use layer::{
    ConfigError, Layer, MAX_FILE_BYTES, Source, json_layer, parse_toml_layer, user_config_path,
};
pub use load::{Inputs, Loaded, load};
pub use policy::{
    TRUSTED_KEYS, USER_ONLY_KEYS, WORKSPACE_FILE, WorkspaceTrust, gated, runner_only,
    take_workspace_trust, untrusted_message,
};
pub use prompts::load_prompts;
pub use redact::{DatabaseUrl, looks_like_secret, redact_url};
pub use schema::*;
pub use secrets::{configured_secrets, remember_secrets, remembered_secrets};
