//! The reviewer's answers read, checked against a diff, and judged by the gate.

use super::*;

const DIFF: &str = "\
diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,5 +1,6 @@
 def add(a, b):
-    return a - b
+    return a + b
+
 
 def sub(a, b):
     return a - b
@@ -10,3 +11,2 @@ def mul(a, b):
 x = 1
-y = 2
 z = 3
--- /dev/null
+++ b/new.py
@@ -0,0 +1,2 @@
+import os
+print(os.name)
--- a/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-x = 1
";

fn answer(findings: &str, verdict: &str) -> String {
    format!(
        "Here is my review.\n```json\n{{\"findings\": [{findings}], \"verdict\": \"{verdict}\", \
         \"explanation\": \"why\", \"confidence\": 0.9}}\n```\n"
    )
}

fn finding(priority: &str, confidence: &str, path: &str, start: u32, end: u32) -> String {
    format!(
        "{{\"title\": \"[P{priority}] a bug\", \"body\": \"details\", \"priority\": {priority}, \
         \"confidence\": {confidence}, \"path\": \"{path}\", \"start_line\": {start}, \
         \"end_line\": {end}}}"
    )
}

#[test]
fn a_diff_gives_each_file_the_new_lines_it_touched() {
    let files = changed_files(DIFF);
    let summary: Vec<(&str, Vec<(u32, u32)>)> = files
        .iter()
        .map(|f| (f.path.as_str(), f.changed.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("calc.py", vec![(2, 3), (11, 12)]),
            ("new.py", vec![(1, 2)]),
        ]
    );
}

#[test]
fn a_fenced_or_bare_answer_reads_the_same() {
    let fenced = answer(&finding("1", "0.9", "calc.py", 2, 2), "incorrect");
    let bare = fenced
        .trim_start_matches("Here is my review.\n```json\n")
        .trim_end_matches("\n```\n")
        .to_string();
    let a = parse_review(&fenced).unwrap();
    assert_eq!(a, parse_review(&bare).unwrap());
    assert_eq!(a.verdict, Verdict::Incorrect);
    assert_eq!(a.findings[0].priority, 1);
    assert_eq!((a.findings[0].start_line, a.findings[0].end_line), (2, 2));
}

#[test]
fn tolerated_forms_priority_tags_percentages_and_a_missing_end_line() {
    let text = r#"{"findings": [{"title": "[P2] slow loop", "body": "", "confidence": 80,
        "path": "./calc.py", "start_line": 3}], "verdict": "Patch is correct",
        "explanation": "", "confidence": "0.5"}"#;
    let r = parse_review(text).unwrap();
    let f = &r.findings[0];
    assert_eq!(
        (f.priority, f.confidence, f.path.as_str()),
        (2, 0.8, "calc.py")
    );
    assert_eq!((f.start_line, f.end_line), (3, 3));
    assert_eq!((r.verdict, r.confidence), (Verdict::Correct, 0.5));
}

#[test]
fn bad_answers_say_what_is_wrong() {
    let cases: Vec<(String, ReviewError)> = vec![
        ("looks good to me".into(), ReviewError::NoJson),
        (
            "{\"findings\": [], \"confidence\": 1}".into(),
            ReviewError::Missing("verdict".into()),
        ),
        (answer("", "fine"), ReviewError::BadVerdict("fine".into())),
        (
            answer(&finding("7", "0.9", "calc.py", 2, 2), "incorrect"),
            ReviewError::BadPriority {
                index: 1,
                value: "7".into(),
            },
        ),
        (
            answer(&finding("1", "-2", "calc.py", 2, 2), "incorrect"),
            ReviewError::BadConfidence {
                what: "finding 1".into(),
                value: "-2".into(),
            },
        ),
        (
            answer(&finding("1", "0.9", "calc.py", 5, 3), "incorrect"),
            ReviewError::BadRange {
                index: 1,
                start: 5,
                end: 3,
            },
        ),
        (
            answer(&finding("1", "0.9", "calc.py", 0, 1), "incorrect"),
            ReviewError::BadRange {
                index: 1,
                start: 0,
                end: 1,
            },
        ),
    ];
    for (text, want) in cases {
        assert_eq!(parse_review(&text), Err(want), "{text}");
    }
    assert!(matches!(
        parse_review("```json\n{\"verdict\": \n```"),
        Err(ReviewError::Json(_))
    ));
}

fn files(lines: u32) -> Vec<ChangedFile> {
    let mut files = changed_files(DIFF);
    files[0].lines = Some(lines);
    files
}

#[test]
fn findings_outside_the_change_are_kept_and_marked() {
    let text = answer(
        &[
            finding("1", "0.9", "calc.py", 3, 4),
            finding("2", "0.9", "calc.py", 7, 8),
            finding("3", "0.9", "other.py", 1, 1),
            finding("2", "0.9", "new.py", 2, 2),
        ]
        .join(", "),
        "incorrect",
    );
    let r = check(parse_review(&text).unwrap(), &files(14)).unwrap();
    let outside: Vec<bool> = r.findings.iter().map(|f| f.outside_change).collect();
    assert_eq!(outside, vec![false, true, true, false]);
}

#[test]
fn a_line_past_the_end_of_a_changed_file_is_an_error() {
    let text = answer(&finding("1", "0.9", "calc.py", 14, 15), "incorrect");
    assert_eq!(
        check(parse_review(&text).unwrap(), &files(14)),
        Err(ReviewError::PastEnd {
            index: 1,
            path: "calc.py".into(),
            line: 15,
            lines: 14
        })
    );
}

#[test]
fn the_gate_blocks_only_an_incorrect_verdict_with_a_confident_p0_or_p1() {
    let review = |p: &str, c: &str, verdict: &str| {
        parse_review(&answer(&finding(p, c, "calc.py", 2, 2), verdict)).unwrap()
    };
    assert!(blocks(&review("1", "0.9", "incorrect"), 0.8));
    assert!(blocks(&review("0", "0.8", "incorrect"), 0.8));
    assert!(!blocks(&review("1", "0.7", "incorrect"), 0.8));
    assert!(!blocks(&review("2", "1.0", "incorrect"), 0.8));
    assert!(!blocks(&review("3", "1.0", "incorrect"), 0.8));
    assert!(!blocks(&review("1", "0.9", "correct"), 0.8));
}

#[test]
fn a_result_serializes_with_its_status_and_summarises_in_a_line() {
    let review = parse_review(&answer(&finding("1", "0.9", "calc.py", 2, 2), "incorrect")).unwrap();
    let result = ReviewResult::Reviewed {
        review,
        blocking: true,
    };
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["status"], "reviewed");
    assert_eq!(json["verdict"], "incorrect");
    assert_eq!(json["findings"][0]["start_line"], 2);
    assert_eq!(
        serde_json::from_value::<ReviewResult>(json).unwrap(),
        result
    );
    assert_eq!(
        result.summary(),
        "review: the patch is incorrect (findings: 1 P1; confidence 0.90)"
    );
    let unavailable = ReviewResult::Unavailable {
        reason: "the reviewer model failed".into(),
    };
    assert_eq!(
        serde_json::to_value(&unavailable).unwrap()["status"],
        "unavailable"
    );
}

#[test]
fn a_report_names_each_finding_at_its_place() {
    let text = answer(
        &[
            finding("1", "0.9", "calc.py", 2, 2),
            finding("3", "0.9", "other.py", 1, 1),
        ]
        .join(", "),
        "incorrect",
    );
    let review = check(parse_review(&text).unwrap(), &files(14)).unwrap();
    let result = ReviewResult::Reviewed {
        review,
        blocking: true,
    };
    assert_eq!(
        result.report(),
        "review: the patch is incorrect (findings: 1 P1, 1 P3; confidence 0.90)\n  \
         [P1] calc.py:2-2: a bug\n  [P3] other.py:1-1: a bug (outside the change)"
    );
}
