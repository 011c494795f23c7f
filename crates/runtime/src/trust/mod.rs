//! Trust is explicit: which folders the user trusts with the settings that run programs, name
//! servers, send data or approve (`store`); which paths a change may not write without the
//! user naming them (`protected`); the sandbox every command runs in (`sandbox`); and the
//! risky constructs a proposed change introduces (`scan`).

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
        out
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
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}
