//! Finds where an edit belongs: a cascade of rules from exact to fuzzy, stopping at the first
//! rule that gives exactly one place, and refusing when a rule gives two or more.

use std::ops::Range;

use serde::Serialize;
use thiserror::Error;

/// The rule that located an edit, strictest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The search text occurs exactly once (line endings adapted to the file's).
    Exact,
    /// Lines match once trailing whitespace is ignored.
    TrailingWhitespace,
    /// Lines match but for a uniform indentation offset; the replacement is re-indented.
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

/// Where an edit goes: a byte range of the original text and the text that replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub range: Range<usize>,
    pub replacement: String,
    pub rule: Rule,
    /// Several places matched and the stated line picked the one near it.
    pub chosen_by_line: bool,
    /// 1-based first line of the match in the original text.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    At(Located),
    /// The search text is absent but the replacement is already where it would go.
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

    /// Byte range of lines `first..first + count`, without the last line's terminator.
    fn span(&self, first: usize, count: usize) -> Range<usize> {
        let start = self.starts[first];
        let last = first + count - 1;
        start..self.starts[last] + self.lines[last].len()
    }
}

/// The lines of a search or replace text: `\n`-separated, one final newline dropped.
fn block_lines(s: &str) -> Vec<&str> {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_suffix('\r').unwrap_or(s);
    s.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
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
        if let Some(located) = find(file, search, replace, stated_line, opts)? {
            return Ok(Found::At(located));
        }
        // Before anything fuzzy, see whether the change is already there: a retry after a
        // partial application must not apply it twice, and the old text is often similar
        // enough to the new one to match fuzzily.
        let replace_found = || {
            find(file, replace, replace, stated_line, opts)
                .ok()
                .flatten()
                .is_some()
        };
        if !replace.trim().is_empty() && replace.trim() != search.trim() && replace_found() {
            return Ok(Found::AlreadyApplied);
        }
        let wanted = block_lines(search);
        if let Some(s) = fuzzy(file, self.prepared(), &wanted, stated_line)? {
            let located = line_match(
                file,
                s,
                &wanted,
                &block_lines(replace),
                replace.is_empty(),
                Rule::Fuzzy,
                false,
            );
            if file.text[located.range.clone()] == located.replacement {
                return Ok(Found::AlreadyApplied);
            }
            return Ok(Found::At(located));
        }
        Err(LocateError::NotFound {
            closest: closest_lines(file, self.prepared(), search),
        })
    }
}

/// Runs the strict rules of the cascade (all but fuzzy). `Ok(None)` when none matched.
fn find(
    file: &Lines<'_>,
    search: &str,
    replace: &str,
    stated_line: Option<usize>,
    opts: &LocateOptions,
) -> Result<Option<Located>, LocateError> {
    // 1. Exact, as a substring, so a search for part of a line works too.
    let needle = adapt_eol(search.strip_suffix('\n').unwrap_or(search), file.eol);
    let hits: Vec<usize> =
        memchr::memmem::find_iter(file.text.as_bytes(), needle.as_bytes()).collect();
    let hit_lines: Vec<usize> = hits.iter().map(|&b| line_of(file, b)).collect();
    if let Some((index, by_line)) = pick(&hit_lines, stated_line, opts, Rule::Exact)? {
        let start = hits[index];
        let replacement = adapt_eol(replace.strip_suffix('\n').unwrap_or(replace), file.eol);
        let mut range = start..start + needle.len();
        // Deleting whole lines takes their line ending too, rather than leaving a blank line.
        if replacement.is_empty() && search.ends_with('\n') {
            range = extend_over_eol(file, range);
        }
        return Ok(Some(Located {
            range,
            replacement,
            rule: Rule::Exact,
            chosen_by_line: by_line,
            line: hit_lines[index] + 1,
        }));
    }

    let wanted = block_lines(search);
    let replacement_lines = block_lines(replace);
    let replace_is_empty = replace.is_empty();
    let line_rules: [(Rule, LineEq); 3] = [
        (Rule::TrailingWhitespace, |a, b| {
            a.trim_end() == b.trim_end()
        }),
        (Rule::Indentation, |a, b| a.trim() == b.trim()),
        (Rule::UnicodeFolded, folded_eq),
    ];
    // Every rule here is looser than the one before and none is looser than folding, so the
    // windows that match folded are the only candidates any of them can find.
    let wanted_trimmed: Vec<&str> = wanted.iter().map(|w| w.trim()).collect();
    let candidates: Vec<usize> = if wanted.len() > file.lines.len() {
        Vec::new()
    } else {
        (0..=file.lines.len() - wanted.len())
            .filter(|&s| {
                (0..wanted.len()).all(|j| trimmed_folded_eq(file.trimmed[s + j], wanted_trimmed[j]))
            })
            .collect()
    };
    for (rule, same) in line_rules {
        let starts: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&s| (0..wanted.len()).all(|j| same(file.lines[s + j], wanted[j])))
            .collect();
        // The indentation rule also needs one offset shared by every line.
        let starts: Vec<usize> = match rule {
            Rule::Indentation => starts
                .into_iter()
                .filter(|&s| indent_delta(&file.lines[s..s + wanted.len()], &wanted).is_some())
                .collect(),
            _ => starts,
        };
        if let Some((index, by_line)) = pick(&starts, stated_line, opts, rule)? {
            let s = starts[index];
            return Ok(Some(line_match(
                file,
                s,
                &wanted,
                &replacement_lines,
                replace_is_empty,
                rule,
                by_line,
            )));
        }
    }

    // 5. A line edit's text near its stated line, with runs of whitespace collapsed.
    if let Some(stated) = stated_line {
        let center = stated.saturating_sub(1);
        let lo = center.saturating_sub(opts.line_window);
        let hi = (center + opts.line_window + 1).min(file.lines.len());
        let collapse = |s: &str| fold(s).split_whitespace().collect::<Vec<_>>().join(" ");
        let wanted_c: Vec<String> = wanted.iter().map(|l| collapse(l)).collect();
        let starts: Vec<usize> = (lo..hi)
            .filter(|&s| s + wanted.len() <= file.lines.len())
            .filter(|&s| (0..wanted.len()).all(|j| collapse(file.lines[s + j]) == wanted_c[j]))
            .collect();
        if let Some((index, _)) = pick(&starts, None, opts, Rule::NearStatedLine)? {
            let s = starts[index];
            return Ok(Some(line_match(
                file,
                s,
                &wanted,
                &replacement_lines,
                replace_is_empty,
                Rule::NearStatedLine,
                false,
            )));
        }
    }

    Ok(None)
}

/// Whether a file line and a search line count as the same under a rule.
type LineEq = fn(&str, &str) -> bool;

/// Picks the one match, or resolves several with the stated line (only one of them within
/// the window around it); otherwise refuses.
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

/// Builds the located edit for a whole-line match at `s`, re-indenting the replacement by the
/// offset between the file's lines and the search lines.
fn line_match(
    file: &Lines<'_>,
    s: usize,
    wanted: &[&str],
    replacement: &[&str],
    replace_is_empty: bool,
    rule: Rule,
    chosen_by_line: bool,
) -> Located {
    let found = &file.lines[s..s + wanted.len()];
    let delta = indent_delta(found, wanted);
    let mut range = file.span(s, wanted.len());
    let text = if replace_is_empty {
        range = extend_over_eol(file, range);
        String::new()
    } else {
        replacement
            .iter()
            .map(|l| reindent(l, delta.as_ref()))
            .collect::<Vec<_>>()
            .join(file.eol)
    };
    Located {
        range,
        replacement: text,
        rule,
        chosen_by_line,
        line: s + 1,
    }
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

fn reindent(line: &str, delta: Option<&Indent>) -> String {
    if line.trim().is_empty() {
        return line.to_string();
    }
    match delta {
        Some(Indent::Add(extra)) => format!("{extra}{line}"),
        Some(Indent::Remove(extra)) => line
            .strip_prefix(extra.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| line.trim_start().to_string()),
        None => line.to_string(),
    }
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
///
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

    // Every window gets an upper bound on its score from the cheap per-line bounds; windows
    // are then scored best bound first, and the search stops once no bound can beat the best
    // score found.
    let mut bounds: Vec<(usize, f64)> = Vec::with_capacity(n - m + 1);
    for s in 0..=n - m {
        let mut sum = 0.0;
        let mut misses = 0;
        for j in 0..m {
            let b = similarity_bound(&file_p[s + j], &want_p[j]);
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

    let eps = 1e-9;
    let mut best: Vec<usize> = Vec::new();
    let mut best_score = 0.0;
    for (s, bound) in bounds {
        if bound < best_score - eps {
            break;
        }
        let mut misses = 0;
        let mut total = 0.0;
        let mut alive = true;
        for j in 0..m {
            let sim = similarity(&file_p[s + j], &want_p[j]);
            if sim < FUZZY_LINE {
                misses += 1;
            }
            total += sim;
            if misses > allowed_misses {
                alive = false;
                break;
            }
        }
        if !alive {
            continue;
        }
        let score = total / m as f64;
        if score > best_score + eps {
            best_score = score;
            best = vec![s];
        } else if (score - best_score).abs() <= eps {
            best.push(s);
        }
    }
    best.sort_unstable();
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

/// Widens a range that ends at a line's end to take that line ending too (or, on the last
/// line, the ending before it), so deleting whole lines leaves no blank line behind.
fn extend_over_eol(file: &Lines<'_>, range: Range<usize>) -> Range<usize> {
    let rest = &file.text[range.end..];
    if rest.starts_with("\r\n") {
        range.start..range.end + 2
    } else if rest.starts_with('\n') {
        range.start..range.end + 1
    } else if file.text[..range.start].ends_with("\r\n") && rest.is_empty() {
        range.start - 2..range.end
    } else if file.text[..range.start].ends_with('\n') && rest.is_empty() {
        range.start - 1..range.end
    } else {
        range
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
