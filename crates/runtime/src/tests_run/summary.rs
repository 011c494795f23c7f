//! A test run as the other parts see it: the loop's `TestSummary` (with the fingerprint that
//! tells the same failures apart from new ones) and the diagnostics the tools report.

use agent_ls_core::agent::TestSummary;

use super::result::RunResult;

/// The failures of a test run as `get_diagnostics` reports them: each failure at its place.
pub fn diagnostics_of(r: Option<&RunResult>) -> Vec<crate::tools::Diagnostic> {
    let Some(r) = r else {
        return Vec::new();
    };
    r.failures
        .iter()
        .filter_map(|f| {
            let l = f.location.as_ref()?;
            Some(crate::tools::Diagnostic {
                path: l.file.clone(),
                line: l.line,
                source: f.test_id.clone(),
                message: f.message.clone(),
            })
        })
        .collect()
}

/// A test run as the loop sees it; the fingerprint is the sorted set of failing tests and
/// places, so the same failures compare equal across runs.
pub fn summary(r: &RunResult) -> TestSummary {
    let mut keys: Vec<String> = r
        .failures
        .iter()
        .map(|f| {
            format!(
                "{}@{}",
                f.test_id,
                f.location
                    .as_ref()
                    .map(|l| format!("{}:{}", l.file, l.line))
                    .unwrap_or_default()
            )
        })
        .collect();
    keys.sort();
    let failed = r.failed.unwrap_or(r.failures.len() as u32);
    TestSummary {
        passed: r.passed_all(),
        passed_count: r.passed.unwrap_or(0),
        // A run stopped by a timeout or a limit counts only the failures it saw; a project
        // with no test yet has none.
        failed_count: match (r.passed_all() || r.no_tests(), r.stopped()) {
            (true, _) => 0,
            (false, Some(_)) => failed,
            (false, None) => failed.max(1),
        },
        report: r.report.clone(),
        no_tests: r.no_tests(),
        stopped: r.stopped(),
        fingerprint: if keys.is_empty() {
            r.report.clone()
        } else {
            keys.join("\n")
        },
    }
}
