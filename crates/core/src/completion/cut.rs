//! The model's answer cut to what belongs at the cursor: up to a stop word; a single line
//! when the cursor is mid-line and a block on an empty line; no text the suffix already
//! holds (a repeated closing bracket, the suffix's next line written again); no line that
//! leaves the cursor's indentation; no indentation typed twice; no trailing whitespace.

/// What kind of suggestion fits at the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Text follows the cursor on its line: the suggestion must end on this line.
    Line,
    /// The rest of the line is empty: the suggestion may run over several lines.
    Block,
}

impl Shape {
    pub fn at(suffix: &str) -> Shape {
        let rest = suffix.split('\n').next().unwrap_or("");
        if rest.trim().is_empty() {
            Shape::Block
        } else {
            Shape::Line
        }
    }
}

/// The suggestion to show for the model's `answer` at a cursor between `prefix` and
/// `suffix`, or `None` when nothing of it is worth showing.
pub fn finish(answer: &str, prefix: &str, suffix: &str, stops: &[&str]) -> Option<String> {
    let mut text = answer;
    for stop in stops {
        if let Some(i) = text.find(stop) {
            text = &text[..i];
        }
    }
    let line_before = prefix.rsplit('\n').next().unwrap_or("");
    let rest_of_line = suffix.split('\n').next().unwrap_or("");
    let mut text = text.replace("\r\n", "\n");
    // A model that repeats the indentation already typed would indent the line twice.
    if !line_before.is_empty()
        && line_before.trim().is_empty()
        && let Some(rest) = text.strip_prefix(line_before)
    {
        text = rest.to_string();
    }
    let out = match Shape::at(suffix) {
        Shape::Line => {
            let first = text.split('\n').next().unwrap_or("").trim_end().to_string();
            without_rest_of_line(&first, line_before, rest_of_line)
        }
        Shape::Block => block(&text, line_before, suffix),
    };
    let out = out.trim_end().to_string();
    (!out.trim().is_empty()).then_some(out)
}

/// A one-line answer without the part the rest of the line already holds: the whole rest
/// written again, or closing brackets the line would then have too many of.
fn without_rest_of_line(answer: &str, line_before: &str, rest: &str) -> String {
    let rest = rest.trim_end();
    if rest.trim().len() >= 2
        && let Some(kept) = answer.strip_suffix(rest)
    {
        return kept.to_string();
    }
    if balance(&format!("{line_before}{answer}{rest}")) >= 0 {
        return answer.to_string();
    }
    // The longest end of the answer that the rest begins with, when taking it away leaves
    // the brackets balanced.
    for start in answer.char_indices().map(|(i, _)| i) {
        let tail = &answer[start..];
        if !tail.is_empty()
            && rest.starts_with(tail)
            && balance(&format!("{line_before}{}{rest}", &answer[..start])) >= 0
        {
            return answer[..start].to_string();
        }
    }
    answer.to_string()
}

/// Opening minus closing brackets (negative: a closer too many).
fn balance(s: &str) -> i64 {
    s.chars()
        .map(|c| match c {
            '(' | '[' | '{' => 1,
            ')' | ']' | '}' => -1,
            _ => 0,
        })
        .sum()
}

/// A block answer up to the line the suffix takes over at (its next non-blank line written
/// again) or the first line indented less than the cursor's line (it leaves the block).
fn block(text: &str, line_before: &str, suffix: &str) -> String {
    let next = suffix
        .split('\n')
        .skip(1)
        .map(str::trim_end)
        .find(|l| !l.trim().is_empty());
    let base = indent(line_before);
    let blank_line = line_before.trim().is_empty();
    let mut lines: Vec<&str> = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let line = line.trim_end();
        if i > 0 && !line.is_empty() {
            if Some(line) == next {
                break;
            }
            if blank_line && indent(line) < base {
                break;
            }
        }
        lines.push(line);
    }
    lines.join("\n")
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(answer: &str, prefix: &str, suffix: &str, want: Option<&str>) {
        assert_eq!(
            finish(answer, prefix, suffix, &["<|endoftext|>"]).as_deref(),
            want,
            "answer {answer:?} between {prefix:?} and {suffix:?}"
        );
    }

    #[test]
    fn mid_line_gives_one_line_without_the_closing_bracket_twice() {
        check("\"hi\")\nprint(2)", "print(", ")\n", Some("\"hi\""));
        // A call the answer closes itself keeps its own bracket.
        check("bar()", "foo(", ")\n", Some("bar()"));
        check("bar())", "foo(", ")\n", Some("bar()"));
        // The whole rest of the line written again goes.
        check("a, b): pass", "def f(", "a, b): pass\n", None);
        check("x, y) -> int:", "def f(", ") -> int:\n", Some("x, y"));
    }

    #[test]
    fn a_block_on_an_empty_line_stops_where_the_suffix_takes_over() {
        check(
            "    total += x\n    return total\n}\nfn next() {}",
            "fn sum() {\n",
            "\n}\n",
            Some("    total += x\n    return total"),
        );
        // The indentation the user typed is not written twice.
        check(
            "    return a + b\n",
            "def add(a, b):\n    ",
            "\n",
            Some("return a + b"),
        );
        // A line indented less than the cursor's leaves the block.
        check(
            "return a + b\n\ndef other():\n    pass",
            "def add(a, b):\n    ",
            "\n",
            Some("return a + b"),
        );
    }

    #[test]
    fn stop_words_and_trailing_whitespace_are_cut() {
        check(
            "x = 1   \ny = 2  <|endoftext|>junk",
            "",
            "",
            Some("x = 1\ny = 2"),
        );
        check("   <|endoftext|>", "", "", None);
        check("", "a", "", None);
    }

    proptest! {
        /// Whatever the model says, the suggestion has no trailing whitespace, no stop word,
        /// and one line when text follows the cursor.
        #[test]
        fn the_cut_always_keeps_its_promises(
            answer in "[a-z(){} \\n]{0,60}",
            before in "[a-z( ]{0,10}",
            rest in "[a-z) ]{0,6}",
        ) {
            let suffix = format!("{rest}\nmore\n");
            if let Some(out) = finish(&answer, &before, &suffix, &["{{"]) {
                prop_assert!(!out.contains("{{"));
                prop_assert!(out.lines().all(|l| l == l.trim_end()));
                prop_assert!(!out.trim().is_empty());
                if Shape::at(&suffix) == Shape::Line {
                    prop_assert!(!out.contains('\n'));
                }
            }
        }

        /// A clean block followed by the suffix written again gives back the block alone.
        #[test]
        fn a_repeated_suffix_is_cut_off(
            body in proptest::collection::vec("[a-z]{1,8}( [a-z]{1,8}){0,3}", 1..5),
            tail in "[A-Z]{3,8}",
        ) {
            let block = body.join("\n");
            let suffix = format!("\n{tail}\nend\n");
            let answer = format!("{block}\n{tail}\nend\n");
            prop_assert_eq!(finish(&answer, "x\n", &suffix, &[]), Some(block));
        }
    }
}
