//! The `file://` URIs of workspace files as the servers are told them.

use std::path::Path;

/// `file://` and the absolute path, percent-encoded where a URI needs it.
pub fn file_uri(path: &Path) -> String {
    let mut out = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
