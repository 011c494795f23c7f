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

/// The first `HEAD_CHARS` and last `TAIL_CHARS` characters, joined by a line that says how
/// many characters of the middle were cut (`\n... [1234 characters cut] ...\n`), so a model
/// reading it knows the output is not whole.
pub fn truncate(text: &str) -> String {
    let count = text.chars().count();
    if count <= HEAD_CHARS + TAIL_CHARS {
        return text.to_string();
    }
    let head: String = text.chars().take(HEAD_CHARS).collect();
    let tail: String = text.chars().skip(count - TAIL_CHARS).collect();
    let cut = count - HEAD_CHARS - TAIL_CHARS;
    format!("{head}\n... [{cut} characters cut] ...\n{tail}")
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
}
