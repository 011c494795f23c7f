//! Which test was running when a run was stopped (a timeout), told from the output the runner
//! printed before the kill: a test it announced and never gave a result. Each runner has its
//! own way to announce one (unittest and pytest in verbose mode, pytest's progress line, `go
//! test -v`, libtest); a runner that announces nothing (unittest without `-v`) says nothing.

use std::sync::LazyLock;

use regex::Regex;

static UNITTEST: LazyLock<Regex> = LazyLock::new(|| {
    // `test_x (mod.Class) ... ` (Python 3.11 and later: `(mod.Class.test_x)`), its result
    // on the same line once the test ends.
    Regex::new(r"^(\w+) \(([\w.]+)\)(?: \.\.\. ?(.*))?$").expect("valid pattern")
});
static PYTEST_VERBOSE: LazyLock<Regex> = LazyLock::new(|| {
    // `tests/test_x.py::test_y[param] PASSED   [ 50%]`, or with nothing after while it runs.
    Regex::new(r"^(\S+\.py::\S+)(?: +(\S.*))?$").expect("valid pattern")
});
static PYTEST_PROGRESS: LazyLock<Regex> = LazyLock::new(|| {
    // `tests/test_x.py ..F` then `[ 50%]` once every test of the file has run.
    Regex::new(r"^(\S+\.py)(?: [.sFExX]*)?\s*(\[ *\d+%\])?$").expect("valid pattern")
});
static GO_RUN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^=== RUN\s+(\S+)\s*$").expect("valid pattern"));
static GO_END: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*--- (?:PASS|FAIL|SKIP): (\S+)").expect("valid pattern"));
static CARGO_START: LazyLock<Regex> = LazyLock::new(|| {
    // `test tests::x ... ` (one test thread: the result follows on the same line), and
    // libtest's `test tests::x has been running for over 60 seconds`.
    Regex::new(r"^test (\S+) (?:\.\.\. ?(.*)|has been running for over \d+ seconds)$")
        .expect("valid pattern")
});

/// The test that was running when the output stopped, as its runner names it, or the file
/// pytest's progress line was on; `None` when the output does not tell.
pub fn running_test(output: &str) -> Option<String> {
    let lines: Vec<&str> = output.lines().map(|l| l.trim_end()).collect();
    [unittest, pytest_verbose, go, cargo, pytest_progress]
        .iter()
        .find_map(|find| find(&lines))
}

/// The last `test_x (mod.Class) ...` line with no result after it, on its line or on one
/// of its own below (where the test printed to the same stream after the `...`).
fn unittest(lines: &[&str]) -> Option<String> {
    fn announced(l: &str) -> Option<regex::Captures<'_>> {
        UNITTEST.captures(l).filter(|c| c.get(3).is_some())
    }
    let at = lines.iter().rposition(|l| announced(l).is_some())?;
    let caps = announced(lines[at])?;
    if !caps[3].trim().is_empty() {
        return None; // `ok`, `FAIL`, `skipped ...`: it ended
    }
    let ends = [
        "ok",
        "FAIL",
        "ERROR",
        "expected failure",
        "unexpected success",
    ];
    let ended = lines[at + 1..]
        .iter()
        .any(|l| ends.contains(&l.trim()) || l.trim().starts_with("skipped "));
    (!ended).then(|| unittest_id(&caps[1], &caps[2]))
}

/// `mod.Class.test_x`, whichever way the runner's Python printed it.
fn unittest_id(name: &str, class: &str) -> String {
    if class.ends_with(&format!(".{name}")) {
        class.to_string()
    } else {
        format!("{class}.{name}")
    }
}

/// The last `path::test` line pytest -v printed with no outcome after it.
fn pytest_verbose(lines: &[&str]) -> Option<String> {
    let caps = lines
        .iter()
        .rev()
        .find_map(|l| PYTEST_VERBOSE.captures(l))?;
    caps.get(2).is_none().then(|| caps[1].to_string())
}

/// The last `=== RUN` test with no `--- PASS/FAIL/SKIP` line for it.
fn go(lines: &[&str]) -> Option<String> {
    let ended: Vec<&str> = lines
        .iter()
        .filter_map(|l| GO_END.captures(l).and_then(|c| c.get(1)))
        .map(|m| m.as_str())
        .collect();
    lines
        .iter()
        .rev()
        .filter_map(|l| GO_RUN.captures(l).and_then(|c| c.get(1)))
        .map(|m| m.as_str())
        .find(|name| !ended.contains(name))
        .map(String::from)
}

/// The last `test x ...` libtest started and gave no result, or said had been running long.
fn cargo(lines: &[&str]) -> Option<String> {
    let mut started: Vec<&str> = Vec::new();
    let mut ended: Vec<&str> = Vec::new();
    for l in lines {
        let Some(c) = CARGO_START.captures(l) else {
            continue;
        };
        let name = c.get(1).map_or("", |m| m.as_str());
        match c.get(2).map(|m| m.as_str().trim()) {
            Some(result) if !result.is_empty() => ended.push(name),
            _ => started.push(name),
        }
    }
    started
        .into_iter()
        .rev()
        .find(|name| !ended.contains(name))
        .map(String::from)
}

/// The file of pytest's last progress line that has no percentage yet, in pytest's output
/// (it said how many tests it collected).
fn pytest_progress(lines: &[&str]) -> Option<String> {
    if !lines.iter().any(|l| l.starts_with("collected ")) {
        return None;
    }
    let caps = lines
        .iter()
        .rev()
        .find_map(|l| PYTEST_PROGRESS.captures(l))?;
    caps.get(2).is_none().then(|| caps[1].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unittest_verbose_names_the_test_without_a_result() {
        let out = "test_add (test_calc.CalcTests.test_add) ... ok\ntest_hang (test_hang.Hang.test_hang) ... ";
        assert_eq!(
            running_test(out).as_deref(),
            Some("test_hang.Hang.test_hang")
        );
        // Before Python 3.11, the class alone in parentheses.
        let old = "test_add (test_calc.CalcTests) ... ok\ntest_hang (test_hang.Hang) ... \n";
        assert_eq!(
            running_test(old).as_deref(),
            Some("test_hang.Hang.test_hang")
        );
        // The test printed after the announcement; the next test's line never came.
        let printed = "test_hang (test_hang.Hang) ... \nwaiting for the server\n";
        assert_eq!(
            running_test(printed).as_deref(),
            Some("test_hang.Hang.test_hang")
        );
        let done = "test_add (test_calc.CalcTests) ... ok\n\nRan 1 test in 0.001s\n\nOK\n";
        assert_eq!(running_test(done), None);
        // Without -v, unittest prints dots: nothing to tell.
        assert_eq!(running_test("..\n"), None);
    }

    #[test]
    fn pytest_verbose_names_the_node_id_without_an_outcome() {
        let out = "collected 3 items\n\ntests/test_a.py::test_ok PASSED                       [ 33%]\ntests/test_a.py::test_hang[2] ";
        assert_eq!(
            running_test(out).as_deref(),
            Some("tests/test_a.py::test_hang[2]")
        );
        let done = "tests/test_a.py::test_ok PASSED   [100%]\n\n=== 1 passed in 0.01s ===\n";
        assert_eq!(running_test(done), None);
    }

    #[test]
    fn pytest_progress_names_the_file() {
        let out = "collected 4 items\n\ntest_a.py ..                                  [ 50%]\ntest_hang.py .";
        assert_eq!(running_test(out).as_deref(), Some("test_hang.py"));
        let started = "collected 4 items\n\ntest_a.py ..      [ 50%]\ntest_hang.py ";
        assert_eq!(running_test(started).as_deref(), Some("test_hang.py"));
        let done = "test_a.py ..        [100%]\n";
        assert_eq!(running_test(done), None);
    }

    #[test]
    fn go_test_verbose_names_the_run_without_an_end() {
        let out = "=== RUN   TestAdd\n--- PASS: TestAdd (0.00s)\n=== RUN   TestHang\n=== RUN   TestHang/slow\n";
        assert_eq!(running_test(out).as_deref(), Some("TestHang/slow"));
        let sub_done =
            "=== RUN   TestHang\n=== RUN   TestHang/a\n    --- PASS: TestHang/a (0.00s)\n";
        assert_eq!(running_test(sub_done).as_deref(), Some("TestHang"));
        let done = "=== RUN   TestAdd\n--- PASS: TestAdd (0.00s)\nPASS\nok  \tcalc\t0.002s\n";
        assert_eq!(running_test(done), None);
    }

    #[test]
    fn cargo_test_names_the_test_without_a_result() {
        let one_thread = "running 2 tests\ntest tests::adds ... ok\ntest tests::hangs ... ";
        assert_eq!(running_test(one_thread).as_deref(), Some("tests::hangs"));
        let long = "running 2 tests\ntest tests::adds ... ok\ntest tests::hangs has been running for over 60 seconds\n";
        assert_eq!(running_test(long).as_deref(), Some("tests::hangs"));
        let done = "running 1 test\ntest tests::adds ... ok\n\ntest result: ok. 1 passed\n";
        assert_eq!(running_test(done), None);
    }
}
