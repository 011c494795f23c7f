//! What a goal asks for, read from its words alone: its intent (fix, edit, explain, test),
//! whether it is a palette command instead of a run (`route`), whether it is large enough to
//! plan, and its one-line name. Pure and without state: no model call is spent on any of it.

use serde::{Deserialize, Serialize};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    /// Make the failing tests pass.
    Fix,
    /// Change the code as the goal says.
    Edit,
    /// Answer a question about the code; nothing is edited.
    Explain,
    /// Run the tests and report.
    Test,
}

/// One task of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    pub title: String,
    #[serde(default)]
    pub rationale: String,
    #[serde(default)]
    pub acceptance: String,
    #[serde(default)]
    pub artifacts: Vec<String>,
}

/// Classifies a goal by its obvious words; `None` when they do not tell, and the intent
/// model decides.
pub fn classify(goal: &str) -> Option<Intent> {
    let g = goal.to_lowercase();
    let has = |w: &str| g.contains(w);
    let word = |w: &str| g.split(|c: char| !c.is_alphanumeric()).any(|x| x == w);
    if has("explain")
        || has("what does")
        || has("why does")
        || has("how does")
        || g.trim_end().ends_with('?')
    {
        Some(Intent::Explain)
    } else if has("run the tests") || has("run tests") || word("rerun") {
        Some(Intent::Test)
    } else if word("fix") || has("failing") || has("make the tests pass") || has("make tests pass")
    {
        Some(Intent::Fix)
    } else if [
        "add",
        "implement",
        "create",
        "write",
        "change",
        "rename",
        "refactor",
        "remove",
        "delete",
        "update",
        "replace",
        "move",
        "extract",
        "convert",
        "make",
        "use",
        "support",
        "handle",
        "document",
    ]
    .iter()
    .any(|w| word(w))
    {
        Some(Intent::Edit)
    } else {
        None
    }
}

/// What a free-form goal asks for: the agent loop, or one of the commands the palette also
/// has, recognised by their obvious words so no model call is spent on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Agent,
    /// "undo", "undo step 3", "revert the last change".
    Undo(Option<u64>),
    Redo,
    Status,
    /// "run `make lint`", "run cargo clippy": a command, run like the tests (allowlist,
    /// timeout, output cap) with its failures published as diagnostics.
    Command(Vec<String>),
}

pub fn route(goal: &str) -> Route {
    let g = goal.trim().trim_end_matches(['.', '!', '?']).trim();
    let lower = g.to_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    let short = words.len() <= 6;
    match words.as_slice() {
        ["undo", rest @ ..] if short => {
            let step = rest
                .windows(2)
                .find(|w| w[0] == "step")
                .and_then(|w| w[1].trim_start_matches('#').parse().ok());
            return Route::Undo(step);
        }
        ["revert", "the", "last", "change" | "step" | "edit"] => return Route::Undo(None),
        ["redo", ..] if words.len() <= 4 => return Route::Redo,
        ["status"] | ["show", "status"] | ["agent", "status"] | ["show", "the", "status"] => {
            return Route::Status;
        }
        ["what", "is", "the", "agent", "doing"] => return Route::Status,
        _ => {}
    }
    // "run `cmd`" always names a command; "run cmd" does unless it is about the tests
    // ("run the tests" is the loop's test intent).
    let rest = g
        .strip_prefix("run ")
        .or_else(|| g.strip_prefix("Run "))
        .or_else(|| g.strip_prefix("execute "))
        .map(str::trim);
    if let Some(rest) = rest {
        let quoted = rest.len() >= 2
            && ((rest.starts_with('`') && rest.ends_with('`'))
                || (rest.starts_with('"') && rest.ends_with('"'))
                || (rest.starts_with('\'') && rest.ends_with('\'')));
        let inner = if quoted {
            rest[1..rest.len() - 1].trim()
        } else {
            rest.strip_prefix(':').unwrap_or(rest).trim()
        };
        // Split as a shell would (`pytest -k 'a b'` is three words, the last `a b`), without
        // running one; unbalanced quotes make it prose for the agent.
        let Ok(argv) = shell_words::split(inner) else {
            return Route::Agent;
        };
        // Unquoted, it must read like a command line, not a sentence ("run the linter").
        let prose = [
            "the", "a", "an", "all", "every", "each", "my", "our", "this", "these",
        ]
        .contains(
            &argv
                .first()
                .map(|w| w.to_lowercase())
                .unwrap_or_default()
                .as_str(),
        );
        let about_tests = inner.to_lowercase().contains("test");
        if !argv.is_empty() && (quoted || (!about_tests && !prose && argv.len() <= 8)) {
            return Route::Command(argv);
        }
    }
    Route::Agent
}

/// A command's words as one line that splits back into the same words (`pytest -k 'a b'`),
/// for showing the command.
pub fn command_line(argv: &[String]) -> String {
    shell_words::join(argv)
}

/// A goal long enough to be several tasks is planned first; a small one is one task.
pub fn needs_plan(goal: &str) -> bool {
    goal.split_whitespace().count() > 30
        || goal.matches(". ").count() >= 2
        || goal.to_lowercase().contains(" then ")
}

/// A goal as a question or a status names it: its first line that has text, cut at about 80
/// characters. A goal can be a whole selection with code fences; a dialog needs one line.
pub fn one_line(goal: &str) -> String {
    const MAX: usize = 80;
    let first = goal
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let more = goal.trim().lines().count() > 1;
    match first.char_indices().nth(MAX - 1) {
        Some((cut, _)) => format!("{}…", first[..cut].trim_end()),
        None if more => format!("{first} …"),
        None => first.to_string(),
    }
}
