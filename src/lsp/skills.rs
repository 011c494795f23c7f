//! Skills in the editor (docs/skills.md): `agent-ls.skills` lists them for the palette's
//! "Agent: Run Skill…", `agent-ls.runSkill` `{name, request?, uri?}` starts a run of one, and
//! a skill that declares file patterns is offered as a code action on the files they match.
//! The run itself is `agent-ls.run`'s; this file only turns a skill into its goal.

use std::path::Path;

use serde::Deserialize;
use tower_lsp_server::jsonrpc::{Error, Result};
use tower_lsp_server::ls_types::{CodeAction, CodeActionOrCommand, Command, Uri};

use super::agent_runs::RunArgs;
use super::ext;

/// `agent-ls.skills`: every skill's name, description and file patterns.
pub fn list(root: Option<&Path>) -> serde_json::Value {
    let skills = root.map_or_else(Vec::new, |r| agent_ls_runtime::skills::discover(r).skills);
    serde_json::Value::Array(
        skills
            .into_iter()
            .map(|s| {
                serde_json::json!({"name": s.front.name, "description": s.front.description,
                    "paths": s.front.paths, "folder": s.shown})
            })
            .collect(),
    )
}

/// `agent-ls.runSkill`'s argument.
#[derive(Deserialize)]
struct RunSkill {
    name: String,
    #[serde(default)]
    request: Option<String>,
    #[serde(default)]
    uri: Option<Uri>,
}

/// The run that `agent-ls.runSkill` starts; an unknown skill is refused, naming the skills.
pub fn run_args(root: Option<&Path>, first: Option<&serde_json::Value>) -> Result<RunArgs> {
    let first = first.cloned().unwrap_or_default();
    let args: RunSkill = serde_json::from_value(first).map_err(|e| {
        Error::invalid_params(format!(
            "{} takes {{name, request?, uri?}}: {e}",
            ext::RUN_SKILL_COMMAND
        ))
    })?;
    let found = root.and_then(|r| agent_ls_runtime::skills::find(r, &args.name));
    if found.is_none() {
        let names: Vec<String> = list(root)
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        return Err(Error::invalid_params(format!(
            "there is no skill `{}`; the skills are: {}",
            args.name,
            names.join(", ")
        )));
    }
    let mut request = args.request.unwrap_or_default();
    if let (Some(uri), Some(root)) = (&args.uri, root)
        && let Some(rel) = relative(root, uri)
    {
        request = format!("{request} (on {rel})").trim().to_string();
    }
    Ok(RunArgs {
        goal: agent_ls_core::skills::goal(&args.name, &request),
        uri: args.uri,
        ..Default::default()
    })
}

/// "Agent: run skill NAME" for each skill whose file patterns match the document.
pub fn actions(root: Option<&Path>, uri: &Uri) -> Vec<CodeActionOrCommand> {
    let Some(root) = root else {
        return Vec::new();
    };
    let Some(rel) = relative(root, uri) else {
        return Vec::new();
    };
    agent_ls_runtime::skills::discover(root)
        .skills
        .into_iter()
        .filter(|s| agent_ls_core::skills::is_for(&s.front, &rel))
        .map(|s| {
            let title = format!("Agent: run skill {}", s.front.name);
            let args = serde_json::json!({"name": s.front.name, "uri": uri});
            CodeActionOrCommand::CodeAction(CodeAction {
                title: title.clone(),
                command: Some(Command {
                    title,
                    command: ext::RUN_SKILL_COMMAND.into(),
                    arguments: Some(vec![args]),
                }),
                ..CodeAction::default()
            })
        })
        .collect()
}

/// The document's path relative to the workspace root.
fn relative(root: &Path, uri: &Uri) -> Option<String> {
    let path = super::convert::path_from_uri(uri)?;
    let rel = path.strip_prefix(root).ok()?;
    Some(rel.to_string_lossy().replace('\\', "/"))
}
