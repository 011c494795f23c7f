//! Trust is explicit: which folders the user trusts with the settings that run programs, name
//! servers, send data or approve (`store`); which paths a change may not write without the
//! user naming them (`protected`); the sandbox every command runs in (`sandbox`); and the
//! risky constructs a proposed change introduces (`scan`).

pub mod hooks;
pub mod limits;
pub mod privileges;
pub mod protected;
pub mod sandbox;
pub mod scan;
pub mod store;

pub use store::{Decision, TrustStore};

/// What the user should know about a proposed change before approving it: the protected
/// files it writes, and the risky constructs it brings in.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Review {
    /// Each protected file the change writes, with why it is protected.
    pub protected: Vec<(String, String)>,
    pub findings: Vec<scan::Finding>,
    /// In gate mode, the reviewer's findings that sent the run's change back: the change is
    /// the coder's attempt to fix them, and its preview and question say so.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fixes: Vec<Fix>,
}

/// A reviewer's finding a change is meant to fix: the file of the change it is on (`None`
/// when the change does not write that file: every file's preview names it), and the finding
/// in one line (`[P1] add subtracts — calc.py:5 (0.90)`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Fix {
    pub path: Option<String>,
    pub text: String,
}

impl Review {
    pub fn is_clean(&self) -> bool {
        self.protected.is_empty() && self.findings.is_empty()
    }

    /// The scan's findings, one after another with `separator` between them.
    pub fn findings_joined(&self, separator: &str) -> String {
        self.findings
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join(separator)
    }

    /// The review as lines for a person (a terminal, a question, the journal).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (path, why) in &self.protected {
            out.push_str(&format!("PROTECTED {path}: {why}\n"));
        }
        for f in &self.findings {
            out.push_str(&format!("RISK {f}\n"));
        }
        for f in &self.fixes {
            out.push_str(&format!("FIXES {}\n", f.text));
        }
        out
    }

    /// The reviewer's findings the change is meant to fix, one after another with
    /// `separator` between them (empty when it fixes none).
    pub fn fixes_joined(&self, separator: &str) -> String {
        self.fixes
            .iter()
            .map(|f| f.text.as_str())
            .collect::<Vec<_>>()
            .join(separator)
    }

    /// What to add to one file's label in the editor's preview.
    pub fn note_for(&self, path: &str) -> Option<String> {
        let mut notes: Vec<String> = self
            .protected
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, why)| format!("PROTECTED: {why}"))
            .collect();
        notes.extend(
            self.findings
                .iter()
                .filter(|f| f.path == path)
                .map(|f| format!("{} (line {})", f.risk.as_str(), f.line)),
        );
        notes.extend(
            self.fixes
                .iter()
                .filter(|f| f.path.as_deref().is_none_or(|p| p == path))
                .map(|f| format!("fixes {}", f.text)),
        );
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_note_names_the_findings_it_is_to_fix_and_those_on_no_file_of_the_change() {
        let review = Review {
            fixes: vec![
                Fix {
                    path: Some("calc.py".into()),
                    text: "[P1] add subtracts — calc.py:5 (0.90)".into(),
                },
                Fix {
                    path: None,
                    text: "[P1] no test — test_calc.py:3 (0.85)".into(),
                },
            ],
            ..Review::default()
        };
        assert_eq!(
            review.note_for("calc.py").as_deref(),
            Some(
                "fixes [P1] add subtracts — calc.py:5 (0.90); fixes [P1] no test — test_calc.py:3 (0.85)"
            )
        );
        assert_eq!(
            review.note_for("other.py").as_deref(),
            Some("fixes [P1] no test — test_calc.py:3 (0.85)")
        );
        assert!(review.describe().contains("FIXES [P1] add subtracts"));
        assert!(Review::default().note_for("calc.py").is_none());
    }
}
