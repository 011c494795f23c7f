//! The tester's answer parser and the judge of its tests' runs, on pytest's own failures.

use super::*;
use crate::test_output::Location;

fn test(expect: &str) -> NewTest {
    NewTest {
        path: "tests/test_trailing.py".into(),
        name: "test_trailing_comma".into(),
        kind: TestKind::Example,
        reason: "the last field is dropped".into(),
        expect: expect.into(),
        content: "def test_trailing_comma(): ...\n".into(),
        check: None,
        counterexample: None,
    }
}

fn failing(test_id: &str, message: &str) -> Trial {
    Trial {
        passed: false,
        failures: vec![Failure {
            test_id: test_id.into(),
            location: Some(Location {
                file: "tests/test_trailing.py".into(),
                line: 4,
                column: None,
            }),
            message: message.into(),
            frames: Vec::new(),
        }],
        report: "output".into(),
        problem: None,
    }
}

fn passing() -> Trial {
    Trial {
        passed: true,
        failures: Vec::new(),
        report: "1 passed".into(),
        problem: None,
    }
}

const ASSERTION: &str = "AssertionError: assert ['a', 'b'] == ['a', 'b', '']";

#[test]
fn a_whole_answer_parses_and_missing_fields_are_named() {
    let answer = r#"Here: {"tests": [{"path": "./tests/test_x.py", "name": "test_x", "kind": "example", "reason": "r", "expect": "assert 1 == 2", "content": "def test_x():\n    assert 1 == 2\n"}]}"#;
    let tests = parse_tests(answer).unwrap();
    assert_eq!(tests[0].path, "tests/test_x.py");
    assert_eq!(tests[0].kind, TestKind::Example);
    let no_expect = r#"{"tests": [{"path": "t.py", "name": "t", "reason": "r", "content": "x"}]}"#;
    assert_eq!(
        parse_tests(no_expect),
        Err(TesterError::Missing {
            index: 0,
            key: "expect"
        })
    );
    assert_eq!(parse_tests(r#"{"tests": []}"#), Err(TesterError::NoTests));
    assert_eq!(parse_tests("no json"), Err(TesterError::NoJson));
    let outside = r#"{"tests": [{"path": "../t.py", "name": "t", "reason": "r", "expect": "e", "content": "x"}]}"#;
    assert!(matches!(
        parse_tests(outside),
        Err(TesterError::BadPath { .. })
    ));
    let kind = r#"{"tests": [{"path": "t.py", "name": "t", "kind": "fuzz", "reason": "r", "expect": "e", "content": "x"}]}"#;
    assert!(matches!(
        parse_tests(kind),
        Err(TesterError::BadKind { .. })
    ));
}

#[test]
fn a_test_that_fails_with_the_named_assertion_every_time_is_kept() {
    let t = [test("assert ['a', 'b'] == ['a', 'b', '']")];
    let runs = vec![failing("tests/test_trailing.py::test_trailing_comma", ASSERTION); 3];
    assert_eq!(judge(&t, &runs), Judgement::Fails(ASSERTION.into()));
    // Quotes and spacing do not matter.
    let t = [test("assert [\"a\",\"b\"] == [\"a\",\"b\",\"\"]")];
    assert!(matches!(judge(&t, &runs), Judgement::Fails(_)));
}

#[test]
fn a_passing_test_an_import_error_and_another_failure_are_refused() {
    let t = [test("assert ['a', 'b'] == ['a', 'b', '']")];
    let refused = |runs: Vec<Trial>| match judge(&t, &runs) {
        Judgement::Refused(why) => why,
        other => panic!("kept: {other:?}"),
    };
    assert!(refused(vec![passing(); 3]).contains("passes on the code with the bug"));
    let import = failing(
        "ERROR collecting tests/test_trailing.py",
        "ModuleNotFoundError: No module named 'csvlinex'",
    );
    let why = refused(vec![import; 3]);
    assert!(why.contains("import error"), "{why}");
    assert!(why.contains("output"), "the output goes back: {why}");
    let other = failing(
        "tests/test_trailing.py::test_trailing_comma",
        "ZeroDivisionError: division by zero",
    );
    assert!(refused(vec![other; 3]).contains("not with the failure you named"));
    // A failure in another test is not this one's.
    let elsewhere = Trial {
        failures: vec![Failure {
            test_id: "tests/test_other.py::test_y".into(),
            location: None,
            message: ASSERTION.into(),
            frames: Vec::new(),
        }],
        ..passing()
    };
    let elsewhere = Trial {
        passed: false,
        ..elsewhere
    };
    assert!(refused(vec![elsewhere; 3]).contains("passes on the code with the bug"));
}

#[test]
fn an_import_error_is_the_bug_when_the_tester_named_it() {
    let t = [test("ModuleNotFoundError: No module named 'csvlinex'")];
    let import = failing(
        "tests/test_trailing.py::test_trailing_comma",
        "ModuleNotFoundError: No module named 'csvlinex'",
    );
    assert!(matches!(judge(&t, &vec![import; 3]), Judgement::Fails(_)));
}

#[test]
fn runs_that_differ_are_flaky() {
    let t = [test("assert")];
    let fails = failing("tests/test_trailing.py::test_trailing_comma", ASSERTION);
    let runs = vec![fails.clone(), passing(), fails];
    match judge(&t, &runs) {
        Judgement::Refused(why) => assert!(why.contains("flaky"), "{why}"),
        other => panic!("kept: {other:?}"),
    }
}

#[test]
fn after_the_change_the_test_must_pass() {
    let t = [test("assert")];
    assert_eq!(passes_after(&t, &passing()), Ok(()));
    let still = failing("tests/test_trailing.py::test_trailing_comma", ASSERTION);
    let why = passes_after(&t, &still).unwrap_err();
    assert!(matches!(why, NotRegression::FailsAfter { .. }), "{why}");
    assert!(why.to_string().contains("after the change too"), "{why}");
}

#[test]
fn goals_that_only_ask_for_passing_tests_describe_no_bug() {
    assert!(!describes_bug("fix the failing tests"));
    assert!(!describes_bug("make the tests pass"));
    assert!(describes_bug(
        "fix: parse drops the last field when the line ends with a comma"
    ));
}

#[test]
fn the_filter_is_the_file_for_pytest_and_the_name_for_cargo() {
    assert_eq!(
        filter_of(&[test("x")]).as_deref(),
        Some("tests/test_trailing.py")
    );
    let mut rust = test("x");
    rust.path = "tests/parse.rs".into();
    assert_eq!(filter_of(&[rust]).as_deref(), Some("test_trailing_comma"));
    // A property and its example in one file: the file, or the name both names contain.
    let mut example = test("x");
    example.name = "test_trailing_comma_example".into();
    assert_eq!(
        filter_of(&[test("x"), example.clone()]).as_deref(),
        Some("tests/test_trailing.py")
    );
    let (mut p, mut e) = (test("x"), example);
    p.path = "tests/parse.rs".into();
    e.path = "tests/parse.rs".into();
    assert_eq!(filter_of(&[p, e]).as_deref(), Some("test_trailing_comma"));
    let mut other = test("b");
    other.path = "tests/test_other.py".into();
    other.name = "test_other".into();
    assert_eq!(filter_of(&[test("a"), other]), None);
}
