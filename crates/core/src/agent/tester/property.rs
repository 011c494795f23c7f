//! Property tests' counterexamples: the shrunk input a failing Hypothesis or proptest
//! property prints, read from the runner's output, and the ordinary example test the loop
//! writes from it (deterministically, not the model), so the bug stays shown by a test that
//! needs no generator and runs the same way every time.

use super::{NewTest, TestKind, Trial};

/// The library a property test in this file needs: Hypothesis for Python, proptest for Rust.
pub fn library_of(test: &NewTest) -> Option<&'static str> {
    if test.path.ends_with(".py") {
        Some("hypothesis")
    } else if test.path.ends_with(".rs") {
        Some("proptest")
    } else {
        None
    }
}

/// The shrunk counterexample of `test`'s failure in `trial`, as the arguments to call its
/// body with: `s=','` (Hypothesis' keyword arguments, Python source) or `",", 0` (proptest's
/// values in order, Rust's Debug form).
pub fn counterexample(test: &NewTest, trial: &Trial) -> Option<String> {
    let texts = trial
        .failures
        .iter()
        .filter(|f| {
            f.test_id.ends_with(&test.name) || f.test_id.ends_with(&format!("::{}", test.name))
        })
        .map(|f| f.message.as_str());
    // The whole report holds every failing test's output: for proptest, whose line does not
    // name the test, only this test's own section is read, so another property's
    // counterexample is never taken for this one's.
    let report = if test.path.ends_with(".py") {
        Some(trial.report.as_str())
    } else {
        cargo_section(&trial.report, &test.name)
    };
    for text in texts.chain(report) {
        let found = if test.path.ends_with(".py") {
            hypothesis_args(text, &test.name)
        } else {
            proptest_args(text)
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Hypothesis: `Falsifying example: test_x(\n    s=',',\n)` (older versions) or `Failing
/// test case: test_x(\n    s=',',\n)` (newer ones); the keyword arguments, on one line.
fn hypothesis_args(text: &str, name: &str) -> Option<String> {
    let start = ["Falsifying example: ", "Failing test case: "]
        .iter()
        .filter_map(|mark| {
            let call = format!("{mark}{name}(");
            text.find(&call).map(|at| at + call.len())
        })
        .min()?;
    let rest = &text[start..];
    // The call ends at the `)` that closes it: the first line that is only `)`, or a `)` at
    // the end of the header line for a call on one line.
    let mut args = Vec::new();
    for line in rest.lines() {
        let t = line.trim();
        if t == ")" {
            let joined = args.join(" ");
            let joined = joined.trim().trim_end_matches(',').to_string();
            return (!joined.is_empty()).then_some(joined);
        }
        if args.is_empty() && t.ends_with(')') && !t.is_empty() {
            let inner = t.trim_end_matches(')').trim().trim_end_matches(',');
            return (!inner.is_empty()).then(|| inner.to_string());
        }
        if !t.is_empty() {
            args.push(t.to_string());
        }
    }
    None
}

/// The part of `cargo test`'s output that test `name` printed: from its `---- NAME stdout ----`
/// header (NAME maybe with its module path) to the next header or the `failures:` list.
fn cargo_section<'a>(report: &'a str, name: &str) -> Option<&'a str> {
    let mut start = None;
    let mut offset = 0;
    for line in report.split_inclusive('\n') {
        let t = line.trim();
        if let Some(at) = start {
            if t.starts_with("---- ") || t == "failures:" {
                return Some(&report[at..offset]);
            }
        } else if let Some(header) = t
            .strip_prefix("---- ")
            .and_then(|h| h.strip_suffix(" stdout ----"))
            && (header == name || header.ends_with(&format!("::{name}")))
        {
            start = Some(offset + line.len());
        }
        offset += line.len();
    }
    start.map(|at| &report[at..])
}

/// proptest: `minimal failing input: s = ",", n = 0`; the values, in order.
fn proptest_args(text: &str) -> Option<String> {
    const MARK: &str = "minimal failing input: ";
    let at = text.find(MARK)? + MARK.len();
    let line = text[at..].lines().next()?.trim();
    let values: Vec<&str> = split_top(line)
        .into_iter()
        .map(|part| match part.split_once(" = ") {
            Some((_, value)) => value.trim(),
            None => part.trim(),
        })
        .collect();
    (!values.is_empty() && values.iter().all(|v| !v.is_empty())).then(|| values.join(", "))
}

/// Splits `a = "x, y", b = [1, 2]` at the commas outside quotes and brackets.
fn split_top(line: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quoted, mut escaped, mut start) = (0i32, false, false, 0);
    for (i, c) in line.char_indices() {
        if quoted {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&line[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// Why a property's counterexample cannot be made into an example test.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExampleError {
    #[error("the property {0} names no `check` function to call with its counterexample")]
    NoCheck(String),
    #[error("property tests are Hypothesis (Python) or proptest (Rust), not {0}")]
    NotAProperty(String),
}

/// The example test for `property`'s counterexample `args`: the test file with a test
/// appended that calls the property's body with those values (Hypothesis'
/// `name.hypothesis.inner_test(...)`; for proptest the plain function the property calls,
/// its `check`). Its `expect` is the property's: the same values fail the same way.
pub fn example_of(property: &NewTest, args: &str) -> Result<NewTest, ExampleError> {
    let name = format!("{}_example", property.name);
    let test = if property.path.ends_with(".py") {
        format!(
            "\n\n\ndef {name}():\n    \"\"\"The shrunk counterexample of the property {}.\"\"\"\n    {}.hypothesis.inner_test({args})\n",
            property.name, property.name
        )
    } else if property.path.ends_with(".rs") {
        let Some(check) = &property.check else {
            return Err(ExampleError::NoCheck(property.name.clone()));
        };
        format!(
            "\n\n/// The shrunk counterexample of the property `{}`.\n#[test]\nfn {name}() {{\n    {check}({args});\n}}\n",
            property.name
        )
    } else {
        return Err(ExampleError::NotAProperty(property.path.clone()));
    };
    let content = format!("{}{test}", property.content.trim_end_matches('\n'));
    Ok(NewTest {
        path: property.path.clone(),
        name,
        kind: TestKind::Example,
        reason: format!(
            "the shrunk counterexample of the property {}: {args}",
            property.name
        ),
        // proptest's report prefixes the body's panic with `Test failed: `; the example's
        // panic is the body's alone.
        expect: property
            .expect
            .trim_start_matches("Test failed: ")
            .to_string(),
        content,
        check: None,
        counterexample: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_output::Failure;

    fn property(path: &str, name: &str, check: Option<&str>) -> NewTest {
        NewTest {
            path: path.into(),
            name: name.into(),
            kind: TestKind::Property,
            reason: "r".into(),
            expect: "assert".into(),
            content: "body\n".into(),
            check: check.map(str::to_string),
            counterexample: None,
        }
    }

    fn trial(id: &str, message: &str, report: &str) -> Trial {
        Trial {
            passed: false,
            failures: vec![Failure {
                test_id: id.into(),
                location: None,
                message: message.into(),
                frames: Vec::new(),
            }],
            report: report.into(),
            problem: None,
        }
    }

    #[test]
    fn hypothesis_counterexamples_old_and_new_are_read() {
        let p = property("tests/test_p.py", "test_round_trip", None);
        // Hypothesis 6.1xx, as pytest's `E` lines reach the parsed message.
        let new = "AssertionError: assert '' == ','\n\n- ,\nFailing test case: test_round_trip(\ns=',',\n)\nExplanation:";
        let t = trial("tests/test_p.py::test_round_trip", new, "");
        assert_eq!(counterexample(&p, &t).as_deref(), Some("s=','"));
        let old = "Falsifying example: test_round_trip(\n    s='a,',\n    n=0,\n)";
        let t = trial("tests/test_p.py::test_round_trip", "assert", old);
        assert_eq!(counterexample(&p, &t).as_deref(), Some("s='a,', n=0"));
        let none = trial("tests/test_p.py::test_round_trip", "assert 1 == 2", "");
        assert_eq!(counterexample(&p, &none), None);
    }

    #[test]
    fn proptest_counterexamples_are_read_in_order() {
        let p = property("tests/prop.rs", "round_trip", Some("check"));
        let out = "Test failed: assertion failed.\nminimal failing input: s = \"a, b\", v = [1, 2], n = 0\n\tsuccesses: 5";
        let t = trial("round_trip", out, "");
        assert_eq!(
            counterexample(&p, &t).as_deref(),
            Some("\"a, b\", [1, 2], 0")
        );
    }

    #[test]
    fn in_cargo_s_report_only_the_property_s_own_section_is_read() {
        let p = property("tests/prop.rs", "round_trip", Some("check"));
        // Two failing properties; the parsed failure of round_trip holds no counterexample.
        let report = "running 2 tests\n\nfailures:\n\n---- other stdout ----\nminimal failing input: s = \"x\"\n\n---- prop::round_trip stdout ----\nTest failed: assertion failed.\nminimal failing input: s = \",\"\n\nfailures:\n    other\n    prop::round_trip\n";
        let t = trial("prop::round_trip", "assertion failed", report);
        assert_eq!(counterexample(&p, &t).as_deref(), Some("\",\""));
        let q = property("tests/prop.rs", "third", Some("check"));
        assert_eq!(counterexample(&q, &t), None);
    }

    #[test]
    fn the_example_calls_the_property_body_with_the_values() {
        let p = property("tests/test_p.py", "test_round_trip", None);
        let e = example_of(&p, "s=','").unwrap();
        assert_eq!(e.name, "test_round_trip_example");
        assert_eq!(e.kind, TestKind::Example);
        assert!(
            e.content
                .starts_with("body\n\n\ndef test_round_trip_example():")
        );
        assert!(
            e.content
                .contains("test_round_trip.hypothesis.inner_test(s=',')")
        );
        let p = property("tests/prop.rs", "round_trip", Some("check_round_trip"));
        let e = example_of(&p, "\",\", 0").unwrap();
        assert!(
            e.content
                .contains("#[test]\nfn round_trip_example() {\n    check_round_trip(\",\", 0);\n}")
        );
        let mut p = property("tests/prop.rs", "round_trip", Some("check_round_trip"));
        p.expect = "Test failed: assertion `left == right` failed".into();
        let e = example_of(&p, "\",\"").unwrap();
        assert_eq!(e.expect, "assertion `left == right` failed");
        let p = property("tests/prop.rs", "round_trip", None);
        let why = example_of(&p, "1").unwrap_err();
        assert_eq!(why, ExampleError::NoCheck("round_trip".into()));
        assert!(why.to_string().contains("check"), "{why}");
    }
}
