//! The texts of a test run: what the user reads (the output as the tool wrote it, cut to its
//! head and tail) and what a model reads (the same with timings, process ids and temporary
//! paths replaced, so two runs of the same failure compare equal).

use std::sync::LazyLock;

use regex::Regex;

/// Characters kept from the start and from the end of the output.
pub const HEAD_CHARS: usize = 2_500;
pub const TAIL_CHARS: usize = 1_000;

static VOLATILE: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let r = |p: &str| Regex::new(p).expect("valid pattern");
    vec![
        (r(r"thread '([^']*)' \(\d+\)"), "thread '$1'"),
        (r(r"(duration_ms:?\s*)\d+(\.\d+)?"), "${1}<time>"),
        (
            r(r"\b\d+(\.\d+)?\s?(ms|µs|us|ns|s|sec|secs|seconds)\b"),
            "<time>",
        ),
        (r(r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b"), "<clock>"),
        (
            r(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
            "<id>",
        ),
        (r(r"/tmp/[^\s:'\x22)]+"), "<tmp>"),
        (r(r"0x[0-9a-f]{6,}"), "<addr>"),
    ]
});

/// Replaces what changes between runs of the same failure; `root` becomes `.`.
pub fn normalize(output: &str, root: &str) -> String {
    let mut text = if root.len() > 1 {
        output.replace(root, ".")
    } else {
        output.to_string()
    };
    for (pattern, with) in VOLATILE.iter() {
        text = pattern.replace_all(&text, *with).into_owned();
    }
    text
}

/// Characters of the cut middle kept for the failing assertions found there: a long run's
/// third failure explains itself as well as its first, and a long assertion diff keeps its
/// middle.
pub const ASSERTION_CHARS: usize = 6_000;

/// Lines longer than this in a block are not what an assertion says; a block keeps at most
/// `BLOCK_LINES` lines.
const BLOCK_LINES: usize = 40;

/// A line that says what a failing test expected or found, in the runners' words: pytest's
/// `E` lines and `>` source line, unittest's and Node's `AssertionError`, Rust's panics and
/// `left`/`right`, Go's `--- FAIL` and testify's `Error:`, TAP's `not ok`, JUnit-style
/// `expected:`/`but was`.
static ASSERTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)^(E\s|>\s+assert\b|\s*(AssertionError|assert\w*Error)\b|.*\bAssertionError\b|.*panicked\ at\b|\s*(left|right|expected|actual|Expected|Actual|Received)\b\s*:|.*\bassertion\b.*\bfailed\b|---\ FAIL\b|\s*Error(\ Trace)?:|\s*not\ ok\b|.*\bbut\ was\b|FAIL:\ )",
    )
    .expect("valid pattern")
});

/// The first `HEAD_CHARS` and last `TAIL_CHARS` characters, joined by a line that says how
/// many characters of the middle were cut (`\n... [1234 characters cut] ...\n`), so a model
/// reading it knows the output is not whole. The failing assertions of the middle are kept
/// whole between them, up to `ASSERTION_CHARS`, each cut said likewise.
pub fn truncate(text: &str) -> String {
    let count = text.chars().count();
    if count <= HEAD_CHARS + TAIL_CHARS {
        return text.to_string();
    }
    let head_end = text
        .char_indices()
        .nth(HEAD_CHARS)
        .map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(count - TAIL_CHARS)
        .map_or(text.len(), |(i, _)| i);
    let middle = &text[head_end..tail_start];
    let mut out = text[..head_end].to_string();
    let mut at = 0;
    for (start, end) in assertion_blocks(middle) {
        out.push_str(&cut_marker(&middle[at..start]));
        out.push_str(&middle[start..end]);
        at = end;
    }
    out.push_str(&cut_marker(&middle[at..]));
    out.push_str(&text[tail_start..]);
    out
}

/// `\n... [N characters cut] ...\n` for a stretch of `cut` (nothing when it is empty).
fn cut_marker(cut: &str) -> String {
    match cut.chars().count() {
        0 => String::new(),
        n => format!("\n... [{n} characters cut] ...\n"),
    }
}

/// The byte ranges of `middle` to keep: each run of lines around an assertion line (the three
/// lines before it, and on to the next blank line), whole lines, in order, at most
/// `ASSERTION_CHARS` in all; a block that does not fit is left out whole rather than cut.
fn assertion_blocks(middle: &str) -> Vec<(usize, usize)> {
    // Whole lines only: the first and last partial lines of the middle are not looked at.
    let mut lines: Vec<(usize, &str)> = Vec::new();
    let mut offset = 0;
    for line in middle.split_inclusive('\n') {
        lines.push((offset, line));
        offset += line.len();
    }
    let whole = |i: usize| i > 0 && lines[i].1.ends_with('\n');
    let mut blocks: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !whole(i) || !ASSERTION.is_match(lines[i].1) {
            i += 1;
            continue;
        }
        let first = (1..=i)
            .rev()
            .take(4)
            .take_while(|&j| whole(j) && !lines[j].1.trim().is_empty())
            .last()
            .unwrap_or(i);
        let mut last = i;
        while last + 1 < lines.len()
            && whole(last + 1)
            && !lines[last + 1].1.trim().is_empty()
            && last + 1 - first < BLOCK_LINES
        {
            last += 1;
        }
        let (start, end) = (lines[first].0, lines[last].0 + lines[last].1.len());
        match blocks.last_mut() {
            Some(prev) if prev.1 >= start => prev.1 = end,
            _ => blocks.push((start, end)),
        }
        i = last + 1;
    }
    let mut kept = 0;
    blocks
        .into_iter()
        .filter(|(start, end)| {
            let n = middle[*start..*end].chars().count();
            let fits = kept + n <= ASSERTION_CHARS;
            if fits {
                kept += n;
            }
            fits
        })
        .collect()
}

/// What a model reads of a test run: normalised, then cut. Normalised because the prompts that
/// quote it are the response cache's key (docs/cache.md) and the failure's identity when no
/// test is named (the fingerprint): a rerun of the same failure must read the same, or every
/// rerun misses the cache. Rewriting only the key would not do: the key is the prompt whole,
/// whose quoted files may hold durations and `/tmp` paths that must not compare equal. The
/// model loses little: it cannot open a temporary path (its tools read the workspace), and a
/// duration rarely decides a fix; a timing assertion's own numbers without a unit stay.
pub fn model_report(output: &str, root: &str) -> String {
    truncate(&normalize(output, root))
}

/// What the user reads of a test run (the CLI, the editors' and ACP's texts): the output as
/// the tool wrote it, its timings and temporary paths too, cut to its head and tail.
pub fn user_report(output: &str) -> String {
    truncate(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_the_same_failure_compare_equal() {
        let a = "thread 'tests::adds' (29794) panicked at src/lib.rs:15:9:\ntest result: FAILED. finished in 0.13s\n/tmp/.tmpAb12/x.rs failed [   0.109s]\nduration_ms: 2.758883\nStart at  01:47:31";
        let b = "thread 'tests::adds' (31002) panicked at src/lib.rs:15:9:\ntest result: FAILED. finished in 0.02s\n/tmp/.tmpZZ99/x.rs failed [   1.5s]\nduration_ms: 9.1\nStart at  11:02:59";
        assert_eq!(normalize(a, "/ws"), normalize(b, "/ws"));
        assert!(
            normalize(a, "/ws").contains("src/lib.rs:15:9"),
            "line numbers stay"
        );
    }

    #[test]
    fn the_user_reads_timings_and_temporary_paths_as_written() {
        let out = "1 failed in 0.13s\n/tmp/.tmpAb12/x.py failed";
        assert_eq!(user_report(out), out);
        assert!(model_report(out, "/ws").contains("<time>"));
        assert!(model_report(out, "/ws").contains("<tmp>"));
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        let text: String = (0..5000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let cut = truncate(&text);
        let marker = "\n... [1500 characters cut] ...\n";
        assert_eq!(
            cut.chars().count(),
            HEAD_CHARS + TAIL_CHARS + marker.chars().count()
        );
        assert!(cut.starts_with(&text[..HEAD_CHARS]));
        assert!(cut.ends_with(&text[text.len() - TAIL_CHARS..]));
        assert!(cut.contains(marker), "{cut}");
        assert_eq!(truncate("short"), "short");
    }

    #[test]
    fn a_failing_assertion_in_the_cut_middle_is_kept_whole() {
        let noise = |n: usize| -> String {
            (0..n)
                .map(|i| format!("tests/test_mod_{i}.py::test_case PASSED\n"))
                .collect()
        };
        let failure = "________ test_total ________\n\n    def test_total():\n>       assert total([1, 2]) == 3\nE       assert 4 == 3\nE        +  where 4 = total([1, 2])\n\ntests/test_cart.py:12: AssertionError\n";
        let text = format!("{}{failure}{}", noise(200), noise(200));
        let cut = truncate(&text);
        assert!(cut.contains(">       assert total([1, 2]) == 3\nE       assert 4 == 3\nE        +  where 4 = total([1, 2])\n"), "{cut}");
        assert!(
            cut.contains("tests/test_cart.py:12: AssertionError"),
            "{cut}"
        );
        // Said where the middle was cut, around the kept block.
        assert_eq!(cut.matches("characters cut] ...").count(), 3, "{cut}");
        assert!(cut.len() < text.len() / 2);
        // The same output read twice is cut the same way (the response cache's key).
        assert_eq!(truncate(&text), cut);
    }

    #[test]
    fn assertions_are_kept_up_to_their_budget_and_never_cut_inside() {
        let block = |i: usize| {
            format!(
                "thread 't{i}' panicked at src/lib.rs:{i}:5:\nassertion `left == right` failed\n  left: {}\n right: 0\n\n",
                "9".repeat(300)
            )
        };
        let text = format!(
            "{}{}{}",
            "x\n".repeat(3000),
            (0..60).map(block).collect::<String>(),
            "y\n".repeat(3000)
        );
        let cut = truncate(&text);
        let kept = cut.matches("assertion `left == right` failed").count();
        assert!(kept > 3 && kept < 60, "{kept}");
        // Every block kept is whole: each panic line has its left and right lines.
        assert_eq!(cut.matches(" right: 0").count(), kept);
        assert!(cut.chars().count() <= HEAD_CHARS + TAIL_CHARS + ASSERTION_CHARS + 64 * (kept + 1));
    }
}
