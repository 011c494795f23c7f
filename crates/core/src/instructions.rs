//! Instruction files (AGENTS.md and its kin) as the model reads them: which folders' files
//! apply to a path, and the top-down join within a byte budget, cutting the farthest file
//! first and saying so. Pure: the runtime finds and reads the files (`runtime::instructions`)
//! and hands them in farthest first; docs/instructions.md is the user's page.

use serde::{Deserialize, Serialize};

/// The names looked for in each folder, in order: the first present is the folder's file.
/// `fallbacks` (configured, `context.instruction_files`) come after the two fixed names.
pub fn candidates(fallbacks: &[String]) -> Vec<&str> {
    let mut names = vec!["AGENTS.override.md", "AGENTS.md"];
    for f in fallbacks {
        if !f.is_empty() && !names.contains(&f.as_str()) {
            names.push(f);
        }
    }
    names
}

/// The folders whose instruction files apply to the workspace-relative `path` (a file), from
/// the root (`""`) down to the file's own folder.
pub fn folders_of(path: &str) -> Vec<String> {
    let path = path.trim_start_matches("./").trim_matches('/');
    let mut folders = vec![String::new()];
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let Some((_, dirs)) = parts.split_last() else {
        return folders;
    };
    let mut at = String::new();
    for d in dirs {
        if *d == "." || *d == ".." {
            return folders;
        }
        if !at.is_empty() {
            at.push('/');
        }
        at.push_str(d);
        folders.push(at.clone());
    }
    folders
}

/// Where an instruction file applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The user's own file: every run.
    Global,
    /// A folder of the workspace (`""` the root): files under it.
    Folder(String),
}

/// One instruction file, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// How the file is named to the model and the user (`AGENTS.md`, `sdk/go/AGENTS.md`,
    /// `~/.config/agent-ls/AGENTS.md`).
    pub path: String,
    pub scope: Scope,
    pub text: String,
}

/// One file as the join used it: its bytes in the prompt, and those the budget cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Used {
    pub path: String,
    pub bytes: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cut_bytes: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The files joined: the text for the system prompt, what each file gave, and the sentence
/// that says what the budget cut (for the journal and the user), if it cut anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Joined {
    pub text: String,
    pub used: Vec<Used>,
    pub cut: Option<String>,
}

const HEAD: &str = "Instructions from the project's files (AGENTS.md and the like). They are the notes of the people who work here, for you: follow them. They are ordered from the farthest to the nearest; where two disagree, the later (nearer) one wins. They are text, not settings: they change neither your tools nor what is approved.\n";

/// Joins `sources` (ordered farthest first: the global file, the root's, then deeper
/// folders') top-down, so the nearest comes last and wins. When their bytes exceed `budget`
/// the farthest are cut first: whole files while they fit in the excess, then the tail of the
/// next one at a line boundary. The nearest file is the last one cut (Codex cuts it first,
/// and silently). Empty files are left out.
pub fn join(sources: &[Source], budget: usize) -> Joined {
    let sources: Vec<&Source> = sources
        .iter()
        .filter(|s| !s.text.trim().is_empty())
        .collect();
    let total: usize = sources.iter().map(|s| s.text.len()).sum();
    let mut excess = total.saturating_sub(budget);
    let mut kept: Vec<&str> = Vec::with_capacity(sources.len());
    for s in &sources {
        let text = s.text.as_str();
        if excess == 0 {
            kept.push(text);
        } else if text.len() <= excess {
            excess -= text.len();
            kept.push("");
        } else {
            let head = head_within(text, text.len() - excess);
            excess = 0;
            kept.push(head);
        }
    }
    let mut joined = Joined::default();
    let mut cut_names = Vec::new();
    for (s, k) in sources.iter().zip(&kept) {
        let cut_bytes = s.text.len() - k.len();
        if cut_bytes > 0 {
            cut_names.push(format!(
                "{} ({cut_bytes} of {} bytes)",
                s.path,
                s.text.len()
            ));
        }
        joined.used.push(Used {
            path: s.path.clone(),
            bytes: k.len(),
            cut_bytes,
        });
        if k.is_empty() {
            continue;
        }
        joined
            .text
            .push_str(&format!("\n## {}{}\n", s.path, scope_note(&s.scope)));
        joined.text.push_str(k.trim_end());
        joined.text.push('\n');
        if cut_bytes > 0 {
            joined.text.push_str(&format!(
                "[the rest of {} was cut: {cut_bytes} bytes over the instructions budget]\n",
                s.path
            ));
        }
    }
    if !cut_names.is_empty() {
        joined.cut = Some(format!(
            "instruction files over the budget of {budget} bytes (context.instructions_bytes): cut {}, the farthest first",
            cut_names.join(", ")
        ));
    }
    if !joined.text.is_empty() {
        joined.text.insert_str(0, HEAD);
    }
    joined
}

fn scope_note(scope: &Scope) -> String {
    match scope {
        Scope::Global => " (the user's own, for every project)".into(),
        Scope::Folder(f) if f.is_empty() => String::new(),
        Scope::Folder(f) => format!(" (for the files under {f}/)"),
    }
}

/// The longest head of `text` within `room` bytes that ends at a line's end; empty when not
/// even its first line fits (half a line would read as a different rule).
fn head_within(text: &str, room: usize) -> &str {
    if room >= text.len() {
        return text;
    }
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    match text[..end].rfind('\n') {
        Some(nl) => &text[..nl + 1],
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(path: &str, folder: Option<&str>, text: &str) -> Source {
        Source {
            path: path.into(),
            scope: folder.map_or(Scope::Global, |f| Scope::Folder(f.into())),
            text: text.into(),
        }
    }

    #[test]
    fn the_folders_of_a_path_run_from_the_root_down() {
        assert_eq!(folders_of("sdk/go/x.go"), ["", "sdk", "sdk/go"]);
        assert_eq!(folders_of("README.md"), [""]);
        assert_eq!(folders_of("./a/b.rs"), ["", "a"]);
        assert_eq!(folders_of("../up/x"), [""]);
    }

    #[test]
    fn the_override_then_agents_then_the_fallbacks() {
        let fallbacks = ["CLAUDE.md".into(), "AGENTS.md".into(), String::new()];
        let names = candidates(&fallbacks);
        assert_eq!(names, ["AGENTS.override.md", "AGENTS.md", "CLAUDE.md"]);
    }

    #[test]
    fn files_are_joined_top_down_so_the_nearest_comes_last() {
        let j = join(
            &[
                src("~/.config/agent-ls/AGENTS.md", None, "use tabs\n"),
                src("AGENTS.md", Some(""), "use spaces\n"),
                src("sdk/go/AGENTS.md", Some("sdk/go"), "use gofmt\n"),
            ],
            1000,
        );
        let (a, b, c) = (
            j.text.find("use tabs").unwrap(),
            j.text.find("use spaces").unwrap(),
            j.text.find("use gofmt").unwrap(),
        );
        assert!(a < b && b < c, "{}", j.text);
        assert!(
            j.text
                .contains("## sdk/go/AGENTS.md (for the files under sdk/go/)")
        );
        assert!(j.text.starts_with(HEAD));
        assert_eq!(j.cut, None);
        assert_eq!(
            j.used.iter().map(|u| u.bytes).collect::<Vec<_>>(),
            [9, 11, 10]
        );
    }

    #[test]
    fn the_budget_cuts_the_farthest_first_and_says_so() {
        let far = "far one\nfar two\n"; // 16 bytes
        let mid = "mid one\nmid two\n"; // 16 bytes
        let near = "near\n"; // 5 bytes
        let sources = [
            src("~/AGENTS.md", None, far),
            src("AGENTS.md", Some(""), mid),
            src("a/AGENTS.md", Some("a"), near),
        ];
        // 37 bytes in 29, 8 over: the global file keeps its first line, the others stay.
        let j = join(&sources, 29);
        assert_eq!(j.used[0].bytes, 8);
        assert_eq!(j.used[0].cut_bytes, 8);
        assert_eq!((j.used[1].bytes, j.used[2].bytes), (16, 5));
        assert!(j.text.contains("far one") && !j.text.contains("far two"));
        assert!(j.text.contains("mid two") && j.text.contains("near"));
        let note = j.cut.unwrap();
        assert!(note.contains("~/AGENTS.md (8 of 16 bytes)"), "{note}");
        assert!(note.contains("the farthest first"), "{note}");
        // 37 in 10: the farthest two go whole, the nearest stays.
        let j = join(&sources, 10);
        assert_eq!(
            j.used.iter().map(|u| u.bytes).collect::<Vec<_>>(),
            [0, 0, 5]
        );
        assert!(j.text.contains("near") && !j.text.contains("mid"));
        assert!(!j.text.contains("## AGENTS.md\n"), "{}", j.text);
        // Within budget, nothing is cut and nothing said.
        assert_eq!(join(&sources, 37).cut, None);
    }

    #[test]
    fn a_cut_keeps_whole_lines_and_an_empty_file_is_left_out() {
        // 12 bytes in 6: the cut falls inside the second line's first character.
        let j = join(
            &[
                src("AGENTS.md", Some(""), "éé\nééé\n"),
                src("b/AGENTS.md", Some("b"), "  \n"),
            ],
            6,
        );
        assert_eq!(j.used.len(), 1);
        assert_eq!(j.used[0].bytes, 5);
        assert!(j.text.contains("éé\n[the rest"), "{}", j.text);
        // Not even the first line fits: the file goes whole.
        let whole = join(&[src("AGENTS.md", Some(""), "a long line\n")], 4);
        assert_eq!(whole.used[0].bytes, 0);
        assert_eq!(join(&[], 10), Joined::default());
    }
}
