//! The response cache's rules, the pure half (docs/cache.md): which calls the cache may answer
//! and how (an exact hit, or a near duplicate for the read-only roles), the material the exact
//! key and the near-duplicate scope are hashed from, and the word overlap of two questions.
//! The runtime hashes the material, keeps the entries in the store and checks for secrets.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::conversation::{Message, Role, Speaker, ToolSpec};

/// Two questions are near duplicates from this word overlap (Jaccard) up.
pub const NEAR_OVERLAP: f64 = 0.7;

/// `cache.enabled`: which calls the cache answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", from = "ModeValue", into = "String")]
pub enum Mode {
    /// No lookups, nothing stored.
    Off,
    /// The read-only calls only (planning, explaining): exact hits and near duplicates.
    #[default]
    ReadOnly,
    /// The read-only calls as above, and every other role's calls on exact hits only.
    All,
}

/// What a configuration file may write for `cache.enabled`: a mode's name, or a boolean
/// (`true` is the default `read_only`, `false` is `off`). An unknown name is refused.
#[derive(Deserialize)]
#[serde(untagged)]
enum ModeValue {
    Flag(bool),
    Name(ModeName),
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ModeName {
    Off,
    ReadOnly,
    All,
}

impl From<ModeValue> for Mode {
    fn from(v: ModeValue) -> Self {
        match v {
            ModeValue::Flag(true) | ModeValue::Name(ModeName::ReadOnly) => Mode::ReadOnly,
            ModeValue::Flag(false) | ModeValue::Name(ModeName::Off) => Mode::Off,
            ModeValue::Name(ModeName::All) => Mode::All,
        }
    }
}

impl From<Mode> for String {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Off => "off",
            Mode::ReadOnly => "read_only",
            Mode::All => "all",
        }
        .into()
    }
}

/// How a call may be answered from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    Never,
    /// Only by an answer to the very same request.
    Exact,
    /// Also by an answer to a request that differs only in its question's wording.
    ExactOrNear,
}

/// What kind of hit answered a call; the journal's `model_call` line says so (`cached`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitKind {
    Exact,
    Near,
}

impl HitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HitKind::Exact => "exact",
            HitKind::Near => "near",
        }
    }
}

/// Whether a call edits nothing by its nature: the planner's, and the coder's in a turn
/// offered only the reading tools (an explanation, the plan or review agent's answer).
pub fn read_only(role: Role, reading_only: bool) -> bool {
    role == Role::Planner || (role == Role::Coder && reading_only)
}

/// The name a call is cached under: its role, or "explain" for the coder's read-only turn, so
/// an explanation never answers an editing call of the same role.
pub fn label(role: Role, reading_only: bool) -> &'static str {
    match role {
        Role::Coder if reading_only => "explain",
        r => r.as_str(),
    }
}

/// How the cache may answer a call of `role` under `mode`. An editing call is never answered
/// by a near duplicate: its answer is an edit of the very prompt it was asked with.
pub fn reuse(mode: Mode, role: Role, reading_only: bool) -> Reuse {
    match (mode, read_only(role, reading_only)) {
        (Mode::Off, _) | (Mode::ReadOnly, false) => Reuse::Never,
        (Mode::ReadOnly | Mode::All, true) => Reuse::ExactOrNear,
        (Mode::All, false) => Reuse::Exact,
    }
}

/// A model call as the cache sees it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    /// `label(role, reading_only)`.
    pub label: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    pub tool_choice: Option<&'a str>,
    pub json_schema: Option<&'a (String, Value)>,
    pub max_tokens: Option<u32>,
    /// The user's words in the messages (the run's goal), which a near duplicate may word
    /// differently.
    pub question: Option<&'a str>,
}

/// Stands for the question in the near-duplicate scope.
const QUESTION: &str = "\u{0}question\u{0}";

impl Call<'_> {
    /// The text the exact key is the hash of: everything the answer depends on, as canonical
    /// JSON. Normalised: tool-call ids (which providers make up anew each time) become their
    /// order in the conversation, and the tools offered are sorted by name.
    pub fn exact_material(&self) -> String {
        self.material(self.messages)
    }

    /// The text the near-duplicate scope is the hash of: the exact material with the question
    /// taken out of each user message (its first occurrence), so two calls share a scope when
    /// they differ in nothing but the question: the same role, model, tools, system prompt,
    /// and the same quoted files byte for byte (the files' versions). `None` when the call
    /// has no question, or no user message quotes it.
    pub fn near_material(&self) -> Option<String> {
        let question = self.question.filter(|q| !q.trim().is_empty())?;
        let mut found = false;
        let messages: Vec<Message> = self
            .messages
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if m.speaker == Speaker::User && m.content.contains(question) {
                    m.content = m.content.replacen(question, QUESTION, 1);
                    found = true;
                }
                m
            })
            .collect();
        found.then(|| self.material(&messages))
    }

    /// The question's words, for the overlap with another's.
    pub fn question_words(&self) -> BTreeSet<String> {
        words(self.question.unwrap_or(""))
    }

    fn material(&self, messages: &[Message]) -> String {
        let mut ids: Vec<String> = Vec::new();
        let mut ordinal = |id: &str| -> usize {
            match ids.iter().position(|x| x == id) {
                Some(i) => i,
                None => {
                    ids.push(id.to_string());
                    ids.len() - 1
                }
            }
        };
        let mut shown = Vec::with_capacity(messages.len());
        for m in messages {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| json!([ordinal(&c.id), c.name, c.arguments]))
                .collect();
            let answers = m
                .answers
                .as_ref()
                .map(|(id, name)| json!([ordinal(id), name]));
            shown.push(json!([m.speaker, m.content, calls, answers]));
        }
        let mut tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| json!([t.name, t.description, t.parameters]))
            .collect();
        tools.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
        json!({
            "provider": self.provider,
            "model": self.model,
            "role": self.label,
            "tools": tools,
            "tool_choice": self.tool_choice,
            "json_schema": self.json_schema,
            "max_tokens": self.max_tokens,
            "messages": shown,
        })
        .to_string()
    }
}

/// The normalised words of `text`: lower-cased runs of letters and digits (`_` included), so
/// case, punctuation and spacing make no difference ("calc.py" is "calc" and "py").
pub fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The word overlap of two questions: the Jaccard index of their word sets, the words both
/// have over the words either has (0 when neither has any).
pub fn overlap(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

/// Whether two questions are near duplicates (`NEAR_OVERLAP` or more).
pub fn near(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    overlap(a, b) >= NEAR_OVERLAP
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ToolCall;

    fn call<'a>(messages: &'a [Message], question: Option<&'a str>) -> Call<'a> {
        Call {
            provider: "openai",
            model: "m",
            label: "explain",
            messages,
            tools: &[],
            tool_choice: None,
            json_schema: None,
            max_tokens: None,
            question,
        }
    }

    fn explain(goal: &str, code: &str) -> Vec<Message> {
        vec![
            Message::system("Explain the code.".to_string()),
            Message::user(format!("{goal}\n\nCode:\ncalc.py\n```\n{code}```\n")),
        ]
    }

    #[test]
    fn overlap_is_the_jaccard_index_of_the_word_sets() {
        let a = words("Explain what the add function in calc.py does");
        let b = words("explain, what the ADD function in calc.py does!");
        assert_eq!(overlap(&a, &b), 1.0, "case and punctuation do not count");
        // 9 words each, 8 shared: 8 / 10.
        let c = words("explain what the add function in calc.py returns");
        assert!((overlap(&a, &c) - 0.8).abs() < 1e-9);
        assert!(near(&a, &c));
        // Half the words shared: 3 of 6.
        let d = words("explain add calc");
        let e = words("explain sub calc py");
        assert!((overlap(&d, &e) - 0.4).abs() < 1e-9);
        assert!(!near(&d, &e));
        assert_eq!(overlap(&words(""), &words("")), 0.0);
        assert!(near(&words("a b c d e f g"), &words("a b c d e f g h i j")));
        assert!(!near(&words("a b c d e f"), &words("a b c d e f g h i j")));
    }

    #[test]
    fn the_exact_key_changes_with_the_files_and_not_with_tool_call_ids() {
        let one = explain("explain add", "def add(a, b):\n    return a + b\n");
        let two = explain("explain add", "def add(a, b):\n    return a - b\n");
        assert_ne!(
            call(&one, None).exact_material(),
            call(&two, None).exact_material()
        );
        let turn = |id: &str| {
            let mut m = one.clone();
            let mut asked = Message::assistant(String::new());
            asked.tool_calls = vec![ToolCall {
                id: id.into(),
                name: "read_file".into(),
                arguments: json!({"path": "calc.py"}),
            }];
            m.push(asked);
            let mut result = Message::user("1 def add".to_string());
            result.speaker = Speaker::Tool;
            result.answers = Some((id.into(), "read_file".into()));
            m.push(result);
            m
        };
        assert_eq!(
            call(&turn("call_a"), None).exact_material(),
            call(&turn("call_b"), None).exact_material()
        );
        let mut other = call(&one, None);
        other.label = "coder";
        assert_ne!(other.exact_material(), call(&one, None).exact_material());
    }

    #[test]
    fn the_near_scope_is_the_request_without_its_question() {
        let code = "def add(a, b):\n    return a + b\n";
        let a = explain("explain what add does", code);
        let b = explain("explain what add returns", code);
        let near_a = call(&a, Some("explain what add does")).near_material();
        let near_b = call(&b, Some("explain what add returns")).near_material();
        assert!(near_a.is_some());
        assert_eq!(near_a, near_b);
        // Another version of the file: another scope.
        let c = explain(
            "explain what add does",
            "def add(a, b):\n    return b + a\n",
        );
        assert_ne!(
            near_a,
            call(&c, Some("explain what add does")).near_material()
        );
        // No question, or one the messages do not quote: no near duplicates.
        assert_eq!(call(&a, None).near_material(), None);
        assert_eq!(call(&a, Some("something else")).near_material(), None);
    }

    #[test]
    fn only_read_only_calls_take_near_duplicates_and_the_modes_read_from_config() {
        assert_eq!(
            reuse(Mode::ReadOnly, Role::Planner, false),
            Reuse::ExactOrNear
        );
        assert_eq!(reuse(Mode::ReadOnly, Role::Coder, true), Reuse::ExactOrNear);
        assert_eq!(reuse(Mode::ReadOnly, Role::Coder, false), Reuse::Never);
        assert_eq!(reuse(Mode::ReadOnly, Role::Reflector, false), Reuse::Never);
        assert_eq!(reuse(Mode::All, Role::Coder, false), Reuse::Exact);
        assert_eq!(reuse(Mode::All, Role::Reviewer, true), Reuse::Exact);
        assert_eq!(reuse(Mode::Off, Role::Planner, true), Reuse::Never);
        assert_eq!(label(Role::Coder, true), "explain");
        assert_eq!(label(Role::Coder, false), "coder");
        let read = |s: &str| serde_json::from_str::<Mode>(s).ok();
        assert_eq!(read("\"all\""), Some(Mode::All));
        assert_eq!(read("\"read_only\""), Some(Mode::ReadOnly));
        assert_eq!(read("true"), Some(Mode::ReadOnly));
        assert_eq!(read("false"), Some(Mode::Off));
        assert_eq!(read("\"sometimes\""), None);
        assert_eq!(
            serde_json::to_string(&Mode::ReadOnly).ok().as_deref(),
            Some("\"read_only\"")
        );
    }
}
