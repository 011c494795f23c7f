//! Instruction files for a run: the user's `AGENTS.md` beside their configuration, then one
//! file a folder from the workspace root down to each folder the run works in
//! (`AGENTS.override.md`, else `AGENTS.md`, else `context.instruction_files`), joined by the
//! core (`agent_ls_core::instructions::join`) within `context.instructions_bytes`, with the
//! skills' list after them. The run starts with the root's; a nested file joins once the run
//! reads or edits a file under its folder (`Tracker::saw`). They are text for the model, never
//! configuration: nothing here decides what runs or what is approved (docs/instructions.md).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agent_ls_core::edit::FileText;
use agent_ls_core::instructions::{self, Joined, Scope, Source, Used};

use crate::config::Config;
use crate::model::ToolCall;

/// The largest instruction file read: a hostile repository's huge file costs no memory.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The user's own instruction file: `AGENTS.md` beside their configuration file
/// (`~/.config/agent-ls/AGENTS.md`).
pub fn global_file() -> Option<PathBuf> {
    Some(
        crate::config::user_config_path()?
            .parent()?
            .join("AGENTS.md"),
    )
}

/// The instruction files of `folders` (workspace-relative, `""` the root), the user's first,
/// then the folders from the shallowest: each folder's first file among the candidates.
pub fn gather(
    root: &Path,
    config: &Config,
    folders: &BTreeSet<String>,
    global: Option<&Path>,
) -> Vec<Source> {
    let mut sources = Vec::new();
    if let Some(path) = global
        && let Some(text) = read_limited(path)
    {
        sources.push(Source {
            path: path.display().to_string(),
            scope: Scope::Global,
            text,
        });
    }
    let mut ordered: Vec<&String> = folders.iter().collect();
    ordered.sort_by_key(|f| (depth(f), f.as_str()));
    let names = instructions::candidates(&config.context.instruction_files);
    for folder in ordered {
        for name in &names {
            let rel = if folder.is_empty() {
                name.to_string()
            } else {
                format!("{folder}/{name}")
            };
            if let Some(text) = read_workspace(root, &rel) {
                sources.push(Source {
                    path: rel,
                    scope: Scope::Folder(folder.clone()),
                    text,
                });
                break;
            }
        }
    }
    sources
}

fn depth(folder: &str) -> usize {
    if folder.is_empty() {
        0
    } else {
        folder.matches('/').count() + 1
    }
}

fn read_limited(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// A workspace file, through the workspace's own path rules (no way out through a symlink).
fn read_workspace(root: &Path, rel: &str) -> Option<String> {
    let meta = std::fs::metadata(root.join(rel)).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    match crate::files::read_for_plan(root, rel) {
        FileText::Text(t) => Some(t),
        _ => None,
    }
}

/// What the system prompt gets: the joined files, then the skills' list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prompt {
    pub joined: Joined,
    pub skills: Vec<String>,
    pub text: String,
}

/// A run's instruction files as it goes: the folders it works in so far, and what it was
/// last handed.
pub struct Tracker {
    root: PathBuf,
    config: Config,
    folders: BTreeSet<String>,
    global: Option<PathBuf>,
    skills: Vec<crate::skills::Skill>,
    last: Vec<Used>,
}

impl Tracker {
    /// The run starts at the workspace root; the skills are found now.
    pub fn new(root: &Path, config: &Config) -> (Tracker, Vec<String>) {
        let found = crate::skills::discover(root);
        let tracker = Tracker {
            root: root.to_path_buf(),
            config: config.clone(),
            folders: BTreeSet::from([String::new()]),
            global: global_file(),
            skills: found.skills,
            last: Vec::new(),
        };
        (tracker, found.problems)
    }

    /// The prompt for the folders so far.
    pub fn prompt(&mut self) -> Prompt {
        let joined = if self.config.context.instructions_bytes == 0 {
            Joined::default()
        } else {
            let sources = gather(
                &self.root,
                &self.config,
                &self.folders,
                self.global.as_deref(),
            );
            instructions::join(&sources, self.config.context.instructions_bytes)
        };
        let fronts: Vec<_> = self.skills.iter().map(|s| s.front.clone()).collect();
        let listing = agent_ls_core::skills::listing(&fronts);
        let text = match (joined.text.is_empty(), listing.is_empty()) {
            (_, true) => joined.text.clone(),
            (true, false) => listing,
            (false, false) => format!("{}\n{listing}", joined.text),
        };
        self.last = joined.used.clone();
        Prompt {
            skills: fronts.into_iter().map(|f| f.name).collect(),
            joined,
            text,
        }
    }

    /// The run read or is about to edit these tools' paths: their folders are now the run's.
    pub fn saw(&mut self, calls: &[ToolCall]) {
        for call in calls {
            if let Some(path) = call.arguments.get("path").and_then(|p| p.as_str()) {
                self.saw_path(path);
            }
        }
    }

    /// The run works in these folders from its start (the folders of the files and the
    /// folders its goal names), so their instruction files are in its first prompt.
    pub fn work_in(&mut self, folders: &[String]) {
        for folder in folders {
            self.saw_path(&format!("{}/_", folder.trim_end_matches('/')));
        }
    }

    fn saw_path(&mut self, path: &str) -> bool {
        let mut new = false;
        for f in instructions::folders_of(path) {
            new |= self.folders.insert(f);
        }
        new
    }

    /// After a step: the files the run changed count as worked in. A new prompt when the
    /// files it uses changed (a nested file came in, or the budget cut one more).
    pub fn update(&mut self, changed: &[String]) -> Option<Prompt> {
        for path in changed {
            self.saw_path(path);
        }
        let before = self.last.clone();
        let prompt = self.prompt();
        (prompt.joined.used != before).then_some(prompt)
    }

    /// The tools this tracker adds to a call offered `tools`: `read_skill`, when there are
    /// skills and the call may read.
    pub fn tool_specs(&self, tools: &[String]) -> Vec<crate::model::ToolSpec> {
        if self.skills.is_empty() || !tools.iter().any(|t| t == "read_file") {
            return Vec::new();
        }
        vec![crate::skills::spec()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::default()
    }

    #[test]
    fn a_folder_takes_its_first_candidate_and_a_nested_one_only_once_seen() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("AGENTS.md"), "root rules\n").unwrap();
        std::fs::write(root.join("CLAUDE.md"), "claude rules\n").unwrap();
        std::fs::create_dir_all(root.join("sub/deep")).unwrap();
        std::fs::write(root.join("sub/CLAUDE.md"), "sub rules\n").unwrap();
        std::fs::write(root.join("sub/AGENTS.override.md"), "override\n").unwrap();
        let (mut t, _) = Tracker::new(root, &config());
        t.global = None;
        let first = t.prompt();
        assert!(first.text.contains("root rules") && !first.text.contains("claude rules"));
        assert!(!first.text.contains("override"));
        assert_eq!(t.update(&[]), None);
        let call = ToolCall {
            id: "1".into(),
            name: "read_file".into(),
            arguments: serde_json::json!({"path": "sub/deep/x.py"}),
        };
        t.saw(std::slice::from_ref(&call));
        let next = t.update(&[]).expect("the nested file comes in");
        assert!(next.text.contains("override") && !next.text.contains("sub rules"));
        let paths: Vec<_> = next.joined.used.iter().map(|u| u.path.as_str()).collect();
        assert_eq!(paths, ["AGENTS.md", "sub/AGENTS.override.md"]);
    }
}
