//! Memory across runs, the pure half: a failure's signature normalised so that line numbers and
//! temporary paths do not matter, the episode record a run leaves for each failure it met, the
//! full-text query for the current failures, key-shaped secrets redacted, the fusion of a
//! full-text and a vector ranking (shared by every store), and the prompt section made of the
//! records the runtime fetched, within a byte budget. No IO: the runtime
//! stores, searches and deletes (`agent_ls_runtime::memory`).

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::test_output::parse::{Failure, Location};

/// A failure as memory knows it: which test, what kind of error, its message and its top
/// frames, with line numbers and temporary paths taken out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    pub test_id: String,
    pub error_kind: String,
    pub message: String,
    /// The top frames (failure location first), as normalised file names without lines.
    pub frames: Vec<String>,
}

/// How many frames a signature keeps: the top ones say where; the rest are noise.
const TOP_FRAMES: usize = 3;
/// The longest message a signature keeps.
const MAX_MESSAGE: usize = 400;

impl Signature {
    /// The kind of failure, for patterns: the error kind and where it surfaced (the top frame's
    /// file), so that two fixes of "AssertionError in test_calc.py" are the same kind.
    pub fn kind(&self) -> String {
        match self.frames.first() {
            Some(f) => format!("{} in {f}", self.error_kind),
            None => self.error_kind.clone(),
        }
    }
}

static TEMP_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        (?:/private)?/var/folders/[^\s/]+/[^\s/]+/T/[^\s/:]+   # macOS temp dirs
        | /tmp/[^\s/:'\x22]+                                    # /tmp/<random>
        | [A-Za-z]:\\Users\\[^\\\s]+\\AppData\\Local\\Temp\\[^\\\s:]+  # Windows
        ",
    )
    .expect("a valid regex")
});
static LINE_NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:(\.[A-Za-z0-9]{1,5}):\d+(?::\d+)?)|(?:\bline \d+)").expect("a valid regex")
});
static ADDRESS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b0x[0-9a-fA-F]{4,}\b").expect("a valid regex"));
static ERROR_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Failure|Panic|Interrupt|Exit))\b")
        .expect("a valid regex")
});

/// Text with temporary paths, line numbers and addresses replaced by placeholders, so two
/// runs of the same failure in different checkouts read the same.
pub fn normalise(text: &str) -> String {
    let t = TEMP_PATH.replace_all(text, "<tmp>");
    let t = LINE_NUMBER.replace_all(&t, |c: &regex::Captures| match c.get(1) {
        Some(ext) => format!("{}:N", ext.as_str()),
        None => "line N".to_string(),
    });
    ADDRESS.replace_all(&t, "0x?").into_owned()
}

/// A frame as a signature keeps it: its file, normalised, without the line.
fn frame(l: &Location) -> String {
    normalise(&l.file)
}

/// The error's kind, from its message: the first name that reads like an error type
/// (`AssertionError`, `ImportError`, `NullPointerException`), else "panic" for a Rust panic,
/// else "failure".
pub fn error_kind(message: &str) -> String {
    if let Some(c) = ERROR_NAME.captures(message) {
        return c[1].to_string();
    }
    if message.contains("panicked at") {
        return "panic".into();
    }
    "failure".into()
}

/// A failure's signature.
pub fn signature(f: &Failure) -> Signature {
    let frames = f
        .location
        .iter()
        .chain(f.frames.iter())
        .map(frame)
        .fold(Vec::new(), |mut acc, x| {
            if !acc.contains(&x) {
                acc.push(x);
            }
            acc
        })
        .into_iter()
        .take(TOP_FRAMES)
        .collect();
    Signature {
        test_id: normalise(&f.test_id),
        error_kind: error_kind(&f.message),
        message: cut(&normalise(f.message.trim()), MAX_MESSAGE),
        frames,
    }
}

/// One change the coder tried, and what the reflector made of its failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub diff: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection: Option<String>,
}

/// One failure a run met, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Episode {
    pub signature: Signature,
    pub files: Vec<String>,
    /// Changes that were tried and left the tests failing, with the reflections.
    pub tried: Vec<Attempt>,
    /// The change that made the tests pass, trimmed.
    pub fix: Option<String>,
    /// The run's status ("done", "failed", ...).
    pub outcome: String,
}

/// A kind of fix that worked more than once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pattern {
    /// `Signature::kind` of the failures it fixed.
    pub kind: String,
    /// How many runs it fixed.
    pub count: u32,
    /// The latest fix of this kind.
    pub fix: String,
    pub runs: Vec<String>,
}

/// What a record holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Memory {
    Episode(Episode),
    Pattern(Pattern),
}

/// A stored record: its id, the run that left it, the scope it belongs to and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub run_id: String,
    pub scope: String,
    pub memory: Memory,
}

/// A record a search found, with the score it is ranked by (higher is better): its BM25
/// score from a full-text search, its cosine similarity from a vector search, or, once
/// `fuse` merged the two, the fused score. `text` and `vector` keep the scores it came with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    pub record: Record,
    pub score: f64,
    /// Its BM25 score, when the full-text search found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<f64>,
    /// Its embedding's cosine similarity to the query's, when the vector search found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<f64>,
}

impl Hit {
    /// A full-text hit: ranked by its BM25 score.
    pub fn text(record: Record, bm25: f64) -> Hit {
        Hit {
            record,
            score: bm25,
            text: Some(bm25),
            vector: None,
        }
    }

    /// A vector hit: ranked by its cosine similarity.
    pub fn vector(record: Record, similarity: f64) -> Hit {
        Hit {
            record,
            score: similarity,
            text: None,
            vector: Some(similarity),
        }
    }
}

/// The constant of reciprocal rank fusion: a record's fused score is the sum over the two
/// rankings of `1 / (RRF_K + rank)`. 60 is the value of the method's paper (Cormack et al.,
/// 2009); it keeps one list's first place from outweighing a record both lists rank well.
pub const RRF_K: f64 = 60.0;

/// Merges a full-text ranking and a vector ranking (each best first) into one, by reciprocal
/// rank fusion: ranks, not scores, are added, because BM25 and cosine similarity are on
/// scales that cannot be compared. Each hit keeps both of its scores (`text`, `vector`) and
/// gets the fused one as `score`. With no vector hits (no embedding model, its server down,
/// no record with a vector yet) the text hits come back as they are, ranked by BM25. Used by
/// every store (SQLite here, PostgreSQL for a team), so they rank alike.
pub fn fuse(text: Vec<Hit>, vector: Vec<Hit>, limit: usize) -> Vec<Hit> {
    if vector.is_empty() {
        let mut t = text;
        t.truncate(limit);
        return t;
    }
    let mut out: Vec<Hit> = Vec::new();
    for (list, is_text) in [(text, true), (vector, false)] {
        for (rank, h) in list.into_iter().enumerate() {
            let add = 1.0 / (RRF_K + rank as f64 + 1.0);
            let at = match out.iter().position(|o| o.record.id == h.record.id) {
                Some(i) => i,
                None => {
                    out.push(Hit {
                        score: 0.0,
                        text: None,
                        vector: None,
                        ..h.clone()
                    });
                    out.len() - 1
                }
            };
            let o = &mut out[at];
            // A list may hold one record twice (two stores): the better rank counts once.
            let seen = if is_text {
                o.text.is_some()
            } else {
                o.vector.is_some()
            };
            if seen {
                continue;
            }
            o.score += add;
            if is_text {
                o.text = h.text.or(Some(h.score));
            } else {
                o.vector = h.vector.or(Some(h.score));
            }
        }
    }
    // Ties (one list's first against the other's first) go to the one both found, then to
    // the closer embedding, then to the id, so the order never depends on the input's.
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(
                b.vector
                    .unwrap_or(-1.0)
                    .total_cmp(&a.vector.unwrap_or(-1.0)),
            )
            .then(a.record.id.cmp(&b.record.id))
    });
    out.truncate(limit);
    out
}

/// Cosine similarity of two vectors (0 when either is all zeros or their lengths differ):
/// what a store that keeps vectors as plain arrays ranks by in the client.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    dot / (na.sqrt() * nb.sqrt())
}

/// The most bytes of a diff a record keeps.
pub const MAX_DIFF: usize = 2000;
/// The most bytes of a reflection a record keeps.
const MAX_REFLECTION: usize = 600;

/// The records a run leaves: one episode per failure its first failing test run showed, each
/// with the attempts that failed and the change that worked (when the run ended `done`).
pub fn episodes(
    failures: &[Failure],
    files: &[String],
    attempts: &[Attempt],
    fix: Option<&str>,
    outcome: &str,
) -> Vec<Episode> {
    let tried: Vec<Attempt> = attempts
        .iter()
        .map(|a| Attempt {
            diff: cut(&a.diff, MAX_DIFF),
            reflection: a.reflection.as_ref().map(|r| cut(r, MAX_REFLECTION)),
        })
        .collect();
    let mut seen = Vec::new();
    failures
        .iter()
        .map(signature)
        .filter(|s| {
            let new = !seen.contains(s);
            seen.push(s.clone());
            new
        })
        .map(|signature| Episode {
            signature,
            files: files.to_vec(),
            tried: tried.clone(),
            fix: fix.map(|d| cut(d, MAX_DIFF)),
            outcome: outcome.to_string(),
        })
        .collect()
}

/// The text a record is found by: its signature, files, reflections and diffs.
pub fn search_text(m: &Memory) -> String {
    match m {
        Memory::Episode(e) => {
            let mut t = format!(
                "{} {} {} {} {}",
                e.signature.test_id,
                e.signature.error_kind,
                e.signature.message,
                e.signature.frames.join(" "),
                e.files.join(" ")
            );
            for a in &e.tried {
                t.push(' ');
                t.push_str(a.reflection.as_deref().unwrap_or(""));
            }
            if let Some(f) = &e.fix {
                t.push(' ');
                t.push_str(f);
            }
            t
        }
        Memory::Pattern(p) => format!("{} {}", p.kind, p.fix),
    }
}

/// The words the current failures are searched by: their signatures' words as the index
/// splits them (letters and digits; `test_add` is "test" and "add"), lower case, without
/// words of one or two characters and placeholders, each once, at most 40.
pub fn query_words(signatures: &[Signature]) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for s in signatures {
        let text = format!(
            "{} {} {} {}",
            s.test_id,
            s.error_kind,
            s.message,
            s.frames.join(" ")
        );
        for w in words_of(&text) {
            if w != "tmp" && !words.contains(&w) {
                words.push(w);
            }
        }
    }
    words.truncate(40);
    words
}

/// A text's words as the full-text index splits them, lower case, longer than two characters.
pub fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 2)
        .map(str::to_lowercase)
        .collect()
}

/// An FTS5 expression matching any of `words`, each quoted so no word is read as syntax; BM25
/// then ranks the records sharing most (and rarest) of them first.
pub fn fts_query(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("\"{}\"", w.replace('"', "")))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The text the current failures' embedding is computed from (when an embedding model is
/// configured): each signature on a line, as a record's `search_text` begins.
pub fn query_text(signatures: &[Signature]) -> String {
    signatures
        .iter()
        .map(|s| {
            format!(
                "{} {} {} {}",
                s.test_id,
                s.error_kind,
                s.message,
                s.frames.join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The FTS5 query for the current failures.
pub fn query(signatures: &[Signature]) -> String {
    fts_query(&query_words(signatures))
}

/// A record that entered a prompt: for the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Used {
    pub id: String,
    pub run_id: String,
    /// The score it was ranked by: BM25 alone, or the fused score when vectors took part.
    pub score: f64,
    /// Its BM25 score, when the full-text search found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<f64>,
    /// Its cosine similarity to the query, when the vector search found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<f64>,
    pub bytes: usize,
}

const SECTION_HEAD: &str = "Remembered from earlier runs (the most relevant first):\n";

/// The prompt section made of the hits, best first, within `max_bytes`: each record whole, or
/// without its diffs when only that fits, or not at all. Empty when nothing fits. With the
/// records it shows.
pub fn section(hits: &[Hit], max_bytes: usize) -> (String, Vec<Used>) {
    let mut out = String::new();
    let mut used = Vec::new();
    for h in hits {
        let room = max_bytes.saturating_sub(out.len().max(SECTION_HEAD.len()) + 1);
        let full = entry(&h.record, true);
        let text = if full.len() <= room {
            full
        } else {
            let short = entry(&h.record, false);
            if short.len() > room {
                continue;
            }
            short
        };
        if out.is_empty() {
            out.push_str(SECTION_HEAD);
        }
        used.push(Used {
            id: h.record.id.clone(),
            run_id: h.record.run_id.clone(),
            score: h.score,
            text: h.text,
            vector: h.vector,
            bytes: text.len(),
        });
        out.push_str(&text);
    }
    if !out.is_empty() {
        out.push('\n');
    }
    (out, used)
}

/// One record as the prompt shows it.
fn entry(r: &Record, diffs: bool) -> String {
    match &r.memory {
        Memory::Episode(e) => {
            let s = &e.signature;
            let mut t = format!(
                "- [{}] run {}: {} in {} ({}): {}\n",
                r.id,
                r.run_id,
                s.error_kind,
                s.test_id,
                e.outcome,
                one_line(&s.message)
            );
            for a in &e.tried {
                if let Some(why) = &a.reflection {
                    t.push_str(&format!(
                        "  tried a change that failed: {}\n",
                        one_line(why)
                    ));
                }
                if diffs {
                    t.push_str(&format!("  ```diff\n{}  ```\n", with_newline(&a.diff)));
                }
            }
            if let Some(fix) = &e.fix {
                if diffs {
                    t.push_str(&format!(
                        "  what worked:\n  ```diff\n{}  ```\n",
                        with_newline(fix)
                    ));
                } else {
                    t.push_str(&format!("  fixed in {}\n", e.files.join(", ")));
                }
            }
            t
        }
        Memory::Pattern(p) => {
            let mut t = format!(
                "- [{}] pattern, fixed {} times: {}\n",
                r.id, p.count, p.kind
            );
            if diffs {
                t.push_str(&format!("  ```diff\n{}  ```\n", with_newline(&p.fix)));
            }
            t
        }
    }
}

fn with_newline(s: &str) -> String {
    if s.ends_with('\n') {
        s.to_string()
    } else {
        format!("{s}\n")
    }
}

fn one_line(s: &str) -> String {
    cut(&s.split_whitespace().collect::<Vec<_>>().join(" "), 200)
}

/// `s` cut to at most `max` bytes on a char boundary, marked when cut.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    const MARK: &str = "\n[…]";
    let mut end = max.saturating_sub(MARK.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &s[..end])
}

static KEY_SHAPED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        \bsk-[A-Za-z0-9_\-]{10,}                  # OpenAI, Anthropic (sk-ant-...)
        | \b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}  # GitHub tokens
        | \bgithub_pat_[A-Za-z0-9_]{20,}
        | \bglpat-[A-Za-z0-9_\-]{20,}             # GitLab
        | \bxox[abprs]-[A-Za-z0-9\-]{10,}         # Slack
        | \bAKIA[0-9A-Z]{16}\b                    # AWS access key id
        | \bAIza[0-9A-Za-z_\-]{35}                # Google API key
        | (?i:bearer)\s+[A-Za-z0-9._\-~+/]{16,}=*  # a bearer token
        ",
    )
    .expect("a valid regex")
});

/// Text with strings shaped like API keys and tokens replaced by `<redacted>`. The runtime
/// first replaces the values of the keys it knows (its environment and configuration).
pub fn redact_key_shapes(text: &str) -> String {
    KEY_SHAPED.replace_all(text, "<redacted>").into_owned()
}

/// Whether `text` holds a string shaped like an API key or token (what `redact_key_shapes`
/// would replace): the response cache stores no such request or answer.
pub fn has_key_shape(text: &str) -> bool {
    KEY_SHAPED.is_match(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(test_id: &str, file: &str, line: u32, message: &str) -> Failure {
        Failure {
            test_id: test_id.into(),
            location: Some(Location {
                file: file.into(),
                line,
                column: None,
            }),
            message: message.into(),
            frames: vec![Location {
                file: "calc.py".into(),
                line: 5,
                column: None,
            }],
        }
    }

    #[test]
    fn line_numbers_and_temp_paths_do_not_change_a_signature() {
        let a = failure(
            "test_calc.CalcTests.test_add",
            "test_calc.py",
            8,
            "AssertionError: -1 != 5 at /tmp/.tmpAbC12/calc.py:5 line 12",
        );
        let b = failure(
            "test_calc.CalcTests.test_add",
            "test_calc.py",
            31,
            "AssertionError: -1 != 5 at /tmp/.tmpZZ9x/calc.py:44 line 90",
        );
        assert_eq!(signature(&a), signature(&b));
        let s = signature(&a);
        assert_eq!(s.error_kind, "AssertionError");
        assert_eq!(s.frames, vec!["test_calc.py", "calc.py"]);
        assert_eq!(
            s.message,
            "AssertionError: -1 != 5 at <tmp>/calc.py:N line N"
        );
        assert_eq!(s.kind(), "AssertionError in test_calc.py");
    }

    #[test]
    fn macos_and_windows_temp_paths_and_addresses_are_normalised() {
        assert_eq!(
            normalise("/private/var/folders/ab/cd12/T/tmpX/a.rs:3:9 object at 0x7f3a2b10"),
            "<tmp>/a.rs:N object at 0x?"
        );
        assert_eq!(
            normalise(r"C:\Users\me\AppData\Local\Temp\tmp1\x.py:10"),
            r"<tmp>\x.py:N"
        );
    }

    #[test]
    fn error_kinds_come_from_the_message() {
        assert_eq!(
            error_kind("ModuleNotFoundError: No module named 'x'"),
            "ModuleNotFoundError"
        );
        assert_eq!(error_kind("thread 'a' panicked at src/lib.rs:3:5"), "panic");
        assert_eq!(error_kind("expected 3, got 4"), "failure");
    }

    #[test]
    fn episodes_are_one_per_distinct_failure_with_trimmed_diffs() {
        let f = failure("t.test_a", "t.py", 3, "AssertionError: x");
        let long = "+".repeat(MAX_DIFF * 2);
        let tried = [Attempt {
            diff: long.clone(),
            reflection: Some("wrong operator".into()),
        }];
        let e = episodes(
            &[f.clone(), f],
            &["calc.py".into()],
            &tried,
            Some(&long),
            "done",
        );
        assert_eq!(e.len(), 1);
        assert!(e[0].fix.as_ref().unwrap().len() <= MAX_DIFF);
        assert!(e[0].tried[0].diff.len() <= MAX_DIFF);
        assert_eq!(e[0].tried[0].reflection.as_deref(), Some("wrong operator"));
    }

    #[test]
    fn the_query_quotes_words_and_skips_short_ones_and_placeholders() {
        let s = signature(&failure(
            "t.test_add",
            "t.py",
            3,
            "AssertionError: a - b at /tmp/x",
        ));
        assert_eq!(
            query(&[s]),
            "\"test\" OR \"add\" OR \"assertionerror\" OR \"calc\""
        );
    }

    fn record(id: &str, fix: &str) -> Record {
        Record {
            id: id.into(),
            run_id: format!("run_{id}"),
            scope: "/w".into(),
            memory: Memory::Episode(Episode {
                signature: signature(&failure("t.test_add", "t.py", 3, "AssertionError: 1 != 2")),
                files: vec!["calc.py".into()],
                tried: vec![Attempt {
                    diff: "-a\n+b\n".into(),
                    reflection: Some("still wrong".into()),
                }],
                fix: Some(fix.into()),
                outcome: "done".into(),
            }),
        }
    }

    #[test]
    fn fusion_adds_ranks_keeps_both_scores_and_is_text_alone_without_vectors() {
        let text = vec![
            Hit::text(record("a", "-1\n"), 9.0),
            Hit::text(record("b", "-2\n"), 5.0),
        ];
        // Without vectors: the text ranking as it is.
        let alone = fuse(text.clone(), Vec::new(), 8);
        assert_eq!(alone, text);
        // "c" is found only by its embedding; "b" by both, so it comes first.
        let vector = vec![
            Hit::vector(record("c", "-3\n"), 0.91),
            Hit::vector(record("b", "-2\n"), 0.80),
        ];
        let fused = fuse(text, vector, 8);
        let ids: Vec<&str> = fused.iter().map(|h| h.record.id.as_str()).collect();
        assert_eq!(ids, ["b", "c", "a"]);
        assert_eq!((fused[0].text, fused[0].vector), (Some(5.0), Some(0.80)));
        assert!((fused[0].score - (1.0 / 62.0 + 1.0 / 62.0)).abs() < 1e-12);
        // "c" (first by vector) and "a" (first by text) tie; the one with a vector wins.
        assert_eq!((fused[1].text, fused[1].vector), (None, Some(0.91)));
        assert_eq!((fused[2].text, fused[2].vector), (Some(9.0), None));
        assert_eq!(fused[1].score, fused[2].score);
        assert_eq!(fuse(fused.clone(), fused, 1).len(), 1);
    }

    #[test]
    fn cosine_of_vectors() {
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-12);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 3.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 1.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
    }

    #[test]
    fn the_section_keeps_the_best_records_within_the_budget() {
        let hits = vec![
            Hit::text(record("m1", "-x\n+y\n"), 3.0),
            Hit::text(record("m2", &"+z\n".repeat(500)), 2.0),
            Hit::text(record("m3", "-p\n+q\n"), 1.0),
        ];
        let (text, used) = section(&hits, 600);
        assert!(text.len() <= 600, "{}", text.len());
        assert!(text.starts_with(SECTION_HEAD));
        assert!(text.contains("[m1]") && text.contains("what worked"));
        // m2's diff does not fit: it is shown without diffs.
        assert!(text.contains("[m2]") && text.contains("fixed in calc.py"));
        let ids: Vec<&str> = used.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(ids, ["m1", "m2", "m3"]);
        assert_eq!(section(&hits, 20).0, "");
        assert!(section(&[], 4096).1.is_empty());
    }

    #[test]
    fn key_shaped_strings_are_redacted() {
        let t = "key sk-canary-3f9a1c77d2 and ghp_abcdefghijklmnopqrstuv1234 \
                 Authorization: Bearer abcdefghijklmnop1234 AKIAABCDEFGHIJKLMNOP keep sk-x";
        let r = redact_key_shapes(t);
        assert!(!r.contains("canary") && !r.contains("ghp_") && !r.contains("AKIA"));
        assert!(!r.contains("abcdefghijklmnop1234"));
        assert!(r.contains("keep sk-x"), "{r}");
    }
}
