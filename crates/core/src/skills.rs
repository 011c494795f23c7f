//! Skills as the model and the user see them: a `SKILL.md`'s front matter read (its name, its
//! description, the file patterns it is for), the list the prompt carries (names and
//! descriptions only: the model opens one with the `read_skill` tool), the goal a run of a
//! skill starts with, and whether a skill is for a file. Pure: the runtime finds the files
//! (`runtime::skills`); docs/skills.md is the user's page.

use thiserror::Error;

/// A skill's front matter: what the prompt lists and the editor offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Front {
    pub name: String,
    pub description: String,
    /// Globs over workspace paths (`paths:` in the front matter): the editor offers the skill
    /// as a code action on the files they match. Empty: offered from the palette only.
    pub paths: Vec<String>,
}

/// Why a SKILL.md is not a skill.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SkillError {
    #[error("it does not open with a `---` front matter block")]
    NoFrontMatter,
    #[error("its front matter has no `{0}`")]
    Missing(&'static str),
    #[error("its name `{0}` is not lowercase letters, digits and hyphens (64 at most)")]
    BadName(String),
}

/// The most bytes of a description the prompt carries.
const MAX_DESCRIPTION: usize = 1024;

/// Reads the front matter of a SKILL.md: the `---` block's `name`, `description` and `paths`
/// (a `[a, b]` list, one `- item` a line, or a single value). Other keys are ignored; only
/// the flat `key: value` form is read (nested maps are skipped).
pub fn parse(text: &str) -> Result<Front, SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(SkillError::NoFrontMatter);
    }
    let (mut name, mut description, mut paths) = (None, None, Vec::new());
    let mut in_paths = false;
    for line in lines {
        if line.trim_end() == "---" {
            let name: String = name.ok_or(SkillError::Missing("name"))?;
            let description: String = description.ok_or(SkillError::Missing("description"))?;
            if name.is_empty()
                || name.len() > 64
                || !name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                return Err(SkillError::BadName(name));
            }
            return Ok(Front {
                name,
                description: clip(&description, MAX_DESCRIPTION),
                paths,
            });
        }
        if in_paths && let Some(item) = line.trim_start().strip_prefix("- ") {
            paths.push(unquote(item));
            continue;
        }
        in_paths = false;
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "name" => name = Some(unquote(value)),
            "description" => description = Some(unquote(value)),
            "paths" | "globs" => {
                if value.is_empty() {
                    in_paths = true;
                } else if let Some(list) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']'))
                {
                    paths.extend(list.split(',').map(unquote).filter(|p| !p.is_empty()));
                } else {
                    paths.extend(value.split(',').map(unquote).filter(|p| !p.is_empty()));
                }
            }
            _ => {}
        }
    }
    Err(SkillError::NoFrontMatter)
}

fn unquote(value: &str) -> String {
    let v = value.trim();
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
            return inner.to_string();
        }
    }
    v.to_string()
}

fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The SKILL.md without its front matter: what `read_skill` gives the model.
pub fn body(text: &str) -> &str {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text.strip_prefix("---") else {
        return text;
    };
    match rest.find("\n---") {
        Some(i) => {
            let after = &rest[i + 4..];
            after.strip_prefix('\n').unwrap_or(after)
        }
        None => text,
    }
}

/// The section of the system prompt that lists the skills: each one's name and description,
/// and how to open one. Empty when there are none.
pub fn listing(skills: &[Front]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "Skills: instructions for particular tasks, kept apart until needed. When a task matches one, call the read_skill tool with its name before you start, and follow what it says. Its files are read with read_file; its scripts run only through run_command, like any command.\n",
    );
    for s in skills {
        out.push_str(&format!("- {}: {}\n", s.name, s.description));
    }
    out
}

/// The goal of a run of the skill `name` (`agent-ls run --skill`, the editor's "Run Skill",
/// ACP's `/name`), with what the user added.
pub fn goal(name: &str, request: &str) -> String {
    let request = request.trim();
    // No "then" and no second sentence: the goal stays one task, not a plan (`needs_plan`).
    let mut goal =
        format!("Use the skill `{name}` (open it with the read_skill tool and do what it says)");
    if request.is_empty() {
        goal.push('.');
    } else {
        goal.push_str(&format!(" for this: {request}"));
    }
    goal
}

/// Whether the skill's `paths` globs match the workspace-relative `path` (`*` within a
/// folder, `**` across folders, `?` one character); a glob without a `/` matches the file's
/// name in any folder.
pub fn is_for(front: &Front, path: &str) -> bool {
    front.paths.iter().any(|g| {
        if g.contains('/') {
            glob_match(g.trim_start_matches("./").as_bytes(), path.as_bytes())
        } else {
            let name = path.rsplit('/').next().unwrap_or(path);
            glob_match(g.as_bytes(), name.as_bytes())
        }
    })
}

fn glob_match(glob: &[u8], text: &[u8]) -> bool {
    match glob {
        [] => text.is_empty(),
        [b'*', b'*', b'/', rest @ ..] => {
            glob_match(rest, text)
                || text
                    .iter()
                    .enumerate()
                    .any(|(i, c)| *c == b'/' && glob_match(rest, &text[i + 1..]))
        }
        [b'*', b'*', rest @ ..] => (0..=text.len()).any(|i| glob_match(rest, &text[i..])),
        [b'*', rest @ ..] => (0..=text.len())
            .take_while(|i| *i == 0 || text[i - 1] != b'/')
            .any(|i| glob_match(rest, &text[i..])),
        [b'?', rest @ ..] => matches!(text, [c, ..] if *c != b'/') && glob_match(rest, &text[1..]),
        [g, rest @ ..] => matches!(text, [c, ..] if c == g) && glob_match(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKILL: &str = "---\nname: webapp-testing\ndescription: Toolkit for testing local web apps.\nlicense: Complete terms in LICENSE.txt\npaths:\n  - \"web/**/*.tsx\"\n  - '*.html'\n---\n\n# Web Application Testing\n\nRun scripts/with_server.py --help first.\n";

    #[test]
    fn the_front_matter_gives_the_name_description_and_paths() {
        let f = parse(SKILL).unwrap();
        assert_eq!(f.name, "webapp-testing");
        assert_eq!(f.description, "Toolkit for testing local web apps.");
        assert_eq!(f.paths, ["web/**/*.tsx", "*.html"]);
        let inline =
            parse("---\nname: a\ndescription: \"b: c\"\npaths: [src/*.rs, 'x']\n---\n").unwrap();
        assert_eq!(inline.description, "b: c");
        assert_eq!(inline.paths, ["src/*.rs", "x"]);
    }

    #[test]
    fn a_skill_without_name_or_description_or_with_a_bad_name_is_refused() {
        assert_eq!(parse("# no front matter"), Err(SkillError::NoFrontMatter));
        assert_eq!(
            parse("---\nname: a\n---\n"),
            Err(SkillError::Missing("description"))
        );
        assert_eq!(
            parse("---\nname: Bad Name\ndescription: d\n---\n"),
            Err(SkillError::BadName("Bad Name".into()))
        );
        assert_eq!(
            parse("---\nname: a\ndescription: d\n"),
            Err(SkillError::NoFrontMatter)
        );
    }

    #[test]
    fn the_listing_carries_names_and_descriptions_only() {
        let f = parse(SKILL).unwrap();
        let l = listing(std::slice::from_ref(&f));
        assert!(l.contains("- webapp-testing: Toolkit for testing local web apps.\n"));
        assert!(l.contains("read_skill"));
        assert!(!l.contains("with_server.py"), "{l}");
        assert_eq!(listing(&[]), "");
        assert!(body(SKILL).starts_with("\n# Web Application Testing"));
    }

    #[test]
    fn the_paths_match_files_by_glob() {
        let f = parse(SKILL).unwrap();
        assert!(is_for(&f, "web/app/page.tsx"));
        assert!(is_for(&f, "web/page.tsx"));
        assert!(is_for(&f, "deep/down/index.html"));
        assert!(!is_for(&f, "web/page.ts"));
        assert!(!is_for(&f, "src/page.tsx"));
    }

    #[test]
    fn a_skills_goal_names_it_and_what_the_user_added() {
        assert_eq!(
            goal("webapp-testing", " check the login page "),
            "Use the skill `webapp-testing` (open it with the read_skill tool and do what it says) for this: check the login page"
        );
        assert!(goal("x", "").ends_with("says)."));
        assert!(!crate::agent::needs_plan(&goal(
            "x",
            "check the login page"
        )));
    }
}
