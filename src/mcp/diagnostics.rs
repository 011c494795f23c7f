//! `get_diagnostics` for a source file: a failure is located where the test asserted, most
//! often in the test file, so asking for `calc.py` found nothing while `test_calc.py` failed.
//! The failures that pass through the file, or whose test file is the file's test file, are
//! reported under the file asked for, each line naming where it failed.

use std::path::Path;

use agent_ls_runtime::tests_run::Location;
use agent_ls_runtime::tests_run::RunResult;
use agent_ls_runtime::tools::Diagnostic;

/// The failures of `last` that concern `path` without being located in it, as diagnostics of
/// `path` (line 1 when the failure does not pass through it).
pub(super) fn of_source(root: &Path, path: &str, last: &RunResult) -> Vec<Diagnostic> {
    let path = relative(root, path);
    let mut out = Vec::new();
    for f in &last.failures {
        let Some(at) = &f.location else { continue };
        if at.file == path {
            // Already reported by the tool itself.
            continue;
        }
        let frame = f.frames.iter().find(|l| l.file == path);
        if frame.is_none() && !tests_of(&at.file, &path) {
            continue;
        }
        let first = f.message.lines().next().unwrap_or("");
        out.push(Diagnostic {
            path: path.clone(),
            line: frame.map_or(1, |l| l.line),
            source: f.test_id.clone(),
            message: format!("{first} (failed at {})", place(at)),
        });
    }
    out
}

fn place(l: &Location) -> String {
    format!("{}:{}", l.file, l.line)
}

/// `path` as the failures name files: relative to the root, without `./`.
fn relative(root: &Path, path: &str) -> String {
    let p = Path::new(path);
    let p = p.strip_prefix(root).unwrap_or(p);
    let p = p.strip_prefix("./").unwrap_or(p);
    p.to_string_lossy().into_owned()
}

/// Whether `test` is by its name the test file of `source`: `test_calc.py`, `calc_test.go`,
/// `calc.test.ts`, `calc.spec.js` or `calc_spec.rb` for `calc.*`, in any folder.
fn tests_of(test: &str, source: &str) -> bool {
    let stem = |p: &str| {
        let name = Path::new(p)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        name.map(|n| n.split('.').next().unwrap_or_default().to_string())
    };
    let (Some(test_name), Some(source_stem)) = (
        Path::new(test).file_name().map(|n| n.to_string_lossy()),
        stem(source),
    ) else {
        return false;
    };
    if source_stem.is_empty() || test == source {
        return false;
    }
    let s = source_stem.as_str();
    let test_stem = test_name.split('.').next().unwrap_or_default();
    test_stem == format!("test_{s}")
        || test_stem == format!("{s}_test")
        || test_stem == format!("{s}_spec")
        || [".test.", ".spec."]
            .iter()
            .any(|m| test_name.starts_with(&format!("{s}{m}")))
}

#[cfg(test)]
mod tests {
    use super::tests_of;

    #[test]
    fn a_test_file_is_known_by_its_name() {
        assert!(tests_of("test_calc.py", "calc.py"));
        assert!(tests_of("tests/test_calc.py", "src/calc.py"));
        assert!(tests_of("calc_test.go", "calc.go"));
        assert!(tests_of("src/calc.test.ts", "src/calc.ts"));
        assert!(!tests_of("test_calculator.py", "calc.py"));
        assert!(!tests_of("calc.py", "calc.py"));
    }
}
