//! Test-output parsers on recorded real outputs (tests/fixtures/outputs): each failure's test
//! id, file, line and message. tests/it/runners.rs produces the same kinds of output afresh from
//! the real tools on the fixture projects.

use std::path::Path;

use agent_ls_core::test_output::parse::{Context, Format, Location, Parsed, parse};

/// The fixture projects of this checkout, wherever it sits.
fn projects() -> String {
    format!("{}/tests/fixtures/projects", env!("CARGO_MANIFEST_DIR"))
}

/// A recorded output, with the folder it was recorded in (written `@PROJECTS@` in the file)
/// made this checkout's fixture projects, as the tool would print it here.
fn recorded(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/outputs/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .replace("@PROJECTS@", &projects())
}

fn parsed(name: &str, project: &str) -> (Format, Parsed) {
    let text = recorded(name);
    let root = format!("{}/{project}", projects());
    parse(
        &text,
        &Context {
            root: Path::new(&root),
            go_module: Some("example.com/fixture"),
        },
    )
}

fn at(file: &str, line: u32, column: Option<u32>) -> Option<Location> {
    Some(Location {
        file: file.into(),
        line,
        column,
    })
}

/// (test id, location, a piece of the message) for each failure, in order.
fn check(
    name: &str,
    project: &str,
    format: Format,
    counts: (Option<u32>, Option<u32>),
    want: &[(&str, Option<Location>, &str)],
) {
    let (f, p) = parsed(name, project);
    assert_eq!(f, format, "{name}");
    assert_eq!((p.passed, p.failed), counts, "{name} counts");
    assert_eq!(p.failures.len(), want.len(), "{name}: {:#?}", p.failures);
    for (got, (id, loc, msg)) in p.failures.iter().zip(want) {
        assert_eq!(got.test_id, *id, "{name}");
        assert_eq!(&got.location, loc, "{name} {id}");
        assert!(
            got.message.contains(msg),
            "{name} {id}: {:?} lacks {msg:?}",
            got.message
        );
    }
}

#[test]
fn cargo_test_panics_and_assert_eq() {
    check(
        "cargo.txt",
        "rust",
        Format::Libtest,
        (Some(1), Some(2)),
        &[
            (
                "tests::adds",
                at("src/lib.rs", 15, Some(9)),
                "left: 0\nright: 4",
            ),
            (
                "tests::panics_with_a_message",
                at("src/lib.rs", 27, Some(13)),
                "the list was empty",
            ),
        ],
    );
}

#[test]
fn cargo_compile_errors() {
    check(
        "cargo-compile.txt",
        "rust",
        Format::Libtest,
        (None, None),
        &[(
            "compile E0277",
            at("src/lib.rs", 2, Some(7)),
            "cannot subtract `&str` from `i32`",
        )],
    );
}

#[test]
fn cargo_nextest() {
    check(
        "nextest.txt",
        "rust",
        Format::Nextest,
        (Some(1), Some(2)),
        &[
            (
                "tests::adds",
                at("src/lib.rs", 15, Some(9)),
                "assertion `left == right` failed",
            ),
            (
                "tests::panics_with_a_message",
                at("src/lib.rs", 27, Some(13)),
                "the list was empty",
            ),
        ],
    );
}

#[test]
fn pytest_default_tracebacks_and_assertion_rewriting() {
    check(
        "pytest.txt",
        "python",
        Format::Pytest,
        (Some(1), Some(3)),
        &[
            (
                "tests/test_calc.py::test_add",
                at("tests/test_calc.py", 5, None),
                "assert 0 == 4",
            ),
            (
                "tests/test_calc.py::test_divide_by_zero",
                at("tests/test_calc.py", 13, None),
                "ZeroDivisionError: division by zero",
            ),
            (
                "tests/test_calc.py::test_compare_lists",
                at("tests/test_calc.py", 17, None),
                "At index 2 diff: 3 != 4",
            ),
        ],
    );
    let (_, p) = parsed("pytest.txt", "python");
    assert_eq!(
        p.failures[1].frames,
        vec![Location {
            file: "calc.py".into(),
            line: 6,
            column: None
        }]
    );
}

#[test]
fn pytest_short_tracebacks() {
    check(
        "pytest-short.txt",
        "python",
        Format::Pytest,
        (Some(1), Some(3)),
        &[
            (
                "tests/test_calc.py::test_add",
                at("tests/test_calc.py", 5, None),
                "assert 0 == 4",
            ),
            (
                "tests/test_calc.py::test_divide_by_zero",
                at("tests/test_calc.py", 13, None),
                "ZeroDivisionError",
            ),
            (
                "tests/test_calc.py::test_compare_lists",
                at("tests/test_calc.py", 17, None),
                "assert [1, 2, 3] == [1, 2, 4]",
            ),
        ],
    );
}

#[test]
fn pytest_collection_error_with_a_syntax_error() {
    check(
        "pytest-collection.txt",
        "python_broken",
        Format::Pytest,
        (Some(0), Some(1)),
        &[(
            "tests/test_broken.py",
            at("tests/test_broken.py", 1, None),
            "SyntaxError: invalid syntax",
        )],
    );
}

#[test]
fn python_unittest() {
    check(
        "unittest.txt",
        "python_unittest",
        Format::Unittest,
        (Some(1), Some(2)),
        &[
            (
                "test_shapes.ShapeTests.test_error",
                at("test_shapes.py", 13, None),
                "ValueError: bad shape",
            ),
            (
                "test_shapes.ShapeTests.test_area",
                at("test_shapes.py", 10, None),
                "AssertionError: 5 != 6",
            ),
        ],
    );
}

#[test]
fn go_test_failures_and_build_errors() {
    check(
        "go.txt",
        "go",
        Format::GoTest,
        (None, Some(1)),
        &[(
            "TestAdd",
            at("add_test.go", 7, None),
            "Add(2, 2) = 0, want 4",
        )],
    );
    check(
        "go-build.txt",
        "go",
        Format::GoTest,
        (None, Some(1)),
        &[("build", at("add.go", 4, Some(13)), "undefined: c")],
    );
}

#[test]
fn node_test_runner_tap() {
    check(
        "node-tap.txt",
        "node",
        Format::Tap,
        (Some(1), Some(1)),
        &[("adds numbers", at("math.test.js", 6, Some(10)), "0 !== 4")],
    );
}

#[test]
fn jest() {
    let (f, p) = parse(
        &recorded("jest.txt"),
        &Context {
            root: Path::new("/tmp/jsx"),
            go_module: None,
        },
    );
    assert_eq!(f, Format::Jest);
    assert_eq!((p.passed, p.failed), (Some(1), Some(1)));
    assert_eq!(p.failures[0].test_id, "sum > adds 1 + 2 to equal 3");
    assert_eq!(p.failures[0].location, at("sum.test.js", 4, Some(23)));
    assert!(
        p.failures[0].message.contains("Expected: 3\nReceived: -1"),
        "{:?}",
        p.failures[0].message
    );
}

#[test]
fn vitest() {
    let (f, p) = parse(
        &recorded("vitest.txt"),
        &Context {
            root: Path::new("/tmp/jsx"),
            go_module: None,
        },
    );
    assert_eq!(f, Format::Vitest);
    assert_eq!((p.passed, p.failed), (Some(1), Some(1)));
    assert_eq!(
        p.failures[0].test_id,
        "sum.test.mjs > sum > adds 1 + 2 to equal 3"
    );
    assert_eq!(p.failures[0].location, at("sum.test.mjs", 5, Some(23)));
    assert!(p.failures[0].message.contains("expected -1 to be 3"));
}

#[test]
fn unknown_tools_fall_back_to_path_line_messages() {
    let out = "checking...\nsrc/main.c:12:5: error: expected ';'\n/usr/include/x.h:1: note: outside\nall done\n";
    let (f, p) = parse(
        out,
        &Context {
            root: Path::new("/ws"),
            go_module: None,
        },
    );
    assert_eq!(f, Format::Generic);
    assert_eq!(p.failures.len(), 1);
    assert_eq!(p.failures[0].location, at("src/main.c", 12, Some(5)));
    assert_eq!(p.failures[0].message, "error: expected ';'");
}
