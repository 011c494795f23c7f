//! The approval policy, written once for every surface: what a proposed change, a tool call an
//! `ask` rule holds, and a dev-dependency install need before they happen. A front end only
//! says whether someone is there to answer (`Shell::present`) and asks the questions the
//! policy hands it; the decision and the words the model hears are the same everywhere.

use crate::config::Approval;
use crate::trust::Review;

/// How a run was told to approve: the configuration's (or the chosen agent's) `agent.approval`
/// for edits, and what the request said besides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub approval: Approval,
    /// Show the change and write nothing (`agent-ls run --dry-run`).
    pub dry_run: bool,
    /// The user said beforehand that protected files and flagged changes may be written
    /// (`--allow-protected`); without it a protected file is written only when confirmed by
    /// name.
    pub allow_protected: bool,
    /// The user said not to be asked (`--yes`): what needs a question is refused instead.
    pub yes: bool,
}

impl Policy {
    /// The policy of a run whose edits `approval` governs, asking when it must.
    pub fn new(approval: Approval) -> Policy {
        Policy {
            approval: approval.for_edits(),
            dry_run: false,
            allow_protected: false,
            yes: false,
        }
    }
}

/// What the policy decided about a change before anyone was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write it without a question.
    Write,
    /// A dry run: show it, write nothing.
    Show,
    /// Each of these protected files must be confirmed by name first, then `then` holds.
    Confirm {
        files: Vec<(String, String)>,
        then: Box<Decision>,
    },
    /// Ask whether to write it, and why it is asked.
    Ask(Asked),
    /// Not written; the model hears why, and may propose another change.
    Refuse(String),
    /// Not written, and the run ends: nobody is here to give the yes every change needs.
    Reject(String),
}

/// Why a change is put to the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// `agent.approval` asks for every change.
    Approval,
    /// The static scan flagged a construct, which no mode writes unasked.
    Flagged,
}

/// The one rule for a proposed change, given its review and whether someone can answer.
pub fn change(policy: &Policy, review: &Review, present: bool) -> Decision {
    if policy.dry_run {
        return Decision::Show;
    }
    let ask = |why| {
        if present && !policy.yes {
            Decision::Ask(why)
        } else if why == Asked::Flagged {
            Decision::Refuse(format!(
                "the static scan flagged it and no one was there to approve it:\n{}",
                review.findings_joined("\n")
            ))
        } else {
            Decision::Reject(
                "no one is here to approve the change (approval is \"confirm\"), so it is not applied; use --yes (or approval = \"auto\") to apply without asking".into(),
            )
        }
    };
    let then = match policy.approval {
        // Allowing protected files beforehand also allows what the scan flagged, but only
        // where changes apply without asking: under "confirm" the change is still asked.
        Approval::Auto if review.findings.is_empty() || policy.allow_protected => Decision::Write,
        Approval::Auto => ask(Asked::Flagged),
        _ => ask(Asked::Approval),
    };
    if review.protected.is_empty() || policy.allow_protected {
        return then;
    }
    if !present || policy.yes {
        let files = review
            .protected
            .iter()
            .map(|(p, why)| format!("{p}: {why}"))
            .collect::<Vec<_>>()
            .join("; ");
        let how = if policy.yes {
            "applying without asking never writes them unless the user allowed it beforehand (--allow-protected)"
        } else {
            "no one is here to confirm them by name"
        };
        return Decision::Refuse(format!(
            "it writes protected files ({files}); {how}; leave them alone"
        ));
    }
    Decision::Confirm {
        files: review.protected.clone(),
        then: Box::new(then),
    }
}

/// What the model hears when the user did not confirm a protected file.
pub fn not_confirmed(path: &str, why: &str) -> String {
    format!("the user did not allow writing the protected file {path} ({why}); leave it alone")
}

/// What becomes of a tool call an `ask` rule holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Asked, whatever the approval mode.
    Ask,
    /// Refused, for this reason (added to the rule the model hears).
    Refuse(&'static str),
}

/// A tool call an `ask` rule holds: asked whatever the approval mode, refused (saying why)
/// where nobody can answer.
pub fn call(policy: &Policy, present: bool) -> Held {
    if policy.dry_run {
        Held::Refuse("a dry run asks nothing")
    } else if !present {
        Held::Refuse("there is no one to ask here; an allow rule would let it run")
    } else {
        Held::Ask
    }
}

/// Installing a dev dependency runs a command outside the sandbox: `Some(true)` installs
/// without a question (the user said --yes), `None` asks, `Some(false)` does not install.
pub fn install(policy: &Policy, present: bool) -> Option<bool> {
    if policy.dry_run {
        Some(false)
    } else if policy.yes {
        Some(true)
    } else if present {
        None
    } else {
        Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::Review;

    fn protected() -> Review {
        Review {
            protected: vec![(".github/workflows/ci.yml".into(), "CI runs it".into())],
            ..Review::default()
        }
    }

    fn policy(approval: Approval) -> Policy {
        Policy::new(approval)
    }

    #[test]
    fn a_clean_change_is_asked_in_confirm_mode_and_written_in_auto() {
        let clean = Review::default();
        assert_eq!(
            change(&policy(Approval::Confirm), &clean, true),
            Decision::Ask(Asked::Approval)
        );
        assert_eq!(
            change(&policy(Approval::Auto), &clean, true),
            Decision::Write
        );
        assert!(matches!(
            change(&policy(Approval::Confirm), &clean, false),
            Decision::Reject(_)
        ));
    }

    #[test]
    fn a_protected_file_is_confirmed_by_name_in_every_mode() {
        for approval in [Approval::Confirm, Approval::Auto] {
            match change(&policy(approval), &protected(), true) {
                Decision::Confirm { files, .. } => {
                    assert_eq!(files[0].0, ".github/workflows/ci.yml")
                }
                other => panic!("{approval:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_protected_file_is_refused_with_yes_or_nobody_and_written_when_allowed() {
        let yes = Policy {
            yes: true,
            ..policy(Approval::Auto)
        };
        match change(&yes, &protected(), true) {
            Decision::Refuse(why) => assert!(why.contains("--allow-protected"), "{why}"),
            other => panic!("{other:?}"),
        }
        match change(&policy(Approval::Auto), &protected(), false) {
            Decision::Refuse(why) => assert!(why.contains("confirm them by name"), "{why}"),
            other => panic!("{other:?}"),
        }
        let allowed = Policy {
            allow_protected: true,
            ..yes
        };
        assert_eq!(change(&allowed, &protected(), false), Decision::Write);
        // Allowed, but approval is "confirm": the change itself is still asked.
        let confirm = Policy {
            allow_protected: true,
            ..policy(Approval::Confirm)
        };
        assert_eq!(
            change(&confirm, &protected(), true),
            Decision::Ask(Asked::Approval)
        );
        assert!(matches!(
            change(&confirm, &protected(), false),
            Decision::Reject(_)
        ));
    }

    #[test]
    fn a_dry_run_shows_and_asks_nothing() {
        let dry = Policy {
            dry_run: true,
            ..policy(Approval::Auto)
        };
        assert_eq!(change(&dry, &protected(), true), Decision::Show);
        assert!(matches!(call(&dry, true), Held::Refuse(_)));
        assert_eq!(install(&dry, true), Some(false));
    }

    #[test]
    fn calls_and_installs_are_asked_where_someone_is() {
        let p = policy(Approval::Auto);
        assert_eq!(call(&p, true), Held::Ask);
        assert!(matches!(call(&p, false), Held::Refuse(_)));
        assert_eq!(install(&p, true), None);
        assert_eq!(install(&p, false), Some(false));
        let yes = Policy { yes: true, ..p };
        assert_eq!(install(&yes, false), Some(true));
    }
}
