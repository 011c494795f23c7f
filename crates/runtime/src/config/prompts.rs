//! Prompt loading: the built-in role prompts with the user's and the workspace's override
//! files (`NAME.md` in a prompts folder) over them.

use std::path::PathBuf;

use agent_ls_core::agent::prompts::{self, Prompts};

/// The built-in role prompts with `NAME.md` of each folder in `dirs` over them, later folders
/// winning. Returns the files used, for the journal, and the problems: an unreadable or empty
/// file is reported and the prompt before it kept.
pub fn load_prompts(dirs: &[PathBuf]) -> (Prompts, Vec<String>, Vec<String>) {
    let mut prompts = Prompts::default();
    let (mut used, mut problems) = (Vec::new(), Vec::new());
    for dir in dirs {
        for (name, _) in prompts::BUILT_IN {
            let path = dir.join(format!("{name}.md"));
            match std::fs::read_to_string(&path) {
                Ok(text) if !text.trim().is_empty() => {
                    prompts.set(name, &text);
                    used.push(path.display().to_string());
                }
                Ok(_) => problems.push(format!(
                    "{} is empty; the prompt before it is kept",
                    path.display()
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => problems.push(format!("{} cannot be read: {e}", path.display())),
            }
        }
    }
    (prompts, used, problems)
}
