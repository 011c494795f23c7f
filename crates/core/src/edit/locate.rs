//! Finds where an edit belongs and what it writes there: a cascade of rules from exact to
//! fuzzy, stopping at the first rule that gives exactly one place and refusing when a rule
//! gives two or more; then the model's change is applied onto the located lines as a line
//! diff (search → replace), so the lines it keeps stay the file's own, byte for byte.
//!
//! Pure: it gets a file's text and an edit, and returns a range and its new text.

use std::borrow::Cow;
use std::ops::Range;

use serde::Serialize;
use similar::{DiffOp, capture_diff_slices};
use thiserror::Error;

/// The rule that located an edit, strictest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The search text occurs exactly once: as whole lines when it has a line break, as a
    /// fragment of a line when it has none.
    Exact,
    /// Lines match once trailing whitespace is ignored.
    TrailingWhitespace,
    /// Lines match but for a uniform indentation offset.
    Indentation,
    /// Lines match once typographic quotes, dashes and non-breaking spaces are folded to ASCII.
    UnicodeFolded,
    /// A line edit's `old` matches, whitespace collapsed, within the window around its line.
    NearStatedLine,
    /// Each line is at least 80% similar and at least 80% of the lines match.
    Fuzzy,
    /// A whole-file edit: nothing to locate.
    WholeFile,
}

impl Rule {
    /// Whether text matched by this rule stands at the indentation the model wrote.
    pub fn keeps_indentation(self) -> bool {
        matches!(
            self,
            Rule::Exact | Rule::TrailingWhitespace | Rule::UnicodeFolded | Rule::WholeFile
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Exact => "exact",
            Rule::TrailingWhitespace => "trailing whitespace ignored",
            Rule::Indentation => "indentation offset",
            Rule::UnicodeFolded => "unicode punctuation folded",
            Rule::NearStatedLine => "near the stated line",
            Rule::Fuzzy => "fuzzy",
            Rule::WholeFile => "whole file",
        }
    }

    /// Whether a file line counts as the model's copy of it under this rule: the standard a
    /// line must meet before the rule may remove or change it.
    fn same(self, file: &str, model: &str) -> bool {
        match self {
            Rule::Exact | Rule::WholeFile => file == model,
            Rule::TrailingWhitespace => file.trim_end() == model.trim_end(),
            Rule::Indentation => file.trim() == model.trim(),
            Rule::UnicodeFolded => folded_eq(file, model),
            Rule::NearStatedLine => collapse(file) == collapse(model),
            Rule::Fuzzy => similarity(&Prepared::new(file), &Prepared::new(model)) >= FUZZY_LINE,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct LocateOptions {
    /// How many lines around a stated line count as near it.
    pub line_window: usize,
}

impl Default for LocateOptions {
    fn default() -> Self {
        LocateOptions { line_window: 20 }
    }
}

/// A line of the file that was taken for the model's copy of it although the two differ (under
/// a rule looser than exact), for the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Differing {
    /// 1-based line of the file.
    pub line: usize,
    pub file: String,
    pub model: String,
}

/// Where an edit goes: a byte range of the original text and the text that replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub range: Range<usize>,
    pub replacement: String,
    pub rule: Rule,
    /// Several places matched and the stated line picked one.
    pub chosen_by_line: bool,
    /// 1-based first line of the match in the original text.
    pub line: usize,
    /// The located lines that differ from the model's copy.
    pub differing: Vec<Differing>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    At(Located),
    /// The change is already in the file: the search text is absent but the replacement is
    /// where it would go, or the lines the edit adds are already where it would put them.
    AlreadyApplied,
}

/// A real line of the file, 1-based, for refusals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NumberedLine {
    pub line: usize,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LocateError {
    #[error("the search text is empty; give the lines to replace")]
    EmptySearch,
    #[error("the search text was not found{}", closest_hint(.closest))]
    NotFound { closest: Vec<NumberedLine> },
    #[error("the search text matches {} places (lines {}) under rule \"{}\"; add surrounding lines to make it unique", .lines.len(), join_numbers(.lines), .rule.as_str())]
    Ambiguous { rule: Rule, lines: Vec<usize> },
    #[error(
        "the lines around it match (rule \"{}\"), but line {line} of the file, which the edit changes, is not the line you wrote:\n  file: {file}\n  yours: {model}\ncopy the line to change exactly{}",
        .rule.as_str(), closest_hint(.closest)
    )]
    ChangedLineDiffers {
        rule: Rule,
        line: usize,
        file: String,
        model: String,
        closest: Vec<NumberedLine>,
    },
    #[error("{0}")]
    Elision(String),
    #[error("indentation: {0}")]
    Indentation(String),
}

fn join_numbers(lines: &[usize]) -> String {
    lines
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn closest_hint(closest: &[NumberedLine]) -> String {
    if closest.is_empty() {
        return String::new();
    }
    let mut s = String::from("; the closest lines are:");
    for l in closest {
        s.push_str(&format!("\n{:>5} | {}", l.line, l.text));
    }
    s
}

/// A text split into lines, remembering where each starts and which line ending it uses.
struct Lines<'a> {
    text: &'a str,
    /// Line contents without terminators.
    lines: Vec<&'a str>,
    /// Line contents trimmed at both ends, computed once for the line rules.
    trimmed: Vec<&'a str>,
    /// Byte offset of each line's start, plus one past the end.
    starts: Vec<usize>,
    eol: &'static str,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        let mut lines = Vec::new();
        let mut starts = vec![0];
        let mut crlf = 0;
        let mut lf = 0;
        let mut pos = 0;
        for raw in text.split_inclusive('\n') {
            let content = raw.strip_suffix('\n').unwrap_or(raw);
            let content = match content.strip_suffix('\r') {
                Some(c) if raw.ends_with('\n') => {
                    crlf += 1;
                    c
                }
                _ => {
                    if raw.ends_with('\n') {
                        lf += 1;
                    }
                    content
                }
            };
            lines.push(content);
            pos += raw.len();
            starts.push(pos);
        }
        Lines {
            text,
            trimmed: lines.iter().map(|l| l.trim()).collect(),
            lines,
            starts,
            eol: if crlf > lf { "\r\n" } else { "\n" },
        }
    }

    /// The line ending of line `i` ("" for a last line without one).
    fn terminator(&self, i: usize) -> &'a str {
        &self.text[self.starts[i] + self.lines[i].len()..self.starts[i + 1]]
    }
}

/// The lines of a search or replace text: `\n`-separated, one final newline dropped.
fn block_lines(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_suffix('\r').unwrap_or(s);
    s.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// An elision line in a model's SEARCH or REPLACE: "the lines here are unchanged".
fn is_elision(line: &str) -> bool {
    matches!(line.trim(), "..." | "…")
}

/// Locates `search` in `text` and computes its replacement.
pub fn locate(
    text: &str,
    search: &str,
    replace: &str,
    stated_line: Option<usize>,
    opts: &LocateOptions,
) -> Result<Found, LocateError> {
    Locator::new(text).locate(search, replace, stated_line, opts)
}

/// One file prepared for locating many edits: its lines are split once, and the summaries
/// the fuzzy rule needs are built the first time an edit gets that far.
pub struct Locator<'a> {
    file: Lines<'a>,
    prepared: std::cell::OnceCell<Vec<Prepared>>,
}

impl<'a> Locator<'a> {
    pub fn new(text: &'a str) -> Self {
        Locator {
            file: Lines::new(text),
            prepared: std::cell::OnceCell::new(),
        }
    }

    fn prepared(&self) -> &[Prepared] {
        self.prepared
            .get_or_init(|| self.file.lines.iter().map(|l| Prepared::new(l)).collect())
    }

    pub fn locate(
        &self,
        search: &str,
        replace: &str,
        stated_line: Option<usize>,
        opts: &LocateOptions,
    ) -> Result<Found, LocateError> {
        if search.trim().is_empty() {
            return Err(LocateError::EmptySearch);
        }
        let file = &self.file;
        // A search with no line break may be a fragment of a line; one with a line break is
        // made of whole lines and matches whole lines only.
        if !search.contains('\n')
            && let Some(found) = self.fragment(search, replace, stated_line, opts)?
        {
            return Ok(Found::At(found));
        }
        let wanted = block_lines(search);
        let replacement = block_lines(replace);
        if let Some((s, rule, by_line)) = find_lines(file, &wanted, stated_line, opts)? {
            return self.splice(s, &wanted, &replacement, rule, by_line);
        }
        // Before anything looser, see whether the change is already there: a retry after a
        // partial application must not apply it twice, and the old text is often similar
        // enough to the new one to match fuzzily.
        // Only a match that keeps the indentation counts: in Python a line at another
        // indentation is another statement.
        if !replacement.is_empty()
            && replacement != wanted
            && find_lines(file, &replacement, stated_line, opts)
                .ok()
                .flatten()
                .is_some_and(|(_, rule, _)| rule.keeps_indentation())
        {
            return Ok(Found::AlreadyApplied);
        }
        if wanted.iter().any(|l| is_elision(l)) {
            return self.elided(&wanted, &replacement, opts);
        }
        if let Some(s) = fuzzy(file, self.prepared(), &wanted, stated_line)? {
            return self.splice(s, &wanted, &replacement, Rule::Fuzzy, false);
        }
        Err(LocateError::NotFound {
            closest: closest_lines(file, self.prepared(), search),
        })
    }

    /// A search without a line break, as a substring of the text.
    fn fragment(
        &self,
        search: &str,
        replace: &str,
        stated_line: Option<usize>,
        opts: &LocateOptions,
    ) -> Result<Option<Located>, LocateError> {
        let file = &self.file;
        let needle = search.strip_suffix('\r').unwrap_or(search);
        let hits: Vec<usize> =
            memchr::memmem::find_iter(file.text.as_bytes(), needle.as_bytes()).collect();
        let hit_lines: Vec<usize> = hits.iter().map(|&b| line_of(file, b)).collect();
        let Some((index, by_line)) = pick(&hit_lines, stated_line, opts, Rule::Exact)? else {
            return Ok(None);
        };
        let start = hits[index];
        // A match that runs to the end of its line but for trailing spaces takes them along:
        // the line the model rewrote ends as the model wrote it.
        let rest = &file.text[start + needle.len()..];
        let trailing = rest.len() - rest.trim_start_matches([' ', '\t']).len();
        let at_line_end = matches!(
            rest.as_bytes()[trailing..].first(),
            None | Some(b'\n') | Some(b'\r')
        );
        let end = start + needle.len() + if at_line_end { trailing } else { 0 };
        Ok(Some(Located {
            range: start..end,
            replacement: adapt_eol(replace, file.eol),
            rule: Rule::Exact,
            chosen_by_line: by_line,
            line: hit_lines[index] + 1,
            differing: Vec::new(),
        }))
    }

    /// Applies the model's change, `wanted` → `replacement`, onto the file's lines starting
    /// at `s` as a line diff: the lines both share keep the file's text; the lines the model
    /// removes must match their copy by the rule's own standard, else the edit is refused; the
    /// lines it adds are written as it wrote them, in the file's indentation.
    fn splice(
        &self,
        s: usize,
        wanted: &[&str],
        replacement: &[&str],
        rule: Rule,
        chosen_by_line: bool,
    ) -> Result<Found, LocateError> {
        let file = &self.file;
        // A REPLACE written at the file's indentation under a SEARCH that is not is first
        // brought to the SEARCH's, so the whole edit moves by one offset, never half of it.
        let shifted = match rule {
            Rule::Indentation => {
                to_search_indent(&file.lines[s..s + wanted.len()], wanted, replacement)?
            }
            _ => None,
        };
        let refs: Vec<&str>;
        let replacement = match &shifted {
            Some(lines) => {
                refs = lines.iter().map(String::as_str).collect();
                &refs[..]
            }
            None => replacement,
        };
        let ops = capture_diff_slices(similar::Algorithm::Myers, wanted, replacement);
        let reindent = Reindent::new(file, s, wanted, replacement, rule);
        // The lines an edit only adds may already be where it would put them (the same edit
        // sent twice): then it changes nothing.
        if already_inserted(file, s, wanted.len(), &ops, replacement, &reindent) {
            return Ok(Found::AlreadyApplied);
        }
        let window = Window {
            file,
            s,
            wanted,
            rule,
        };
        let out = window.spliced(&ops, replacement, &reindent)?;
        let (range, text) = window.text(out);
        // Under the indentation rule every kept line is the REPLACE's own text moved by the
        // offset, so what lands must read as the REPLACE does (looser rules keep the file's
        // text where the model's copy differs, by design).
        if rule == Rule::Indentation {
            landed_as_written(&text, replacement)?;
        }
        Ok(Found::At(Located {
            range,
            replacement: text,
            rule,
            chosen_by_line,
            line: s + 1,
            differing: if rule == Rule::Exact {
                Vec::new()
            } else {
                window.differing()
            },
        }))
    }

    /// A SEARCH and REPLACE with `...` lines (aider's elision): each piece between them is
    /// located in order, each after the one before and at exactly one place there; the
    /// elided lines in between stay as they are. Anything else is refused, saying what to
    /// send instead.
    fn elided(
        &self,
        wanted: &[&str],
        replacement: &[&str],
        opts: &LocateOptions,
    ) -> Result<Found, LocateError> {
        let file = &self.file;
        let (pieces, new_pieces) = elided_pieces(wanted, replacement)?;
        let mut text = String::new();
        let mut start = None;
        let mut end = 0;
        let mut loosest = Rule::Exact;
        let mut differing = Vec::new();
        let mut changed = false;
        for (piece, new_piece) in pieces.iter().zip(&new_pieces) {
            let (rule, s) = elided_piece(file, piece, end, opts)?;
            let here = file.starts[s];
            // The elided lines between two pieces, kept as they are.
            if start.is_some() {
                text.push_str(&file.text[end..here]);
            }
            start.get_or_insert(here);
            loosest = loosest.max(rule);
            match self.splice(s, piece, new_piece, rule, false)? {
                Found::At(l) => {
                    changed |= file.text[l.range.clone()] != l.replacement;
                    text.push_str(&l.replacement);
                    end = l.range.end;
                    differing.extend(l.differing);
                }
                Found::AlreadyApplied => {
                    end = file.starts[s + piece.len()];
                    text.push_str(&file.text[here..end]);
                }
            }
        }
        let start = start.unwrap_or(0);
        if !changed {
            return Ok(Found::AlreadyApplied);
        }
        Ok(Found::At(Located {
            range: start..end,
            replacement: text,
            rule: loosest,
            chosen_by_line: false,
            line: line_of(file, start) + 1,
            differing,
        }))
    }
}

/// The runs of lines between the `...` lines of an elided block.
type Pieces<'w, 'a> = Vec<&'w [&'a str]>;

/// The pieces between the `...` lines of a SEARCH and of its REPLACE, which must elide
/// alike, with real lines around every `...`.
fn elided_pieces<'w, 'a>(
    wanted: &'w [&'a str],
    replacement: &'w [&'a str],
) -> Result<(Pieces<'w, 'a>, Pieces<'w, 'a>), LocateError> {
    let pieces: Vec<&[&str]> = wanted.split(|l| is_elision(l)).collect();
    let new_pieces: Vec<&[&str]> = replacement.split(|l| is_elision(l)).collect();
    if pieces.len() != new_pieces.len() {
        return Err(LocateError::Elision(format!(
            "the SEARCH has {} `...` line(s) and the REPLACE {}; elide the same unchanged lines in both, or send the lines in full",
            pieces.len() - 1,
            new_pieces.len() - 1
        )));
    }
    if pieces.iter().any(|p| p.iter().all(|l| l.trim().is_empty())) {
        return Err(LocateError::Elision(
            "a `...` line at the start or end of the SEARCH (or two in a row) leaves the place open; put real lines before and after every `...`".into(),
        ));
    }
    Ok((pieces, new_pieces))
}

/// Where one piece of an elided SEARCH is, at or after byte `from`: under the strictest rule
/// that finds it there, at exactly one place.
fn elided_piece(
    file: &Lines<'_>,
    piece: &[&str],
    from: usize,
    opts: &LocateOptions,
) -> Result<(Rule, usize), LocateError> {
    let (rule, starts) = candidates(file, piece, None, opts, true)
        .into_iter()
        .map(|(rule, starts)| {
            let after: Vec<usize> = starts
                .into_iter()
                .filter(|&s| file.starts[s] >= from)
                .collect();
            (rule, after)
        })
        .find(|(_, starts)| !starts.is_empty())
        .ok_or_else(|| {
            LocateError::Elision(format!(
                "the lines around a `...` were not found in order (\"{}\"); send the lines in full",
                piece.first().map_or("", |l| l.trim())
            ))
        })?;
    if starts.len() > 1 {
        return Err(LocateError::Elision(format!(
            "the lines \"{}\" around a `...` match {} places (lines {}); add lines to make them unique, or send the lines in full",
            piece.first().map_or("", |l| l.trim()),
            starts.len(),
            join_numbers(&starts.iter().map(|s| s + 1).collect::<Vec<_>>())
        )));
    }
    Ok((rule, starts[0]))
}

/// The file's lines `s..s + wanted.len()` where an edit was located under `rule`, and the
/// model's copy of them: what `Locator::splice` writes its change onto.
struct Window<'f, 'a> {
    file: &'f Lines<'a>,
    s: usize,
    wanted: &'f [&'f str],
    rule: Rule,
}

/// A line of a window after the change: a file line kept byte for byte, or one the model
/// wrote (reindented).
enum Spliced {
    File(usize),
    New(String),
}

impl Window<'_, '_> {
    /// The located lines that differ from the model's copy of them.
    fn differing(&self) -> Vec<Differing> {
        let (file, s) = (self.file, self.s);
        (0..self.wanted.len())
            .filter(|&i| file.lines[s + i] != self.wanted[i])
            .map(|i| Differing {
                line: s + i + 1,
                file: file.lines[s + i].to_string(),
                model: self.wanted[i].to_string(),
            })
            .collect()
    }

    /// Refuses removing the model's lines `from..from + len` unless each matches the file's
    /// by the rule's standard.
    fn check_removed(&self, from: usize, len: usize) -> Result<(), LocateError> {
        let (file, s, rule) = (self.file, self.s, self.rule);
        for (i, model) in self.wanted.iter().enumerate().skip(from).take(len) {
            if !rule.same(file.lines[s + i], model) {
                return Err(LocateError::ChangedLineDiffers {
                    rule,
                    line: s + i + 1,
                    file: file.lines[s + i].to_string(),
                    model: model.to_string(),
                    closest: (s..s + self.wanted.len())
                        .map(|k| NumberedLine {
                            line: k + 1,
                            text: file.lines[k].to_string(),
                        })
                        .collect(),
                });
            }
        }
        Ok(())
    }

    /// The window's lines after the line diff `ops` (of the model's copy → `replacement`).
    fn spliced(
        &self,
        ops: &[DiffOp],
        replacement: &[&str],
        reindent: &Reindent<'_>,
    ) -> Result<Vec<Spliced>, LocateError> {
        let (s, n) = (self.s, self.wanted.len());
        let mut out: Vec<Spliced> = Vec::new();
        for op in ops {
            match *op {
                DiffOp::Equal { old_index, len, .. } => {
                    out.extend((old_index..old_index + len).map(|i| Spliced::File(s + i)));
                }
                DiffOp::Delete {
                    old_index, old_len, ..
                } => self.check_removed(old_index, old_len)?,
                DiffOp::Insert {
                    old_index,
                    new_index,
                    new_len,
                } => {
                    let anchor = old_index.saturating_sub(1).min(n - 1);
                    out.extend(
                        (new_index..new_index + new_len)
                            .map(|k| Spliced::New(reindent.line(replacement[k], anchor))),
                    );
                }
                DiffOp::Replace {
                    old_index,
                    old_len,
                    new_index,
                    new_len,
                } => {
                    self.check_removed(old_index, old_len)?;
                    out.extend((new_index..new_index + new_len).map(|k| {
                        // A replaced line takes its indentation from the line it replaces.
                        let anchor = (old_index + (k - new_index)).min(old_index + old_len - 1);
                        Spliced::New(reindent.line(replacement[k], anchor))
                    }));
                }
            }
        }
        Ok(out)
    }

    /// The byte range the window covers and the text that replaces it, made of `out`.
    fn text(&self, out: Vec<Spliced>) -> (Range<usize>, String) {
        let (file, s, n) = (self.file, self.s, self.wanted.len());
        // The window is whole lines, its last line ending included; the text that replaces it
        // ends the same way.
        let mut range = file.starts[s]..file.starts[s + n];
        let last_end = file.terminator(s + n - 1);
        let mut text = String::new();
        let count = out.len();
        for (k, item) in out.into_iter().enumerate() {
            let (content, own_end): (Cow<str>, &str) = match item {
                Spliced::File(i) => (Cow::Borrowed(file.lines[i]), file.terminator(i)),
                Spliced::New(t) => (Cow::Owned(t), file.eol),
            };
            text.push_str(&content);
            if k + 1 == count {
                text.push_str(last_end);
            } else if own_end.is_empty() {
                text.push_str(file.eol);
            } else {
                text.push_str(own_end);
            }
        }
        // Removing the last lines of a file without a final line ending takes the ending
        // before them, so no blank line is left behind.
        if count == 0 && last_end.is_empty() && s > 0 {
            range.start -= file.terminator(s - 1).len();
        }
        (range, text)
    }
}

/// Whether the edit only adds lines, and every block it adds already stands at the edge of
/// the located lines where it would go.
fn already_inserted(
    file: &Lines<'_>,
    s: usize,
    n: usize,
    ops: &[DiffOp],
    replacement: &[&str],
    reindent: &Reindent<'_>,
) -> bool {
    let mut inserts = 0;
    for op in ops {
        match *op {
            DiffOp::Equal { .. } => {}
            DiffOp::Delete { .. } | DiffOp::Replace { .. } => return false,
            DiffOp::Insert {
                old_index,
                new_index,
                new_len,
            } => {
                let block = &replacement[new_index..new_index + new_len];
                if block.iter().all(|l| l.trim().is_empty()) {
                    return false;
                }
                // Inside the window the added lines cannot stand already: the window matched
                // without them.
                let at = match old_index {
                    0 if s >= new_len => s - new_len,
                    i if i == n && s + n + new_len <= file.lines.len() => s + n,
                    _ => return false,
                };
                let anchor = old_index.saturating_sub(1).min(n - 1);
                let present = block
                    .iter()
                    .enumerate()
                    .all(|(k, l)| same_statement(file.lines[at + k], &reindent.line(l, anchor)));
                if !present {
                    return false;
                }
                inserts += 1;
            }
        }
    }
    inserts > 0
}

/// Writes added lines in the file's indentation: under a loose rule, a line's indentation
/// relative to its anchor (the model's copy of a located line) is carried over to the file's
/// line, in the file's indentation unit (a tab, or its width of spaces).
struct Reindent<'a> {
    file: &'a Lines<'a>,
    s: usize,
    wanted: Vec<&'a str>,
    rule: Rule,
    /// The model's indentation unit in spaces (a tab counts as one unit).
    model_unit: usize,
}

impl<'a> Reindent<'a> {
    fn new(
        file: &'a Lines<'a>,
        s: usize,
        wanted: &[&'a str],
        replacement: &[&str],
        rule: Rule,
    ) -> Self {
        let widths: Vec<usize> = wanted
            .iter()
            .chain(replacement)
            .map(|l| leading_ws(l))
            .filter(|ws| !ws.is_empty() && !ws.contains('\t'))
            .map(str::len)
            .collect();
        // The unit is in the steps between lines, not in their widths: a SEARCH two spaces
        // deeper than a file indented by four has widths 10, 14, 18 (a unit of 4, not 2).
        let least = widths.iter().copied().min().unwrap_or(0);
        let steps = widths.iter().map(|w| w - least).fold(0, gcd);
        let unit = if (2..=8).contains(&steps) {
            steps
        } else {
            widths.iter().copied().fold(0, gcd)
        };
        Reindent {
            file,
            s,
            wanted: wanted.to_vec(),
            rule,
            model_unit: if (2..=8).contains(&unit) { unit } else { 4 },
        }
    }

    /// The file's indentation unit, as the file itself indents: a tab, or the common width
    /// of its space indents.
    fn file_unit(&self, anchor_ws: &str) -> String {
        if anchor_ws.contains('\t') {
            return "\t".into();
        }
        let (mut tabs, mut spaced, mut unit) = (0, 0, 0);
        for l in &self.file.lines {
            let ws = leading_ws(l);
            if ws.starts_with('\t') {
                tabs += 1;
            } else if !ws.is_empty() && !l.trim().is_empty() {
                spaced += 1;
                unit = gcd(unit, ws.len());
            }
        }
        if tabs > spaced {
            "\t".into()
        } else if (2..=8).contains(&unit) {
            " ".repeat(unit)
        } else {
            " ".repeat(self.model_unit)
        }
    }

    /// Indentation in the model's units: tabs one each, spaces `model_unit` to one.
    fn model_units(&self, ws: &str) -> f64 {
        ws.chars()
            .map(|c| {
                if c == '\t' {
                    1.0
                } else {
                    1.0 / self.model_unit as f64
                }
            })
            .sum()
    }

    fn line(&self, line: &str, anchor: usize) -> String {
        if self.rule == Rule::Exact || line.trim().is_empty() {
            return line.to_string();
        }
        // A blank line says nothing of the offset (both sides are empty there): the nearest
        // line with text does, before the anchor first.
        let blank = |i: usize| self.wanted[i].trim().is_empty();
        let anchor = (0..=anchor)
            .rev()
            .chain(anchor + 1..self.wanted.len())
            .find(|&i| !blank(i))
            .unwrap_or(anchor);
        let (file_ws, model_ws) = (
            leading_ws(self.file.lines[self.s + anchor]),
            leading_ws(self.wanted[anchor]),
        );
        if file_ws == model_ws {
            return line.to_string();
        }
        let delta = self.model_units(leading_ws(line)) - self.model_units(model_ws);
        let unit = self.file_unit(file_ws);
        let levels = delta.floor();
        let spaces = ((delta - levels) * self.model_unit as f64).round() as usize;
        let mut indent = file_ws.to_string();
        if levels >= 0.0 {
            indent.push_str(&unit.repeat(levels as usize));
        } else {
            for _ in 0..(-levels) as usize {
                match indent.strip_suffix(unit.as_str()) {
                    Some(rest) => indent.truncate(rest.len()),
                    None => {
                        indent.pop();
                    }
                }
            }
        }
        indent.push_str(&" ".repeat(spaces));
        format!("{indent}{}", line.trim_start())
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The windows matching `wanted` under each strict line rule, loosest last, for the rules
/// that match anywhere. Every rule is looser than "exact" and none is looser than folding,
/// so the windows that match folded are computed once and the rules filter them.
fn candidates(
    file: &Lines<'_>,
    wanted: &[&str],
    stated_line: Option<usize>,
    opts: &LocateOptions,
    all: bool,
) -> Vec<(Rule, Vec<usize>)> {
    let mut out = Vec::new();
    if wanted.is_empty() || wanted.len() > file.lines.len() {
        return out;
    }
    // Exact whole lines first, found fast as a substring that starts and ends at line ends;
    // when there are any, no looser rule is looked at.
    let needle = wanted.join(file.eol);
    let exact: Vec<usize> = memchr::memmem::find_iter(file.text.as_bytes(), needle.as_bytes())
        .filter_map(|b| {
            let first = file.starts.binary_search(&b).ok()?;
            let last = first + wanted.len() - 1;
            (last < file.lines.len()
                && file.starts[last] + file.lines[last].len() == b + needle.len())
            .then_some(first)
        })
        .collect();
    if !exact.is_empty() && !all {
        out.push((Rule::Exact, exact));
        return out;
    }
    let wanted_trimmed: Vec<&str> = wanted.iter().map(|w| w.trim()).collect();
    let folded: Vec<usize> = (0..=file.lines.len() - wanted.len())
        .filter(|&s| {
            (0..wanted.len()).all(|j| trimmed_folded_eq(file.trimmed[s + j], wanted_trimmed[j]))
        })
        .collect();
    for rule in [
        Rule::Exact,
        Rule::TrailingWhitespace,
        Rule::Indentation,
        Rule::UnicodeFolded,
    ] {
        let starts: Vec<usize> = folded
            .iter()
            .copied()
            .filter(|&s| (0..wanted.len()).all(|j| rule.same(file.lines[s + j], wanted[j])))
            // The indentation rule also needs one offset shared by every line.
            .filter(|&s| {
                rule != Rule::Indentation
                    || indent_delta(&file.lines[s..s + wanted.len()], wanted).is_some()
            })
            .collect();
        if !starts.is_empty() {
            out.push((rule, starts));
        }
    }
    // A line edit's text near its stated line, with runs of whitespace collapsed.
    if let Some(stated) = stated_line {
        let center = stated.saturating_sub(1);
        let lo = center.saturating_sub(opts.line_window);
        let hi = (center + opts.line_window + 1).min(file.lines.len());
        let wanted_c: Vec<String> = wanted.iter().map(|l| collapse(l)).collect();
        let starts: Vec<usize> = (lo..hi)
            .filter(|&s| s + wanted.len() <= file.lines.len())
            .filter(|&s| (0..wanted.len()).all(|j| collapse(file.lines[s + j]) == wanted_c[j]))
            .collect();
        if !starts.is_empty() {
            out.push((Rule::NearStatedLine, starts));
        }
    }
    out
}

/// The first strict rule that matches `wanted` as whole lines, and where. `Ok(None)` when
/// none does; an error when the first rule that matches matches several places that the
/// stated line does not settle.
fn find_lines(
    file: &Lines<'_>,
    wanted: &[&str],
    stated_line: Option<usize>,
    opts: &LocateOptions,
) -> Result<Option<(usize, Rule, bool)>, LocateError> {
    for (rule, starts) in candidates(file, wanted, stated_line, opts, false) {
        // Near the stated line, ties are no better settled by it.
        let stated = (rule != Rule::NearStatedLine)
            .then_some(stated_line)
            .flatten();
        if let Some((index, by_line)) = pick(&starts, stated, opts, rule)? {
            return Ok(Some((starts[index], rule, by_line)));
        }
    }
    Ok(None)
}

/// Runs of whitespace collapsed to one space, punctuation folded.
fn collapse(s: &str) -> String {
    fold(s).split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Picks the one match, or settles several with the stated line: the candidate exactly at it
/// wins, else the only one within the window around it; otherwise refuses.
fn pick(
    lines: &[usize],
    stated_line: Option<usize>,
    opts: &LocateOptions,
    rule: Rule,
) -> Result<Option<(usize, bool)>, LocateError> {
    match lines.len() {
        0 => Ok(None),
        1 => Ok(Some((0, false))),
        _ => {
            if let Some(stated) = stated_line {
                let center = stated.saturating_sub(1);
                if let Some(at) = lines.iter().position(|&l| l == center) {
                    return Ok(Some((at, true)));
                }
                let near: Vec<usize> = (0..lines.len())
                    .filter(|&i| lines[i].abs_diff(center) <= opts.line_window)
                    .collect();
                if near.len() == 1 {
                    return Ok(Some((near[0], true)));
                }
            }
            Err(LocateError::Ambiguous {
                rule,
                lines: lines.iter().map(|l| l + 1).collect(),
            })
        }
    }
}

/// Under the indentation rule (`found`, the file's lines, stand at one offset from `wanted`,
/// the SEARCH), which indentation the REPLACE is written at: the SEARCH's (`None`: it moves
/// with the offset as it is), or the file's (the REPLACE brought to the SEARCH's). The lines
/// both keep decide, else the first line; a REPLACE that is partly at each is refused.
fn to_search_indent(
    found: &[&str],
    wanted: &[&str],
    replacement: &[&str],
) -> Result<Option<Vec<String>>, LocateError> {
    let Some(delta) = indent_delta(found, wanted) else {
        return Ok(None);
    };
    let (mut at_search, mut at_file) = (0, 0);
    let tw: Vec<&str> = wanted.iter().map(|x| x.trim()).collect();
    let tr: Vec<&str> = replacement.iter().map(|x| x.trim()).collect();
    for op in capture_diff_slices(similar::Algorithm::Myers, &tw, &tr) {
        let DiffOp::Equal {
            old_index,
            new_index,
            len,
        } = op
        else {
            continue;
        };
        for k in (0..len).filter(|&k| !tw[old_index + k].is_empty()) {
            let r = leading_ws(replacement[new_index + k]);
            if r == leading_ws(wanted[old_index + k]) {
                at_search += 1;
            } else if r == leading_ws(found[old_index + k]) {
                at_file += 1;
            }
        }
    }
    if at_search + at_file == 0 {
        let first = |l: &[&str]| l.iter().position(|x| !x.trim().is_empty());
        if let (Some(w), Some(r)) = (first(wanted), first(replacement)) {
            let r = leading_ws(replacement[r]);
            at_file = usize::from(r == leading_ws(found[w]) && r != leading_ws(wanted[w]));
        }
    }
    if at_file == 0 {
        return Ok(None);
    }
    if at_search > 0 {
        return Err(LocateError::Indentation(
            "the SEARCH stands at another indentation than the file, and the REPLACE is partly at the SEARCH's and partly at the file's; copy the SEARCH lines as the file indents them".into(),
        ));
    }
    replacement
        .iter()
        .map(|l| {
            if l.trim().is_empty() {
                return Some(l.to_string());
            }
            match &delta {
                Indent::Add(extra) => l.strip_prefix(extra.as_str()).map(str::to_string),
                Indent::Remove(extra) => Some(format!("{extra}{l}")),
            }
        })
        .collect::<Option<Vec<String>>>()
        .map(Some)
        .ok_or_else(|| {
            LocateError::Indentation(
                "the REPLACE is at the file's indentation but a line of it is indented less than the SEARCH's offset allows; copy the SEARCH lines as the file indents them".into(),
            )
        })
}

/// What a re-indented edit would write, checked against the REPLACE it came from: the same
/// lines of text in the same order, each deeper, level or shallower than the one before as
/// in the REPLACE. Anything else (a line lost, one added, a block moved under another) is
/// refused before it is written, with the first difference.
fn landed_as_written(text: &str, replacement: &[&str]) -> Result<(), LocateError> {
    let lines = |ls: Vec<&str>| -> Vec<(usize, String)> {
        ls.into_iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let width = leading_ws(l)
                    .chars()
                    .map(|c| if c == '\t' { 8 } else { 1 })
                    .sum();
                (width, fold(l.trim()))
            })
            .collect()
    };
    let landed = lines(text.lines().collect());
    let written = lines(replacement.to_vec());
    let refuse = |what: String| {
        Err(LocateError::Indentation(format!(
            "after re-indenting, the lines to be written differ from the REPLACE ({what}); copy the SEARCH lines as the file indents them"
        )))
    };
    if let Some(k) = (0..landed.len().max(written.len()))
        .find(|&k| landed.get(k).map(|l| &l.1) != written.get(k).map(|w| &w.1))
    {
        let show =
            |l: Option<&(usize, String)>| l.map_or("nothing".into(), |l| format!("`{}`", l.1));
        return refuse(format!(
            "line {} would be {}, the REPLACE says {}",
            k + 1,
            show(landed.get(k)),
            show(written.get(k))
        ));
    }
    let step = |a: &(usize, String), b: &(usize, String)| b.0.cmp(&a.0);
    for k in 1..landed.len() {
        if step(&landed[k - 1], &landed[k]) != step(&written[k - 1], &written[k]) {
            return refuse(format!(
                "`{}` would stand at another depth against the line before it than the REPLACE puts it",
                written[k].1
            ));
        }
    }
    Ok(())
}

/// How the file's indentation differs from the search text's: a prefix to add, or one to
/// remove. `None` when the lines disagree about it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Indent {
    Add(String),
    Remove(String),
}

fn leading_ws(s: &str) -> &str {
    &s[..s.len() - s.trim_start().len()]
}

fn indent_delta(found: &[&str], wanted: &[&str]) -> Option<Indent> {
    let mut delta: Option<Indent> = None;
    for (f, w) in found.iter().zip(wanted) {
        if f.trim().is_empty() || w.trim().is_empty() {
            continue;
        }
        let (fi, wi) = (leading_ws(f), leading_ws(w));
        let this = if let Some(extra) = fi.strip_suffix(wi) {
            Indent::Add(extra.to_string())
        } else if let Some(extra) = wi.strip_suffix(fi) {
            Indent::Remove(extra.to_string())
        } else {
            return None;
        };
        match &delta {
            None => delta = Some(this),
            Some(d) if *d == this => {}
            Some(_) => return None,
        }
    }
    Some(delta.unwrap_or(Indent::Add(String::new())))
}

/// Folds typographic punctuation to ASCII so "smart" quotes and dashes from a model match.
pub fn fold(s: &str) -> String {
    fold_chars(s).collect()
}

/// The folded characters of `s`, without building a string. Only the ellipsis becomes more
/// than one character ("..."), so each char maps to itself or a replacement plus repeats.
fn fold_chars(s: &str) -> impl Iterator<Item = char> + '_ {
    s.chars().flat_map(|c| {
        let (first, extra) = match c {
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' => ('\'', 0),
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' => ('"', 0),
            '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
            | '\u{2212}' => ('-', 0),
            '\u{00A0}' | '\u{2007}' | '\u{202F}' | '\u{2009}' | '\u{200A}' | '\u{3000}' => (' ', 0),
            '\u{2026}' => ('.', 2),
            _ => (c, 0),
        };
        std::iter::once(first).chain(std::iter::repeat_n('.', extra))
    })
}

/// Whether two lines are equal once trimmed and folded.
/// Whether two lines say the same at the same indentation: the indentation compared byte for
/// byte (it is meaning in Python and YAML), the rest folded as `folded_eq` does.
fn same_statement(a: &str, b: &str) -> bool {
    let indent = |l: &str| l.len() - l.trim_start().len();
    a[..indent(a)] == b[..indent(b)] && folded_eq(a, b)
}

fn folded_eq(a: &str, b: &str) -> bool {
    trimmed_folded_eq(a.trim(), b.trim())
}

/// The same for lines already trimmed; ASCII needs no folding, which is the common case.
fn trimmed_folded_eq(a: &str, b: &str) -> bool {
    a == b || (!(a.is_ascii() && b.is_ascii()) && fold_chars(a).eq(fold_chars(b)))
}

const FUZZY_LINE: f64 = 0.8;
const FUZZY_SHARE: f64 = 0.8;

/// A line prepared for fuzzy comparison: trimmed, folded, and summarised so that most
/// comparisons are settled without computing an edit distance.
struct Prepared {
    text: Vec<char>,
    /// Character counts in 32 buckets; half the histogram difference bounds the edit
    /// distance from below (bag distance), and hash collisions only weaken the bound.
    histogram: [u16; 32],
}

impl Prepared {
    fn new(line: &str) -> Self {
        let trimmed = line.trim();
        let text: Vec<char> = if trimmed.is_ascii() {
            trimmed.bytes().map(char::from).collect()
        } else {
            fold_chars(trimmed).collect()
        };
        let mut histogram = [0u16; 32];
        for c in &text {
            let bucket = (*c as u32 as usize).wrapping_mul(2_654_435_761) >> 27 & 31;
            histogram[bucket] = histogram[bucket].saturating_add(1);
        }
        Prepared { text, histogram }
    }
}

/// A cheap upper bound on `similarity`: the edit distance is at least the difference in
/// length, and at least the larger one-sided difference of the character bags.
fn similarity_bound(a: &Prepared, b: &Prepared) -> f64 {
    let longest = a.text.len().max(b.text.len());
    if longest == 0 {
        return 1.0;
    }
    let by_length = 1.0 - a.text.len().abs_diff(b.text.len()) as f64 / longest as f64;
    if by_length < FUZZY_LINE {
        return by_length;
    }
    let (mut more, mut less) = (0u32, 0u32);
    for (x, y) in a.histogram.iter().zip(&b.histogram) {
        let (x, y) = (u32::from(*x), u32::from(*y));
        more += x.saturating_sub(y);
        less += y.saturating_sub(x);
    }
    let floor = (more.max(less) as usize).max(a.text.len().abs_diff(b.text.len()));
    1.0 - floor as f64 / longest as f64
}

/// Normalised similarity of two prepared lines: 1 - Levenshtein distance / longer length.
/// Pairs that cannot reach `FUZZY_LINE` return 0 without the distance being computed.
fn similarity(a: &Prepared, b: &Prepared) -> f64 {
    if a.text == b.text {
        return 1.0;
    }
    if similarity_bound(a, b) < FUZZY_LINE {
        return 0.0;
    }
    let longest = a.text.len().max(b.text.len());
    let budget = ((1.0 - FUZZY_LINE) * longest as f64).floor() as usize;
    match bounded_levenshtein(&a.text, &b.text, budget) {
        Some(d) => 1.0 - d as f64 / longest as f64,
        None => 0.0,
    }
}

/// Levenshtein distance when it is at most `max`, computed only within the diagonal band
/// that can stay under it (Ukkonen); `None` when it is larger.
fn bounded_levenshtein(a: &[char], b: &[char], max: usize) -> Option<usize> {
    let (n, m) = (a.len(), b.len());
    if n.abs_diff(m) > max {
        return None;
    }
    let big = max + 1;
    let mut prev: Vec<usize> = (0..=m).map(|j| if j <= max { j } else { big }).collect();
    let mut cur = vec![big; m + 1];
    for i in 1..=n {
        let lo = i.saturating_sub(max).max(1);
        let hi = (i + max).min(m);
        cur.fill(big);
        if i <= max {
            cur[0] = i;
        }
        let mut row_min = cur[0];
        for j in lo..=hi {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let v = (prev[j - 1] + cost)
                .min(prev[j] + 1)
                .min(cur[j - 1] + 1)
                .min(big);
            cur[j] = v;
            row_min = row_min.min(v);
        }
        if row_min > max {
            return None;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    (prev[m] <= max).then_some(prev[m])
}

/// The start of the one window where the lines are similar enough; ties between equally good
/// windows are broken by the stated line, else refused.
fn fuzzy(
    file: &Lines<'_>,
    file_p: &[Prepared],
    wanted: &[&str],
    stated_line: Option<usize>,
) -> Result<Option<usize>, LocateError> {
    let m = wanted.len();
    let n = file.lines.len();
    if m == 0 || m > n {
        return Ok(None);
    }
    let need = (FUZZY_SHARE * m as f64).ceil() as usize;
    let allowed_misses = m - need;
    let want_p: Vec<Prepared> = wanted.iter().map(|l| Prepared::new(l)).collect();
    let best = best_windows(file_p, &want_p, allowed_misses);
    one_window(best, stated_line)
}

/// The starts of the windows with the best score. Every window gets an upper bound on its
/// score from the cheap per-line bounds; windows are then scored best bound first, and the
/// search stops once no bound can beat the best score found.
fn best_windows(file_p: &[Prepared], want_p: &[Prepared], allowed_misses: usize) -> Vec<usize> {
    let eps = 1e-9;
    let mut best: Vec<usize> = Vec::new();
    let mut best_score = 0.0;
    for (s, bound) in window_bounds(file_p, want_p, allowed_misses) {
        if bound < best_score - eps {
            break;
        }
        let Some(score) = window_score(&file_p[s..], want_p, allowed_misses) else {
            continue;
        };
        if score > best_score + eps {
            best_score = score;
            best = vec![s];
        } else if (score - best_score).abs() <= eps {
            best.push(s);
        }
    }
    best.sort_unstable();
    best
}

/// Each window that may have few enough misses, with the upper bound of its score, best
/// bound first.
fn window_bounds(
    file_p: &[Prepared],
    want_p: &[Prepared],
    allowed_misses: usize,
) -> Vec<(usize, f64)> {
    let (n, m) = (file_p.len(), want_p.len());
    let mut bounds: Vec<(usize, f64)> = Vec::with_capacity(n - m + 1);
    for s in 0..=n - m {
        let mut sum = 0.0;
        let mut misses = 0;
        for (f, w) in file_p[s..s + m].iter().zip(want_p) {
            let b = similarity_bound(f, w);
            if b < FUZZY_LINE {
                misses += 1;
                if misses > allowed_misses {
                    break;
                }
            }
            sum += b;
        }
        if misses <= allowed_misses {
            bounds.push((s, sum / m as f64));
        }
    }
    bounds.sort_by(|a, b| b.1.total_cmp(&a.1));
    bounds
}

/// The mean similarity of `window`'s first lines to the wanted lines, or `None` when more
/// of them miss than allowed.
fn window_score(window: &[Prepared], want_p: &[Prepared], allowed_misses: usize) -> Option<f64> {
    let mut misses = 0;
    let mut total = 0.0;
    for (f, w) in window.iter().zip(want_p) {
        let sim = similarity(f, w);
        if sim < FUZZY_LINE {
            misses += 1;
        }
        total += sim;
        if misses > allowed_misses {
            return None;
        }
    }
    Some(total / want_p.len() as f64)
}

/// The one best window, or the one nearest the stated line among equals; several equals
/// with none nearest are ambiguous.
fn one_window(best: Vec<usize>, stated_line: Option<usize>) -> Result<Option<usize>, LocateError> {
    match best.len() {
        0 => Ok(None),
        1 => Ok(Some(best[0])),
        _ => {
            if let Some(stated) = stated_line {
                let center = stated.saturating_sub(1);
                let nearest = best.iter().map(|s| s.abs_diff(center)).min().unwrap_or(0);
                let at: Vec<usize> = best
                    .iter()
                    .copied()
                    .filter(|s| s.abs_diff(center) == nearest)
                    .collect();
                if at.len() == 1 {
                    return Ok(Some(at[0]));
                }
            }
            Err(LocateError::Ambiguous {
                rule: Rule::Fuzzy,
                lines: best.iter().map(|s| s + 1).collect(),
            })
        }
    }
}

/// The lines most like the search text, for a refusal the model can act on: the window
/// starting at the line most similar to the first non-blank search line.
fn closest_lines(file: &Lines<'_>, file_p: &[Prepared], search: &str) -> Vec<NumberedLine> {
    let wanted = block_lines(search);
    let Some((offset, first)) = wanted
        .iter()
        .enumerate()
        .find(|(_, l)| !l.trim().is_empty())
    else {
        return Vec::new();
    };
    let first = Prepared::new(first);
    let best = file_p
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let longest = l.text.len().max(first.text.len()).max(1);
            let d = strsim::generic_levenshtein(&l.text, &first.text);
            (i, 1.0 - d as f64 / longest as f64)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let Some((at, score)) = best else {
        return Vec::new();
    };
    if score < 0.3 {
        return Vec::new();
    }
    let start = at.saturating_sub(offset);
    let end = (start + wanted.len().max(1)).min(file.lines.len());
    (start..end)
        .map(|i| NumberedLine {
            line: i + 1,
            text: file.lines[i].to_string(),
        })
        .collect()
}

/// A fragment's replacement, with the file's line ending.
fn adapt_eol(s: &str, eol: &str) -> String {
    let normalised = s.replace("\r\n", "\n");
    if eol == "\n" {
        normalised
    } else {
        normalised.replace('\n', eol)
    }
}

fn line_of(file: &Lines<'_>, byte: usize) -> usize {
    match file.starts.binary_search(&byte) {
        Ok(i) => i.min(file.lines.len().saturating_sub(1)),
        Err(i) => i - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str, search: &str, replace: &str, line: Option<usize>) -> Located {
        match locate(text, search, replace, line, &LocateOptions::default()) {
            Ok(Found::At(l)) => l,
            other => panic!("expected a location, got {other:?}"),
        }
    }

    fn apply(text: &str, l: &Located) -> String {
        format!(
            "{}{}{}",
            &text[..l.range.start],
            l.replacement,
            &text[l.range.end..]
        )
    }

    #[test]
    fn exact_substring_inside_a_line() {
        let text = "let a = foo(1);\n";
        let l = at(text, "foo(1)", "foo(2)", None);
        assert_eq!(l.rule, Rule::Exact);
        assert_eq!(apply(text, &l), "let a = foo(2);\n");
    }

    #[test]
    fn indentation_offset_reindents_the_replacement() {
        let text = "fn f() {\n        if x {\n            y();\n        }\n}\n";
        let l = at(
            text,
            "if x {\n    y();\n}\n",
            "if x {\n    z();\n    y();\n}\n",
            None,
        );
        assert_eq!(l.rule, Rule::Indentation);
        assert_eq!(
            apply(text, &l),
            "fn f() {\n        if x {\n            z();\n            y();\n        }\n}\n"
        );
    }

    #[test]
    fn a_search_indented_deeper_than_the_file_with_a_replace_at_the_file_s_indentation() {
        let text = "class A:\n    def add(self, a, b):\n        x = a\n        return x - b\n\n    def k(self):\n        return 1\n";
        // SEARCH two spaces deeper than the file, REPLACE as the file indents it.
        let search = "      def add(self, a, b):\n          x = a\n          return x - b\n";
        let replace =
            "    def add(self, a, b):\n        x = a\n        y = b\n        return x + y\n";
        let l = at(text, search, replace, None);
        assert_eq!(l.rule, Rule::Indentation);
        assert_eq!(
            apply(text, &l),
            "class A:\n    def add(self, a, b):\n        x = a\n        y = b\n        return x + y\n\n    def k(self):\n        return 1\n"
        );
        // The same REPLACE at the SEARCH's indentation moves with it.
        let shifted = "      def add(self, a, b):\n          x = a\n          y = b\n          return x + y\n";
        let l = at(text, search, shifted, None);
        assert_eq!(
            apply(text, &l),
            "class A:\n    def add(self, a, b):\n        x = a\n        y = b\n        return x + y\n\n    def k(self):\n        return 1\n"
        );
    }

    /// Lines a deeper SEARCH's REPLACE adds after a blank line, or under a block whose
    /// widths share a factor with the offset (10, 14, 18 for a unit of 4 two spaces deep),
    /// land at the file's indentation: they landed two or eight columns off.
    #[test]
    fn lines_added_under_a_deeper_search_land_at_the_file_s_indentation() {
        let text = "class K:\n    def f(a, b):\n        z = x + y\n\n        total += i\n";
        let search = "          z = x + y\n\n          total += i\n";
        let replace = "        z = x + y\n\n        new_line()\n        total += i\n";
        let l = at(text, search, replace, None);
        assert_eq!(
            apply(text, &l),
            "class K:\n    def f(a, b):\n        z = x + y\n\n        new_line()\n        total += i\n"
        );
        let text = "class K:\n    def f(a, b):\n        for i in r:\n            for j in r:\n                print(x)\n            total += i\n        print(x)\n";
        let search = "          for i in r:\n              for j in r:\n                  print(x)\n              total += i\n          print(x)\n";
        let replace = "        for i in r:\n            new_line()\n            for j in r:\n                print(x)\n            total += i\n        print(x)\n";
        let l = at(text, search, replace, None);
        assert_eq!(
            apply(text, &l),
            "class K:\n    def f(a, b):\n        for i in r:\n            new_line()\n            for j in r:\n                print(x)\n            total += i\n        print(x)\n"
        );
    }

    #[test]
    fn what_would_land_is_checked_against_the_replace() {
        assert!(landed_as_written("    a\n        b\n", &["a", "    b"]).is_ok());
        let lost = landed_as_written("    a\n", &["a", "    b"]).unwrap_err();
        assert!(
            lost.to_string().contains("line 2 would be nothing"),
            "{lost}"
        );
        let moved = landed_as_written("    a\n    b\n", &["a", "    b"]).unwrap_err();
        assert!(moved.to_string().contains("another depth"), "{moved}");
    }

    #[test]
    fn a_replace_half_at_each_indentation_is_refused() {
        let text = "def f():\n    a = 1\n    b = 2\n    return a\n";
        let search = "      a = 1\n      b = 2\n      return a\n";
        let replace = "      a = 1\n    b = 3\n    return a\n";
        let err = locate(text, search, replace, None, &LocateOptions::default()).unwrap_err();
        assert!(matches!(err, LocateError::Indentation(_)), "{err}");
    }

    #[test]
    fn crlf_files_keep_crlf() {
        let text = "a\r\nb\r\nc\r\n";
        let l = at(text, "b\n", "B1\nB2\n", None);
        assert_eq!(apply(text, &l), "a\r\nB1\r\nB2\r\nc\r\n");
    }

    #[test]
    fn ambiguity_is_refused_unless_the_stated_line_settles_it() {
        let text = "x = 1\ny = 2\nx = 1\n";
        let err = locate(text, "x = 1", "x = 3", None, &LocateOptions::default()).unwrap_err();
        assert!(
            matches!(err, LocateError::Ambiguous { ref lines, .. } if lines == &[1, 3]),
            "{err}"
        );
        let opts = LocateOptions { line_window: 1 };
        let l = match locate(text, "x = 1", "x = 3", Some(3), &opts).unwrap() {
            Found::At(l) => l,
            other => panic!("{other:?}"),
        };
        assert!(l.chosen_by_line);
        assert_eq!(apply(text, &l), "x = 1\ny = 2\nx = 3\n");
    }

    #[test]
    fn not_found_names_the_closest_lines() {
        let err = locate(
            "alpha\nbeta gamma\ndelta\n",
            "beta gamme zeta",
            "x",
            None,
            &LocateOptions::default(),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("    2 | beta gamma"), "{msg}");
    }

    #[test]
    fn bounded_levenshtein_agrees_with_the_full_distance_within_its_bound() {
        let words = [
            "",
            "a",
            "kitten",
            "sitting",
            "saturday",
            "sunday",
            "😀x",
            "x😀",
            "rosettacode",
            "raisethysword",
        ];
        for a in words {
            for b in words {
                let (ac, bc): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
                let full = strsim::levenshtein(a, b);
                for max in 0..8 {
                    let want = (full <= max).then_some(full);
                    assert_eq!(bounded_levenshtein(&ac, &bc, max), want, "{a} {b} {max}");
                }
            }
        }
    }

    #[test]
    fn deleting_whole_lines_leaves_no_blank_line() {
        let text = "a\nb\nc\n";
        assert_eq!(apply(text, &at(text, "b\n", "", None)), "a\nc\n");
        assert_eq!(apply(text, &at(text, "c\n", "", None)), "a\nb\n");
    }
}
