//! Skills on disk: `.agents/skills/*/SKILL.md` in the workspace and `skills/*/SKILL.md`
//! beside the user's configuration (`~/.config/agent-ls/skills/`), and the `read_skill` tool
//! that opens one for the model. The prompt carries only each skill's name and description
//! (`agent_ls_core::skills::listing`); the body reaches the model when it calls `read_skill`.
//! A skill's scripts run only through `run_command`, so through the allowlist and the
//! sandbox like any command: nothing here runs anything (docs/skills.md).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use agent_ls_core::skills::{self, Front};

use crate::model::ToolSpec;
use crate::tools::{Limits, Output, cap};

/// The tool that opens a skill.
pub const TOOL: &str = "read_skill";

/// Where the workspace's skills are.
pub const WORKSPACE_DIR: &str = ".agents/skills";

/// The largest SKILL.md read.
const MAX_SKILL_BYTES: u64 = 256 * 1024;

/// The most skills read from one folder.
const MAX_SKILLS: usize = 200;

/// One skill found.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub front: Front,
    /// Its folder.
    pub dir: PathBuf,
    /// Its folder as the model and the user see it: workspace-relative for the workspace's,
    /// absolute for the user's.
    pub shown: String,
    /// In the workspace (read with `read_file`), or the user's (read through `read_skill`).
    pub in_workspace: bool,
}

/// The skills found, and the SKILL.md files that are not skills (why, for the user).
#[derive(Debug, Default)]
pub struct Found {
    pub skills: Vec<Skill>,
    pub problems: Vec<String>,
}

/// The user's skills folder.
pub fn user_dir() -> Option<PathBuf> {
    Some(crate::config::user_config_path()?.parent()?.join("skills"))
}

/// The workspace's skills, then the user's; a workspace skill hides a user's of its name.
pub fn discover(root: &Path) -> Found {
    discover_in(root, user_dir().as_deref())
}

fn discover_in(root: &Path, user: Option<&Path>) -> Found {
    let mut found = Found::default();
    read_folder(&root.join(WORKSPACE_DIR), Some(root), &mut found);
    if let Some(user) = user {
        read_folder(user, None, &mut found);
    }
    found
}

/// The skills of one folder, in name order, into `found`.
fn read_folder(dir: &Path, root: Option<&Path>, found: &mut Found) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    dirs.sort();
    for skill_dir in dirs.into_iter().take(MAX_SKILLS) {
        let file = skill_dir.join("SKILL.md");
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        let shown = match root {
            Some(root) => skill_dir
                .strip_prefix(root)
                .unwrap_or(&skill_dir)
                .display()
                .to_string(),
            None => skill_dir.display().to_string(),
        };
        if meta.len() > MAX_SKILL_BYTES {
            found.problems.push(format!(
                "skill {shown}: SKILL.md is over {MAX_SKILL_BYTES} bytes"
            ));
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        match skills::parse(&text) {
            Ok(front) if found.skills.iter().any(|s| s.front.name == front.name) => {
                found.problems.push(format!(
                    "skill {shown}: `{}` is already a skill of the workspace, which wins",
                    front.name
                ));
            }
            Ok(front) => found.skills.push(Skill {
                front,
                dir: skill_dir.clone(),
                shown,
                in_workspace: root.is_some(),
            }),
            Err(e) => found
                .problems
                .push(format!("skill {shown}: SKILL.md is not read: {e}")),
        }
    }
}

/// The skill called `name`, if there is one.
pub fn find(root: &Path, name: &str) -> Option<Skill> {
    discover(root)
        .skills
        .into_iter()
        .find(|s| s.front.name == name)
}

/// `read_skill` as the model is offered it.
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: TOOL.into(),
        description: "Open a skill the system prompt lists: its instructions and the names of its files. Give `file` to read one of its files instead (a user's skill lives outside the workspace; a workspace skill's files read as well with read_file).".into(),
        parameters: json!({"type": "object", "properties": {
            "name": {"type": "string", "description": "the skill's name, as listed"},
            "file": {"type": "string", "description": "a file of the skill, relative to its folder"}
        }, "required": ["name"]}),
    }
}

/// Runs a `read_skill` call: the skill's SKILL.md without its front matter, headed by where
/// its files are and how its scripts run; or one of its files. Every failure is an answer.
pub fn read_tool(root: &Path, args: &Value, limits: &Limits) -> Output {
    let Some(name) = args.get("name").and_then(Value::as_str) else {
        return Output::error("`name` is required");
    };
    let found = discover(root);
    let Some(skill) = found.skills.iter().find(|s| s.front.name == name) else {
        let names: Vec<&str> = found.skills.iter().map(|s| s.front.name.as_str()).collect();
        return Output::error(format!(
            "there is no skill `{name}`; the skills are {}",
            names.join(", ")
        ));
    };
    let text = match args.get("file").and_then(Value::as_str) {
        Some(file) => match skill_file(skill, file) {
            Ok(t) => t,
            Err(why) => return Output::error(why.to_string()),
        },
        None => opened(skill),
    };
    Output::ok(cap(&text, limits.result_bytes))
}

/// The opened skill as the model reads it.
fn opened(skill: &Skill) -> String {
    let text = std::fs::read_to_string(skill.dir.join("SKILL.md")).unwrap_or_default();
    let how = if skill.in_workspace {
        format!("read them with read_file (as {}/FILE)", skill.shown)
    } else {
        "read them with read_skill and `file`".to_string()
    };
    format!(
        "Skill `{}` ({}/SKILL.md). Its files: {}; {how}. Run its scripts only with run_command, from the workspace root: the command allowlist and the sandbox apply as to any command.\n\n{}",
        skill.front.name,
        skill.shown,
        files_of(&skill.dir).join(", "),
        skills::body(&text).trim_start()
    )
}

/// A skill's files, relative to its folder (at most 50, three folders deep).
fn files_of(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            if p.is_dir() && depth < 3 {
                stack.push((p, depth + 1));
            } else if p.is_file() && out.len() < 50 {
                let rel = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
                if rel != "SKILL.md" {
                    out.push(rel);
                }
            }
        }
    }
    out.sort();
    out
}

/// Why `read_skill` cannot give a skill's file; the model reads the text.
#[derive(Debug, thiserror::Error)]
enum FileError {
    #[error("`{0}` is not a path inside the skill's folder")]
    NotInside(String),
    #[error("the skill has no file `{0}`")]
    Missing(String),
    #[error("`{0}` leads out of the skill's folder")]
    LeadsOut(String),
    #[error("`{file}` cannot be read: {source}")]
    Unreadable {
        file: String,
        source: std::io::Error,
    },
}

/// One file of a skill, refused outside its folder.
fn skill_file(skill: &Skill, file: &str) -> Result<String, FileError> {
    let rel = Path::new(file);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(FileError::NotInside(file.into()));
    }
    let path = skill.dir.join(rel);
    let (Ok(real), Ok(base)) = (path.canonicalize(), skill.dir.canonicalize()) else {
        return Err(FileError::Missing(file.into()));
    };
    if !real.starts_with(&base) {
        return Err(FileError::LeadsOut(file.into()));
    }
    std::fs::read_to_string(&real).map_err(|source| FileError::Unreadable {
        file: file.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_skills_hide_the_users_of_the_same_name_and_bad_ones_are_named() {
        let ws = tempfile::tempdir().unwrap();
        let user = tempfile::tempdir().unwrap();
        let write = |dir: &Path, name: &str, text: &str| {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join("SKILL.md"), text).unwrap();
        };
        let skills = ws.path().join(WORKSPACE_DIR);
        write(
            &skills,
            "a",
            "---\nname: a\ndescription: the workspace's\n---\nbody\n",
        );
        write(&skills, "bad", "no front matter\n");
        write(
            user.path(),
            "a",
            "---\nname: a\ndescription: the user's\n---\n",
        );
        write(
            user.path(),
            "b",
            "---\nname: b\ndescription: only the user's\n---\n",
        );
        let found = discover_in(ws.path(), Some(user.path()));
        let names: Vec<_> = found
            .skills
            .iter()
            .map(|s| {
                (
                    s.front.name.as_str(),
                    s.front.description.as_str(),
                    s.in_workspace,
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("a", "the workspace's", true),
                ("b", "only the user's", false)
            ]
        );
        assert_eq!(found.problems.len(), 2, "{:?}", found.problems);
        let b = &found.skills[1];
        assert!(skill_file(b, "../a/SKILL.md").is_err());
        assert!(
            skill_file(b, "SKILL.md")
                .unwrap()
                .contains("only the user's")
        );
    }
}
