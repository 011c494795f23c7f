//! The tasks file of `agent-ls batch`: one JSON task a line, read whole and checked before
//! anything runs, and a task's `config` turned into the settings its run is given.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use agent_ls_runtime::config::{self, ConfigError, Source};
use serde::{Deserialize, Serialize};

/// The longest task id: it names a folder and a branch.
const MAX_ID: usize = 100;

/// Why a task is refused before anything of it runs.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("not a task: {0}")]
    NotATask(#[from] serde_json::Error),
    /// A queue's message that is not an agent-ls job at all.
    #[error("not an agent-ls job")]
    NotAJob,
    #[error(
        "the id {0:?} must be 1 to {MAX_ID} ASCII letters, digits, '-', '_' or '.' (not first), as it names a folder and a branch"
    )]
    BadId(String),
    #[error("the id {0:?} is used twice")]
    UsedTwice(String),
    #[error("the goal is empty")]
    NoGoal,
    #[error("the repo is empty")]
    NoRepo,
    #[error("config must be an object of settings")]
    ConfigNotAnObject,
    #[error(
        "its config sets {}, which run programs, name servers, send data, approve or hold secrets: only the runner's own configuration and environment may set them (a queue's owner may let a task name endpoints and sandboxed commands with `agent-ls enqueue --trusted`, never keys, the sandbox, MCP servers or files of the worker's)",
        .0.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
    )]
    RunnerOnly(Vec<String>),
    #[error(
        "its config is not valid: {}",
        .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    InvalidConfig(Vec<ConfigError>),
}

/// What is wrong with a tasks file: it cannot be read, or one of its lines.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {}: {source}", .path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A bad line, by its number from 1.
    #[error("line {line}: {error}")]
    Line { line: usize, error: TaskError },
}

/// One line of the tasks file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub id: String,
    /// A path (relative to the tasks file's folder) or a git URL.
    pub repo: String,
    /// The commit the task starts from (default HEAD).
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    pub goal: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Settings for this task's run, as in the configuration file (an object of sections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
}

/// A task that came from elsewhere than a file (a queue's message), checked as a line is.
pub fn from_value(value: &serde_json::Value) -> Result<Task, TaskError> {
    let t = Task::deserialize(value)?;
    check(&t)?;
    Ok(t)
}

/// Reads every task, or says what is wrong with each bad line.
pub fn read(path: &Path) -> Result<Vec<Task>, Vec<FileError>> {
    let text = std::fs::read_to_string(path).map_err(|source| {
        vec![FileError::Unreadable {
            path: path.to_path_buf(),
            source,
        }]
    })?;
    parse(&text)
}

/// The tasks of a file's text; blank lines are skipped.
pub fn parse(text: &str) -> Result<Vec<Task>, Vec<FileError>> {
    let mut tasks = Vec::new();
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let task = serde_json::from_str::<Task>(line)
            .map_err(TaskError::from)
            .and_then(|t| check(&t).map(|()| t))
            .and_then(|t| {
                if seen.insert(t.id.clone()) {
                    Ok(t)
                } else {
                    Err(TaskError::UsedTwice(t.id))
                }
            });
        match task {
            Ok(t) => tasks.push(t),
            Err(error) => errors.push(FileError::Line { line: n, error }),
        }
    }
    if errors.is_empty() {
        Ok(tasks)
    } else {
        Err(errors)
    }
}

/// What a task must be to run at all: an id that can name a folder and a branch, a goal and
/// a repository.
fn check(t: &Task) -> Result<(), TaskError> {
    let id_ok = !t.id.is_empty()
        && t.id.len() <= MAX_ID
        && !t.id.starts_with(['.', '-'])
        && t.id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !t.id.contains("..");
    if !id_ok {
        return Err(TaskError::BadId(t.id.clone()));
    }
    if t.goal.trim().is_empty() {
        return Err(TaskError::NoGoal);
    }
    if t.repo.trim().is_empty() {
        return Err(TaskError::NoRepo);
    }
    if t.config.as_ref().is_some_and(|c| !c.is_object()) {
        return Err(TaskError::ConfigNotAnObject);
    }
    Ok(())
}

/// The settings of a task's `config` as `AGENT_LS_<SECTION>__<KEY>` variables for its run,
/// or why the task is refused: a key only the batch runner's own configuration may set (a
/// model endpoint, a command, keys: `config::runner_only`), or a value the configuration
/// does not accept. A `trusted` task (`enqueue --trusted`) may name endpoints and commands,
/// but never keys, the sandbox or the other user-only keys.
pub fn settings(
    config: Option<&serde_json::Value>,
    trusted: bool,
) -> Result<Vec<(String, String)>, TaskError> {
    let Some(value) = config else {
        return Ok(Vec::new());
    };
    let mut leaves = Vec::new();
    flatten("", value, &mut leaves);
    let refused: Vec<String> = leaves
        .iter()
        .map(|(k, _)| k)
        .filter(|k| {
            if set_by_the_worker(k) {
                true
            } else if trusted {
                never_from_a_task(k)
            } else {
                config::runner_only(k)
            }
        })
        .cloned()
        .collect();
    if !refused.is_empty() {
        return Err(TaskError::RunnerOnly(refused));
    }
    config::json_layer(Source::ClientSettings, value).map_err(TaskError::InvalidConfig)?;
    Ok(leaves
        .into_iter()
        // A JSON scalar or array of scalars reads the same as a TOML value.
        .map(|(key, v)| (env_name(&key), v.to_string()))
        .collect())
}

/// The `AGENT_LS_<SECTION>__<KEY>` variable that sets `key` (dotted).
fn env_name(key: &str) -> String {
    format!("AGENT_LS_{}", key.replace('.', "__").to_ascii_uppercase())
}

/// Settings the worker gives every run itself, which no task sets, trusted or not:
/// `tester.install` off, since the run's `--yes` is no one's approval of an install that runs
/// outside the sandbox; `git.isolation` none, since the task's worktree is its isolation.
const SET_BY_THE_WORKER: &[(&str, &str)] =
    &[("tester.install", "false"), ("git.isolation", "none")];

/// The worker's own settings for every run (`SET_BY_THE_WORKER`) as variables, to be set
/// after the task's.
pub fn worker_settings() -> Vec<(String, String)> {
    SET_BY_THE_WORKER
        .iter()
        .map(|(key, value)| (env_name(key), value.to_string()))
        .collect()
}

fn set_by_the_worker(key: &str) -> bool {
    SET_BY_THE_WORKER
        .iter()
        .any(|(k, _)| key == *k || key.starts_with(&format!("{k}.")))
}

/// Keys no task sets even when trusted, besides secrets, the sandbox and the user-only keys:
/// those that start a program outside the sandbox (`mcp`: its servers' commands) or name a
/// file of the worker's machine to write (`log.file`) or read (`model.replay_file`; a custom
/// agent's `prompt`, whose text goes to the model, under `agents`). The commands a trusted
/// task may name (`test.command`) run inside the sandbox.
const NEVER_FROM_A_TRUSTED_TASK: &[&str] = &["mcp", "log.file", "model.replay_file"];

/// Keys no task sets, trusted or not: secrets and the names of the variables holding them
/// (keys come from the worker's environment only), the sandbox (it applies to every task),
/// the other user-only keys, and `NEVER_FROM_A_TRUSTED_TASK`.
fn never_from_a_task(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    let covered = |list: &[&str]| {
        list.iter()
            .any(|k| key == *k || key.starts_with(&format!("{k}.")))
    };
    last.contains("api_key")
        || key == "sandbox"
        || key.starts_with("sandbox.")
        || covered(config::USER_ONLY_KEYS)
        || covered(NEVER_FROM_A_TRUSTED_TASK)
        || (key.starts_with("agents.") && last == "prompt")
}

/// The non-object values of `value` under their dotted keys (nulls left out: not set).
fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        serde_json::Value::Null => {}
        other => out.push((prefix.to_string(), other.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bad_lines_are_named_by_number_and_good_ones_parse() {
        let text = "{\"id\":\"a\",\"repo\":\".\",\"goal\":\"g\"}\n\nnot json\n{\"id\":\"a\",\"repo\":\".\",\"goal\":\"g\"}\n{\"id\":\"../x\",\"repo\":\".\",\"goal\":\"g\"}\n";
        let errors: Vec<String> = parse(text)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with("line 3:"), "{errors:?}");
        assert!(errors[1].starts_with("line 4:") && errors[1].contains("twice"));
        assert!(errors[2].starts_with("line 5:"));
        let ok = parse("{\"id\":\"a-1\",\"repo\":\"r\",\"ref\":\"main\",\"goal\":\"g\"}").unwrap();
        assert_eq!(ok[0].git_ref.as_deref(), Some("main"));
    }

    #[test]
    fn a_config_naming_an_endpoint_a_command_or_a_key_is_refused() {
        for bad in [
            json!({"model": {"base_url": "http://x"}}),
            json!({"test": {"command": ["sh"]}}),
            json!({"model": {"api_key": "k"}}),
            json!({"sandbox": {"mode": "off"}}),
        ] {
            assert!(settings(Some(&bad), false).is_err(), "{bad}");
        }
        let env = settings(
            Some(&json!({"agent": {"evaluate": false, "review": "off"}})),
            false,
        )
        .unwrap();
        assert!(env.contains(&("AGENT_LS_AGENT__EVALUATE".into(), "false".into())));
        assert!(env.contains(&("AGENT_LS_AGENT__REVIEW".into(), "\"off\"".into())));
        assert!(settings(Some(&json!({"agent": {"evaluate": "maybe"}})), false).is_err());
        // Trusted (`enqueue --trusted`): endpoints and commands, but never keys or the sandbox.
        let endpoint = json!({"model": {"base_url": "http://x"}, "test": {"command": ["sh"]}});
        assert!(settings(Some(&endpoint), true).is_ok());
        let agent = json!({"agents": {"prompt": {"description": "d", "tools": ["read_file"]}}});
        assert!(settings(Some(&agent), true).is_ok());
        for never in [
            json!({"model": {"api_key": "k"}}),
            json!({"roles": {"coder": {"api_key": "k"}}}),
            json!({"memory": {"embeddings": {"api_key_env": "AWS_SECRET"}}}),
            json!({"sandbox": {"mode": "off"}}),
            json!({"test": {"env_allow": ["HOME"]}}),
            // The worker turns installs off for every run: a task cannot turn them back on.
            json!({"tester": {"install": true}}),
            json!({"git": {"isolation": "branch"}}),
            // Outside the sandbox, or a file of the worker's by its path.
            json!({"mcp": {"servers": {"x": {"command": "sh"}}}}),
            json!({"log": {"file": "/home/worker/.bashrc"}}),
            json!({"model": {"replay_file": "/etc/passwd"}}),
            json!({"agents": {"thief": {"prompt": "/home/worker/.ssh/id_rsa"}}}),
        ] {
            assert!(settings(Some(&never), true).is_err(), "{never}");
            assert!(settings(Some(&never), false).is_err(), "{never}");
        }
        assert_eq!(
            worker_settings(),
            [
                ("AGENT_LS_TESTER__INSTALL".to_string(), "false".to_string()),
                ("AGENT_LS_GIT__ISOLATION".to_string(), "none".to_string())
            ]
        );
    }
}
