//! A session's configuration options as ACP shows them: the mode (the agent its runs use) and
//! the model, each a select whose values are the runtime's choices (`runs::choices`), with
//! the session's own choice current. `session/set_mode` and `session/set_config_option`
//! change them for the next prompt; a value the configuration does not know is refused.

use agent_client_protocol::v1::schema::{
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigOptionValue,
    SessionConfigSelectOption, SessionMode, SessionModeState,
};
use agent_ls_runtime::config::Config;
use agent_ls_runtime::runs::choices;

use super::sessions::Saved;

/// The ids of the two options, as ACP's categories name them.
pub(super) const MODE: &str = "mode";
pub(super) const MODEL: &str = "model";

/// Why a set request was refused: invalid params, with this text.
#[derive(Debug, thiserror::Error)]
pub(super) enum SetError {
    #[error("no configuration option `{0}`; the options are `mode` and `model`")]
    UnknownOption(String),
    #[error("`{0}` takes one of its values' ids, not a boolean")]
    NotAValue(String),
    #[error(transparent)]
    Unknown(#[from] choices::ChoiceError),
}

/// `config` as the session's runs see it: the chosen model in place of the default.
pub(super) fn session_config(config: Config, saved: &Saved) -> Config {
    match &saved.model {
        Some(m) => choices::with_model(config, m),
        None => config,
    }
}

/// The agent the session's next run uses.
pub(super) fn current_agent(config: &Config, saved: &Saved) -> String {
    saved
        .agent
        .clone()
        .unwrap_or_else(|| config.agent.default_agent.clone())
}

/// The session's options, its choices current. `config` is the folder's configuration.
pub(super) fn options(config: &Config, saved: &Saved) -> Vec<SessionConfigOption> {
    let agents = choices::agents(config)
        .into_iter()
        .map(|a| SessionConfigSelectOption::new(a.name.clone(), a.name).description(a.description))
        .collect::<Vec<_>>();
    let chosen = session_config(config.clone(), saved);
    let models = choices::models(&chosen)
        .into_iter()
        .map(|m| SessionConfigSelectOption::new(m.clone(), m))
        .collect::<Vec<_>>();
    vec![
        SessionConfigOption::select(MODE, "Mode", current_agent(config, saved), agents)
            .description("the agent that runs the next prompt".to_string())
            .category(SessionConfigOptionCategory::Mode),
        SessionConfigOption::select(MODEL, "Model", choices::current_model(&chosen), models)
            .description("the model the next prompt's run calls".to_string())
            .category(SessionConfigOptionCategory::Model),
    ]
}

/// The session's modes (ACP's older form of the mode option, still read by many clients).
pub(super) fn modes(config: &Config, saved: &Saved) -> SessionModeState {
    let available = choices::agents(config)
        .into_iter()
        .map(|a| SessionMode::new(a.name.clone(), a.name).description(a.description))
        .collect();
    SessionModeState::new(current_agent(config, saved), available)
}

/// `saved` with option `id` set to `value`, when the configuration knows it.
pub(super) fn set(
    config: &Config,
    saved: &mut Saved,
    id: &str,
    value: &SessionConfigOptionValue,
) -> Result<(), SetError> {
    let Some(value) = value.as_value_id() else {
        return Err(SetError::NotAValue(id.to_string()));
    };
    let value = value.to_string();
    match id {
        MODE => {
            choices::check_agent(config, &value)?;
            saved.agent = Some(value);
        }
        MODEL => {
            choices::check_model(&session_config(config.clone(), saved), &value)?;
            saved.model = Some(value);
        }
        other => return Err(SetError::UnknownOption(other.to_string())),
    }
    Ok(())
}
