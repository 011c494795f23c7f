//! Properties of the edit engine on generated files and model edits: a located edit never
//! changes a byte outside the lines the model removed or added, and the lines it keeps stay
//! the file's own byte for byte, whatever the model's copy of them looked like (trailing
//! spaces, typographic quotes).

use agent_ls_core::edit::locate::{Found, LocateOptions, locate};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// What the model does with one line of the window it copied.
#[derive(Debug, Clone)]
enum LineOp {
    Keep,
    Delete,
    Change,
}

/// How the model's copy of a line differs from the file's.
#[derive(Debug, Clone, Copy)]
enum Copy {
    Same,
    TrailingSpaces,
    CurlyQuotes,
}

fn file_line(i: usize) -> String {
    let indent = ["", "    ", "        "][i % 3];
    if i.is_multiple_of(4) {
        format!("{indent}call(\"arg {i}\")")
    } else {
        format!("{indent}value_{i} = compute({i})")
    }
}

fn copied(line: &str, how: Copy) -> String {
    match how {
        Copy::Same => line.to_string(),
        Copy::TrailingSpaces => format!("{line}  "),
        Copy::CurlyQuotes => {
            let mut open = true;
            line.chars()
                .map(|c| {
                    if c == '"' {
                        open = !open;
                        if open { '\u{201D}' } else { '\u{201C}' }
                    } else {
                        c
                    }
                })
                .collect()
        }
    }
}

proptest! {
    // Past failures are kept beside this file (edit_properties.proptest-regressions): proptest's
    // default would look for them under tests/proptest-regressions/, since tests/it has a main.rs.
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: Some(Box::new(
            FileFailurePersistence::WithSource("proptest-regressions")
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn an_edit_changes_only_the_lines_the_model_removed_or_added(
        n in 8usize..40,
        start in 0usize..30,
        ops in prop::collection::vec((0u8..3, 0u8..3, any::<bool>()), 2..7),
        crlf in any::<bool>(),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let lines: Vec<String> = (0..n).map(file_line).collect();
        let s = start % (n - 1);
        let m = ops.len().min(n - s);
        prop_assume!(m >= 2);
        let text: String = lines.iter().map(|l| format!("{l}{eol}")).collect();
        let mut search = String::new();
        let mut replace = String::new();
        // The file after the edit, built from what the model did to each line.
        let mut expected: Vec<String> = lines[..s].to_vec();
        for (k, (op, how, insert)) in ops.iter().take(m).enumerate() {
            let file = &lines[s + k];
            let how = [Copy::Same, Copy::TrailingSpaces, Copy::CurlyQuotes][*how as usize];
            let copy = copied(file, how);
            search.push_str(&format!("{copy}\n"));
            match [LineOp::Keep, LineOp::Delete, LineOp::Change][*op as usize] {
                LineOp::Keep => {
                    replace.push_str(&format!("{copy}\n"));
                    expected.push(file.clone());
                }
                LineOp::Delete => {}
                LineOp::Change => {
                    let new = format!("{} # changed", file.trim_end());
                    replace.push_str(&format!("{new}\n"));
                    expected.push(new);
                }
            }
            if *insert {
                let indent = &file[..file.len() - file.trim_start().len()];
                let new = format!("{indent}added_{k}()");
                replace.push_str(&format!("{new}\n"));
                expected.push(new);
            }
        }
        expected.extend(lines[s + m..].iter().cloned());
        let expected: String = expected.iter().map(|l| format!("{l}{eol}")).collect();
        match locate(&text, &search, &replace, None, &LocateOptions::default()) {
            Ok(Found::At(l)) => {
                let got = format!("{}{}{}", &text[..l.range.start], l.replacement, &text[l.range.end..]);
                prop_assert_eq!(got, expected, "rule {:?}", l.rule);
            }
            Ok(Found::AlreadyApplied) => prop_assert_eq!(&text, &expected),
            Err(e) => {
                // Only an edit that changes a line the rule cannot vouch for may be refused.
                prop_assert!(
                    matches!(e, agent_ls_core::edit::LocateError::ChangedLineDiffers { .. }),
                    "{}", e
                );
            }
        }
    }
}
