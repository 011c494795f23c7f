//! The reviewer's findings as data: the JSON schema it answers with, a tolerant parser with
//! typed errors, the check of its line numbers against the change (a unified diff and the new
//! texts' line counts), and the gate's decision. Pure: the diff and the texts are handed in.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conversation::Message;

/// What the review phase does: nothing, report its findings, or send a rejected change back
/// to the coder (`agent.review`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ReviewMode {
    Off,
    /// The reviewer reads the change and its findings are reported; they never block.
    #[default]
    Advise,
    /// A verdict `incorrect` with a P0/P1 finding at or above the minimum confidence goes
    /// back to the coder, within the run's retry budget.
    Gate,
}

/// `agent.review_min_confidence` unless configured (and for a checkpoint saved without it).
pub fn default_min_confidence() -> f64 {
    0.8
}

/// Why the run's diff against its checkpoint could not be made (`Event::RunDiff`): the review
/// is then unavailable. The runtime's causes are kept as their messages, so the event stays a
/// plain value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiffError {
    /// git could not make it.
    #[error("{0}")]
    Git(String),
    /// The thread that asked git failed.
    #[error("the diff's thread failed: {0}")]
    Thread(String),
}

/// The reviewer's overall verdict on the patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Correct,
    Incorrect,
}

/// One problem the patch introduces, on a short line range of the new text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub title: String,
    pub body: String,
    /// 0 (drop everything) to 3 (nit).
    pub priority: u8,
    /// 0 to 1.
    pub confidence: f64,
    pub path: String,
    /// 1-based lines of the new text, `start_line <= end_line`.
    pub start_line: u32,
    pub end_line: u32,
    /// The lines are not among those the change touched (or the path is not in the change).
    #[serde(default)]
    pub outside_change: bool,
}

/// A review as the reviewer gave it, checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    pub findings: Vec<Finding>,
    pub verdict: Verdict,
    pub explanation: String,
    pub confidence: f64,
}

/// What became of a review: read and checked (and whether it sent the change back), or
/// unavailable (never an approval).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ReviewResult {
    Reviewed {
        #[serde(flatten)]
        review: Review,
        /// In gate mode: the change went back to the coder. In advise mode: it would have.
        blocking: bool,
    },
    Unavailable {
        reason: String,
    },
}

impl ReviewResult {
    /// One line for a person.
    pub fn summary(&self) -> String {
        match self {
            ReviewResult::Unavailable { reason } => format!("review unavailable: {reason}"),
            ReviewResult::Reviewed { review, .. } => {
                let verdict = match review.verdict {
                    Verdict::Correct => "correct",
                    Verdict::Incorrect => "incorrect",
                };
                let mut by = [0usize; 4];
                for f in &review.findings {
                    by[usize::from(f.priority.min(3))] += 1;
                }
                let counts: Vec<String> = by
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(p, n)| format!("{n} P{p}"))
                    .collect();
                let findings = if counts.is_empty() {
                    "no findings".to_string()
                } else {
                    format!("findings: {}", counts.join(", "))
                };
                format!(
                    "review: the patch is {verdict} ({findings}; confidence {:.2})",
                    review.confidence
                )
            }
        }
    }
}

impl ReviewResult {
    /// The summary, then one line per finding: where it is and what.
    pub fn report(&self) -> String {
        let mut out = self.summary();
        if let ReviewResult::Reviewed { review, .. } = self {
            for f in &review.findings {
                let title = f.title.trim();
                let tag = format!("[P{}]", f.priority);
                let title = title.strip_prefix(&tag).unwrap_or(title).trim();
                out.push_str(&format!(
                    "\n  {tag} {}:{}-{}: {title}{}",
                    f.path,
                    f.start_line,
                    f.end_line,
                    if f.outside_change {
                        " (outside the change)"
                    } else {
                        ""
                    }
                ));
            }
        }
        out
    }
}

/// What the user decided about a reviewed run's change when the review had something to say
/// (docs/review.md): kept as it is, or rolled back to before the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Kept,
    RolledBack,
}

impl Finding {
    /// The finding in one line for a question or a preview:
    /// `[P1] add subtracts — calc.py:5 (0.90)`; a long title is cut at about 80 characters.
    pub fn one_line(&self) -> String {
        let tag = format!("[P{}]", self.priority);
        let title = self.title.trim();
        let title = title.strip_prefix(&tag).unwrap_or(title).trim();
        let title = crate::agent::one_line(title);
        let lines = if self.end_line > self.start_line {
            format!("{}-{}", self.start_line, self.end_line)
        } else {
            self.start_line.to_string()
        };
        format!(
            "{tag} {title} — {}:{lines} ({:.2})",
            self.path, self.confidence
        )
    }
}

impl ReviewResult {
    /// Whether the user should look at this review before keeping the change: it found
    /// something, it calls the patch incorrect, or it could not be had.
    pub fn needs_a_look(&self) -> bool {
        match self {
            ReviewResult::Unavailable { .. } => true,
            ReviewResult::Reviewed { review, .. } => {
                !review.findings.is_empty() || review.verdict == Verdict::Incorrect
            }
        }
    }
}

/// The review whose findings the next change is meant to fix: in gate mode, the last review
/// when it sent the change back to the coder.
pub fn sent_back(mode: ReviewMode, last: Option<&ReviewResult>) -> Option<&Review> {
    match (mode, last) {
        (
            ReviewMode::Gate,
            Some(ReviewResult::Reviewed {
                review,
                blocking: true,
            }),
        ) => Some(review),
        _ => None,
    }
}

/// Why a reviewer's answer could not be read; the reviewer hears it in its repair request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReviewError {
    #[error("no JSON object in the answer")]
    NoJson,
    #[error("the JSON does not parse: {0}")]
    Json(String),
    #[error("`{0}` is missing or has the wrong type")]
    Missing(String),
    #[error("`verdict` must be \"correct\" or \"incorrect\", not {0:?}")]
    BadVerdict(String),
    #[error("finding {index}: `priority` must be 0, 1, 2 or 3, not {value}")]
    BadPriority { index: usize, value: String },
    #[error("{what}: `confidence` must be a number from 0 to 1, not {value}")]
    BadConfidence { what: String, value: String },
    #[error("finding {index}: lines {start}-{end} are not a range of 1-based lines")]
    BadRange { index: usize, start: u64, end: u64 },
    #[error("finding {index}: line {line} is past the end of {path} ({lines} lines)")]
    PastEnd {
        index: usize,
        path: String,
        line: u32,
        lines: u32,
    },
}

/// A file of the change under review: its lines in the new text (`None` when the change
/// deletes it) and the line ranges of the new text the change touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedFile {
    pub path: String,
    pub lines: Option<u32>,
    pub changed: Vec<(u32, u32)>,
}

/// Reads the reviewer's answer: a JSON object in a ```json fence, or bare, or the outermost
/// braces of prose around it. `priority` may also be "P1" or a title tag "[P1]"; a
/// confidence above 1 and at most 100 is read as a percentage; `end_line` defaults to
/// `start_line`.
pub fn parse_review(text: &str) -> Result<Review, ReviewError> {
    let v = super::json_answer::object(text).map_err(|e| match e {
        super::json_answer::JsonAnswerError::NoJson => ReviewError::NoJson,
        super::json_answer::JsonAnswerError::Json(e) => ReviewError::Json(e),
    })?;
    let verdict = match v.get("verdict").and_then(Value::as_str) {
        None => return Err(ReviewError::Missing("verdict".into())),
        Some(s) => match s.trim().to_lowercase().as_str() {
            "correct" | "patch is correct" => Verdict::Correct,
            "incorrect" | "patch is incorrect" => Verdict::Incorrect,
            _ => return Err(ReviewError::BadVerdict(s.to_string())),
        },
    };
    let explanation = v
        .get("explanation")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_string();
    let confidence = confidence_of(v.get("confidence"), "the review")?;
    let findings = match v.get("findings") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, f)| finding_of(i + 1, f))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ReviewError::Missing("findings".into())),
    };
    Ok(Review {
        findings,
        verdict,
        explanation,
        confidence,
    })
}

fn confidence_of(v: Option<&Value>, what: &str) -> Result<f64, ReviewError> {
    let bad = |value: String| ReviewError::BadConfidence {
        what: what.to_string(),
        value,
    };
    let Some(v) = v else {
        return Err(ReviewError::Missing(format!("{what}: confidence")));
    };
    let n = match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| bad(v.to_string()))?,
        Value::String(s) => s.trim().parse::<f64>().map_err(|_| bad(v.to_string()))?,
        _ => return Err(bad(v.to_string())),
    };
    match n {
        n if (0.0..=1.0).contains(&n) => Ok(n),
        // "80" on a 0-100 scale, as some models answer.
        n if n > 1.0 && n <= 100.0 => Ok(n / 100.0),
        _ => Err(bad(v.to_string())),
    }
}

fn finding_of(index: usize, f: &Value) -> Result<Finding, ReviewError> {
    let text = |key: &str| f.get(key).and_then(Value::as_str).map(str::trim);
    let missing = |key: &str| ReviewError::Missing(format!("findings[{}].{key}", index - 1));
    let title = text("title").ok_or_else(|| missing("title"))?.to_string();
    let priority = priority_of(index, f.get("priority"), &title)?;
    let confidence = confidence_of(f.get("confidence"), &format!("finding {index}"))?;
    let path = text("path")
        .ok_or_else(|| missing("path"))?
        .trim_start_matches("./")
        .trim_start_matches("b/")
        .to_string();
    let line = |key: &str| f.get(key).and_then(Value::as_u64);
    let start = line("start_line").ok_or_else(|| missing("start_line"))?;
    let end = line("end_line").unwrap_or(start);
    if start == 0 || end < start || end > u64::from(u32::MAX) {
        return Err(ReviewError::BadRange { index, start, end });
    }
    Ok(Finding {
        title,
        body: text("body").unwrap_or("").to_string(),
        priority,
        confidence,
        path,
        start_line: start as u32,
        end_line: end as u32,
        outside_change: false,
    })
}

fn priority_of(index: usize, v: Option<&Value>, title: &str) -> Result<u8, ReviewError> {
    let bad = |value: String| ReviewError::BadPriority { index, value };
    let tagged = || {
        let t = title.trim_start().strip_prefix('[')?;
        let p = t.strip_prefix('P').or_else(|| t.strip_prefix('p'))?;
        p.chars().next()?.to_digit(10)
    };
    let n = match v {
        Some(Value::Number(n)) => n.as_u64().ok_or_else(|| bad(n.to_string()))?,
        Some(Value::String(s)) => s
            .trim()
            .trim_start_matches(['P', 'p'])
            .parse::<u64>()
            .map_err(|_| bad(format!("{s:?}")))?,
        None | Some(Value::Null) => u64::from(tagged().ok_or_else(|| bad("nothing".into()))?),
        Some(other) => return Err(bad(other.to_string())),
    };
    if n > 3 {
        return Err(bad(n.to_string()));
    }
    Ok(n as u8)
}

/// Checks the findings' lines against the change: a line past the end of a file of the
/// change is an error (the reviewer is asked again); a finding whose lines the change did not
/// touch, or on a path the change does not have, is kept and marked `outside_change`.
pub fn check(mut review: Review, files: &[ChangedFile]) -> Result<Review, ReviewError> {
    for (i, f) in review.findings.iter_mut().enumerate() {
        let Some(file) = files.iter().find(|c| c.path == f.path) else {
            f.outside_change = true;
            continue;
        };
        if let Some(lines) = file.lines
            && f.end_line > lines.max(1)
        {
            return Err(ReviewError::PastEnd {
                index: i + 1,
                path: f.path.clone(),
                line: f.end_line,
                lines,
            });
        }
        f.outside_change = !file
            .changed
            .iter()
            .any(|(a, b)| f.start_line <= *b && *a <= f.end_line);
    }
    Ok(review)
}

/// Whether a review rejects the change: verdict `incorrect` with a P0 or P1 finding at
/// `min_confidence` or more.
pub fn blocks(review: &Review, min_confidence: f64) -> bool {
    review.verdict == Verdict::Incorrect
        && review
            .findings
            .iter()
            .any(|f| f.priority <= 1 && f.confidence >= min_confidence)
}

/// The files of a unified diff (git's or the steps'), with the new text's line ranges each
/// hunk touched: its added lines, or for a hunk that only deletes, the lines either side of
/// where the deleted ones were. Line counts are left for the caller (`lines: None`).
pub fn changed_files(diff: &str) -> Vec<ChangedFile> {
    let mut files: Vec<ChangedFile> = Vec::new();
    // Where the hunk is in the new text, and how many old and new lines it has left: a line
    // outside a hunk is a header (`+++ b/x` is not an added line).
    let (mut new_line, mut old_left, mut new_left) = (0u32, 0u32, 0u32);
    let mut run: Option<(u32, u32)> = None;
    let mut added = false;
    let close = |files: &mut Vec<ChangedFile>, run: &mut Option<(u32, u32)>| {
        if let (Some(r), Some(f)) = (run.take(), files.last_mut()) {
            f.changed.push(r);
        }
    };
    for line in diff.lines() {
        if old_left == 0 && new_left == 0 {
            close(&mut files, &mut run);
            if let Some(path) = line.strip_prefix("+++ ") {
                let path = path.trim_end();
                let path = path.strip_prefix("b/").unwrap_or(path);
                // A deleted file (`+++ /dev/null`) has nothing a finding could point at.
                files.push(ChangedFile {
                    path: if path == "/dev/null" {
                        String::new()
                    } else {
                        path.to_string()
                    },
                    lines: None,
                    changed: Vec::new(),
                });
            } else if let Some(header) = line.strip_prefix("@@ ") {
                let range = |sign: char| -> (u32, u32) {
                    let w = header.split_whitespace().find_map(|w| w.strip_prefix(sign));
                    let mut parts = w.unwrap_or("1").split(',');
                    let start = parts.next().and_then(|n| n.parse().ok()).unwrap_or(1);
                    let count = parts.next().and_then(|n| n.parse().ok()).unwrap_or(1);
                    (start, count)
                };
                let (old, new) = (range('-'), range('+'));
                // An empty side's start is the line before the hunk.
                new_line = if new.1 == 0 { new.0 + 1 } else { new.0 };
                (old_left, new_left) = (old.1, new.1);
            }
            continue;
        }
        match line.as_bytes().first() {
            Some(b'+') => {
                // A replacement touches its added lines; only a pure deletion keeps the
                // lines either side.
                run = Some(match (run, added) {
                    (Some((a, _)), true) => (a, new_line),
                    _ => (new_line, new_line),
                });
                added = true;
                new_line += 1;
                new_left = new_left.saturating_sub(1);
            }
            Some(b'-') => {
                // Deleted lines touch the new text where they were: the lines either side.
                let here = (new_line.saturating_sub(1).max(1), new_line.max(1));
                if run.is_none() {
                    run = Some(here);
                    added = false;
                }
                old_left = old_left.saturating_sub(1);
            }
            Some(b'\\') => {}
            _ => {
                close(&mut files, &mut run);
                new_line += 1;
                old_left = old_left.saturating_sub(1);
                new_left = new_left.saturating_sub(1);
            }
        }
    }
    close(&mut files, &mut run);
    files.retain(|f| !f.path.is_empty());
    files
}

/// Context lines around each hunk of a diff a reviewer reads.
pub const CONTEXT_LINES: usize = 10;

/// The steps' diff, where there is no git checkpoint: each file from its text before the run
/// to its text after the run's latest step.
pub fn steps_diff(files: &[(String, Option<String>, String)]) -> String {
    files
        .iter()
        .map(|(path, before, after)| {
            let from = match before {
                Some(_) => format!("a/{path}"),
                None => "/dev/null".to_string(),
            };
            similar::TextDiff::from_lines(before.as_deref().unwrap_or(""), after)
                .unified_diff()
                .context_radius(CONTEXT_LINES)
                .header(&from, &format!("b/{path}"))
                .to_string()
        })
        .collect()
}

/// The lines of a text as an editor numbers them (a last line without its newline counts).
pub fn line_count(text: &str) -> u32 {
    let n = text.lines().count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The reviewer's prompt: its system prompt, then the goal, the test result and the diff.
pub fn prompt(system: &str, goal: &str, tests: &str, diff: &str) -> Vec<Message> {
    vec![
        Message::system(system.to_string()),
        Message::user(format!(
            "Goal of the change: {goal}\nTests: {tests}\n\nThe change (a unified diff; the \
             `+` side's line numbers are the new text's, which your findings must use):\n\
             ```diff\n{}\n```",
            diff.trim_end()
        )),
    ]
}

/// The repair request after an answer that could not be read.
pub fn repair(error: &ReviewError) -> Message {
    Message::user(format!(
        "Your review could not be read ({error}). Answer again with the JSON object only, as \
         the schema says: {{\"findings\": [{{\"title\", \"body\", \"priority\", \
         \"confidence\", \"path\", \"start_line\", \"end_line\"}}], \"verdict\": \"correct\" | \
         \"incorrect\", \"explanation\", \"confidence\"}}."
    ))
}

/// What the coder hears when the reviewer rejects its change.
pub fn feedback(review: &Review) -> String {
    let mut out = String::from(
        "The tests pass, but a reviewer found problems with the change. Fix them and keep the \
         tests passing:\n",
    );
    for f in &review.findings {
        out.push_str(&format!(
            "- [P{}] {} ({}:{}-{}): {}\n",
            f.priority, f.title, f.path, f.start_line, f.end_line, f.body
        ));
    }
    if !review.explanation.is_empty() {
        out.push_str(&format!("Reviewer's explanation: {}\n", review.explanation));
    }
    out
}

#[cfg(test)]
mod tests;
