//! The review question: an editor run whose review found something (findings, a verdict
//! `incorrect`, or no review to be had) ends with one window/showMessageRequest that names
//! the verdict and each finding, answered "Keep", "Roll back run" or "Show findings" (which
//! shows the whole review and asks again). Every step was approved before its tests ran, and
//! the review comes after the last tests pass: this is where the user decides with the
//! findings in front of them. Only the question and its answer live here; the rollback is
//! `rollback::roll_back_ended_run`, and the decision is recorded by the run's task.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower_lsp_server::ls_types::MessageType;

use super::outbox::Outbox;
use agent_ls_core::agent::review::{Decision, ReviewResult, Verdict};
use agent_ls_runtime::drive::Outcome;

pub const KEEP: &str = "Keep";
pub const ROLL_BACK: &str = "Roll back run";
pub const SHOW: &str = "Show findings";

/// The findings a question lists before it says how many more there are.
const LISTED: usize = 5;

/// The notice for a run whose change could not be reviewed: it is no question, since an
/// unavailable review does not block (docs/configuration.md); the change stays, and
/// `agent-ls.rollback` is there for the user who wants it gone.
pub fn unavailable_notice(label: &str, outcome: &Outcome) -> Option<String> {
    let Some(ReviewResult::Unavailable { reason }) = &outcome.review else {
        return None;
    };
    if outcome.files_changed.is_empty() {
        return None;
    }
    Some(format!(
        "{label}: the run's change to {} was not reviewed ({}); it stays (Agent: Rollback rolls the run back)",
        outcome.files_changed.join(", "),
        agent_ls_core::agent::one_line(reason)
    ))
}

/// The question for a run that ended with `outcome`, or `None` when its review has nothing to
/// say (no review, a correct verdict with no findings, no review to be had: a notice, see
/// `unavailable_notice`) or it changed no file.
pub fn question(label: &str, outcome: &Outcome) -> Option<String> {
    let review = outcome.review.as_ref().filter(|r| r.needs_a_look())?;
    if outcome.files_changed.is_empty() {
        return None;
    }
    let files = outcome.files_changed.join(", ");
    let mut text = match review {
        ReviewResult::Unavailable { .. } => return None,
        ReviewResult::Reviewed { review, .. } => {
            let verdict = match review.verdict {
                Verdict::Correct => "correct",
                Verdict::Incorrect => "incorrect",
            };
            let n = review.findings.len();
            let found = match n {
                0 => String::new(),
                1 => ", 1 finding".to_string(),
                n => format!(", {n} findings"),
            };
            format!(
                "{label}: the reviewer says the patch is {verdict} (confidence {:.2}{found}). Keep the run's change to {files}, or roll the run back?",
                review.confidence
            )
        }
    };
    if let ReviewResult::Reviewed { review, .. } = review {
        // The most urgent first: a question is read from the top.
        let mut findings: Vec<_> = review.findings.iter().collect();
        findings.sort_by_key(|f| f.priority);
        for f in findings.iter().take(LISTED) {
            text.push('\n');
            text.push_str(&f.one_line());
        }
        if findings.len() > LISTED {
            text.push_str(&format!(
                "\n… and {} more ({SHOW})",
                findings.len() - LISTED
            ));
        }
    }
    Some(text)
}

/// The whole review for "Show findings": the summary, each finding with its body, and the
/// reviewer's explanation.
pub fn full_review(outcome: &Outcome) -> String {
    let mut out = format!("agent-ls: review of run {}\n", outcome.run_id);
    match &outcome.review {
        Some(ReviewResult::Reviewed { review, .. }) => {
            out.push_str(
                &outcome
                    .review
                    .as_ref()
                    .map(|r| r.summary())
                    .unwrap_or_default(),
            );
            out.push('\n');
            for f in &review.findings {
                out.push_str(&format!("\n- {}", f.one_line()));
                if f.outside_change {
                    out.push_str(" (outside the change)");
                }
                for line in f.body.lines().filter(|l| !l.trim().is_empty()) {
                    out.push_str(&format!("\n  {line}"));
                }
            }
            if !review.explanation.is_empty() {
                out.push_str(&format!("\n\n{}", review.explanation));
            }
        }
        Some(r @ ReviewResult::Unavailable { .. }) => out.push_str(&r.summary()),
        None => {}
    }
    out
}

/// Asks until the user keeps the change or rolls the run back. `agent-ls.accept` keeps it and
/// `agent-ls.reject` rolls it back (they answer the question waiting, as for a step); a
/// dismissed question, or a cancel, keeps it: the files stay as they are unless someone
/// chose to roll back.
pub async fn ask(
    outbox: &Outbox,
    decisions: &mut mpsc::UnboundedReceiver<bool>,
    cancel: &CancellationToken,
    question: &str,
    full: &str,
) -> Decision {
    loop {
        let request = outbox.ask(
            MessageType::WARNING,
            question.to_string(),
            &[KEEP, ROLL_BACK, SHOW],
        );
        let answer = tokio::select! {
            r = request => r,
            d = decisions.recv() => d.map(|keep| if keep { KEEP } else { ROLL_BACK }.to_string()),
            _ = cancel.cancelled() => None,
        };
        match answer.as_deref() {
            Some(ROLL_BACK) => return Decision::RolledBack,
            Some(SHOW) => outbox.show_message(MessageType::INFO, full),
            _ => return Decision::Kept,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_ls_core::agent::review::{Finding, Review};

    fn outcome(review: Option<ReviewResult>) -> Outcome {
        serde_json::from_value(serde_json::json!({
            "run_id": "run_1", "status": "done", "answer": "", "iterations": 1,
            "files_changed": ["calc.py"], "tests": {"passed": 1, "failed": 0},
            "tokens": 0, "duration_ms": 0, "cost_usd": null,
            "review": review,
        }))
        .unwrap()
    }

    fn finding(priority: u8, title: &str) -> Finding {
        Finding {
            title: title.into(),
            body: "why\nand more".into(),
            priority,
            confidence: 0.9,
            path: "calc.py".into(),
            start_line: 5,
            end_line: 5,
            outside_change: false,
        }
    }

    fn reviewed(verdict: Verdict, findings: Vec<Finding>) -> Option<ReviewResult> {
        Some(ReviewResult::Reviewed {
            review: Review {
                findings,
                verdict,
                explanation: "it subtracts".into(),
                confidence: 0.85,
            },
            blocking: false,
        })
    }

    #[test]
    fn a_question_names_the_verdict_and_each_finding_most_urgent_first() {
        let o = outcome(reviewed(
            Verdict::Incorrect,
            vec![finding(3, "nit"), finding(1, "[P1] add subtracts")],
        ));
        let q = question("agent-ls: fix", &o).unwrap();
        let lines: Vec<&str> = q.lines().collect();
        assert!(lines[0].contains("patch is incorrect (confidence 0.85, 2 findings)"));
        assert!(lines[0].contains("calc.py"));
        assert_eq!(lines[1], "[P1] add subtracts — calc.py:5 (0.90)");
        assert_eq!(lines[2], "[P3] nit — calc.py:5 (0.90)");
    }

    #[test]
    fn many_findings_are_capped_and_the_rest_counted() {
        let many = (0..8).map(|i| finding(2, &format!("f{i}"))).collect();
        let q = question("x", &outcome(reviewed(Verdict::Incorrect, many))).unwrap();
        assert_eq!(q.lines().count(), 1 + LISTED + 1);
        assert!(q.ends_with("… and 3 more (Show findings)"), "{q}");
    }

    #[test]
    fn nothing_is_asked_without_something_to_look_at() {
        assert!(question("x", &outcome(None)).is_none());
        assert!(question("x", &outcome(reviewed(Verdict::Correct, Vec::new()))).is_none());
        let unavailable = outcome(Some(ReviewResult::Unavailable {
            reason: "the model failed".into(),
        }));
        assert!(question("x", &unavailable).is_none());
        assert!(
            unavailable_notice("x", &unavailable)
                .unwrap()
                .contains("not reviewed (the model failed); it stays")
        );
        let mut nothing_changed = outcome(reviewed(Verdict::Incorrect, Vec::new()));
        nothing_changed.files_changed.clear();
        assert!(question("x", &nothing_changed).is_none());
    }

    #[test]
    fn the_full_review_has_the_bodies_and_the_explanation() {
        let o = outcome(reviewed(
            Verdict::Incorrect,
            vec![finding(1, "add subtracts")],
        ));
        let full = full_review(&o);
        assert!(full.contains("- [P1] add subtracts — calc.py:5 (0.90)\n  why\n  and more"));
        assert!(full.ends_with("it subtracts"));
    }
}
