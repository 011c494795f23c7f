//! What a front end may let the user choose for a session's next runs: the agent (the
//! built-in ones and the configured `[agents]`) and the model (those the configuration names).
//! The lists and the checks are the runtime's, so every surface offers the same choices; a
//! front end only shows them and keeps what was chosen.

use crate::config::Config;
use agent_ls_core::agent::agents::BUILT_IN;
use agent_ls_core::conversation::Role;

/// An agent the user may run, with what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentChoice {
    pub name: String,
    pub description: String,
}

/// A choice that names something the configuration does not know.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChoiceError {
    #[error("no agent `{name}`; the agents are {}", known.join(", "))]
    UnknownAgent { name: String, known: Vec<String> },
    #[error("no model `{name}` in the configuration; the models are {}", known.join(", "))]
    UnknownModel { name: String, known: Vec<String> },
}

/// The agents a run may use: the built-in ones, then the configured ones by name.
pub fn agents(config: &Config) -> Vec<AgentChoice> {
    let built_in = BUILT_IN.iter().map(|name| AgentChoice {
        name: name.to_string(),
        description: match *name {
            "build" => "changes the code: edits, tests, retries",
            "plan" => "reads, then answers with a plan; edits nothing",
            "review" => "reads, then answers with a review; edits nothing",
            _ => "",
        }
        .to_string(),
    });
    let custom = config.agents.iter().map(|(name, a)| AgentChoice {
        name: name.clone(),
        description: a.description.clone(),
    });
    built_in.chain(custom).collect()
}

/// The model the coder calls under `config` (its configured name, or its provider's default).
pub fn current_model(config: &Config) -> String {
    let env = |var: &str| std::env::var(var).ok();
    crate::model::targets_for(Role::Coder, config, &env)
        .ok()
        .and_then(|t| t.first().map(|t| t.model.clone()))
        .or_else(|| config.model.name.clone())
        .unwrap_or_default()
}

/// The models the configuration knows, the current one first: the default model and its
/// fallbacks, each role's model, and every model `[prices]` has a price for.
pub fn models(config: &Config) -> Vec<String> {
    let roles = &config.roles;
    let role_models = [
        &roles.coder,
        &roles.planner,
        &roles.reflector,
        &roles.evaluator,
        &roles.intent,
        &roles.summarizer,
        &roles.reviewer,
        &roles.tester,
    ]
    .into_iter()
    .flat_map(|r| {
        r.name
            .iter()
            .chain(r.fallback.iter().flatten().filter_map(|t| t.name.as_ref()))
    });
    let named = std::iter::once(current_model(config))
        .chain(config.model.name.clone())
        .chain(config.model.fallback.iter().filter_map(|t| t.name.clone()))
        .chain(role_models.cloned())
        .chain(config.prices.keys().cloned());
    let mut out: Vec<String> = Vec::new();
    for name in named.filter(|n| !n.is_empty()) {
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// `name` when it is an agent of `config`.
pub fn check_agent(config: &Config, name: &str) -> Result<(), ChoiceError> {
    let known: Vec<String> = agents(config).into_iter().map(|a| a.name).collect();
    if known.iter().any(|k| k == name) {
        Ok(())
    } else {
        Err(ChoiceError::UnknownAgent {
            name: name.into(),
            known,
        })
    }
}

/// `name` when it is a model of `config`.
pub fn check_model(config: &Config, name: &str) -> Result<(), ChoiceError> {
    let known = models(config);
    if known.iter().any(|k| k == name) {
        Ok(())
    } else {
        Err(ChoiceError::UnknownModel {
            name: name.into(),
            known,
        })
    }
}

/// `config` with `model` as the model of its runs: the default model, and the coder's when
/// the coder names one of its own (otherwise the chosen model would not reach it). Other roles
/// that name their own model keep it, as they would under `--model`-less configuration.
pub fn with_model(mut config: Config, model: &str) -> Config {
    config.model.name = Some(model.to_string());
    if config.roles.coder.name.is_some() {
        config.roles.coder.name = Some(model.to_string());
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let mut c = Config::default();
        c.model.provider = Some("openai".into());
        c.model.name = Some("small".into());
        c.roles.reviewer.name = Some("careful".into());
        c.prices.insert(
            "big".into(),
            crate::config::Price {
                input_per_mtok: 1.0,
                output_per_mtok: 2.0,
            },
        );
        c
    }

    #[test]
    fn the_models_are_those_the_configuration_names_the_current_first() {
        assert_eq!(models(&config()), ["small", "careful", "big"]);
        let chosen = with_model(config(), "big");
        assert_eq!(current_model(&chosen), "big");
        assert_eq!(models(&chosen)[0], "big");
        assert!(matches!(
            check_model(&config(), "nope"),
            Err(ChoiceError::UnknownModel { .. })
        ));
    }

    #[test]
    fn the_agents_are_the_built_in_ones_then_the_configured_ones() {
        let mut c = config();
        c.agents.insert(
            "docs".into(),
            crate::config::CustomAgent {
                description: "writes docs".into(),
                ..Default::default()
            },
        );
        let names: Vec<String> = agents(&c).into_iter().map(|a| a.name).collect();
        assert_eq!(names, ["build", "plan", "review", "docs"]);
        assert!(check_agent(&c, "docs").is_ok());
        let err = check_agent(&c, "ship").unwrap_err().to_string();
        assert!(err.contains("build, plan, review, docs"), "{err}");
    }
}
