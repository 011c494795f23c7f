//! A file as the editor last read or wrote it: its text and modification time, taken just
//! before the server first writes the file under an open buffer of a client that cannot save
//! on request (eglot alone). Emacs asks "changed on disk" before it applies an edit to a
//! buffer whose file's modification time or size is not the one it recorded; the server puts
//! this state back on disk for the moment the editor applies an edit ("parking" the file), so
//! the editor finds its file as it left it and asks nothing, then writes the change with a
//! fresh modification time (a build tool that compares times never sees a file go back in
//! time once the edit is done).

use std::path::Path;
use std::time::SystemTime;

use agent_ls_runtime::files;

/// The disk's text of a file and its modification time, read together.
#[derive(Clone, Debug)]
pub struct Baseline {
    pub text: String,
    modified: SystemTime,
}

/// Reads the file's text and modification time, or `None` when it is missing, not text, or
/// changed while it was read (the pair would not be one the disk ever held).
pub fn read(root: &Path, relative: &str) -> Option<Baseline> {
    let path = files::resolve(root, relative).ok()?;
    let before = std::fs::metadata(&path).ok()?.modified().ok()?;
    let text = std::fs::read_to_string(&path).ok()?;
    let after = std::fs::metadata(&path).ok()?.modified().ok()?;
    (before == after).then_some(Baseline {
        text,
        modified: before,
    })
}

/// Puts the file back as `baseline` holds it: its text, then its modification time.
pub fn put_back(root: &Path, relative: &str, baseline: &Baseline) -> std::io::Result<()> {
    let path = files::resolve(root, relative).map_err(std::io::Error::other)?;
    files::write_atomic(&path, baseline.text.as_bytes())?;
    std::fs::File::options()
        .write(true)
        .open(&path)?
        .set_modified(baseline.modified)
}

/// Whether the disk holds `baseline` as it was read, text and time: a file left parked.
pub fn still_parked(root: &Path, relative: &str, baseline: &Baseline) -> bool {
    read(root, relative)
        .is_some_and(|now| now.modified == baseline.modified && now.text == baseline.text)
}

/// Gives the file the time of now, its text unchanged.
pub fn restamp(root: &Path, relative: &str) -> std::io::Result<()> {
    let path = files::resolve(root, relative).map_err(std::io::Error::other)?;
    std::fs::File::options()
        .write(true)
        .open(&path)?
        .set_modified(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_put_back_has_the_text_and_the_time_it_was_read_with() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("calc.py"), "return a - b\n").unwrap();
        let seen = read(dir.path(), "calc.py").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(dir.path().join("calc.py"), "return a + b + c\n").unwrap();
        put_back(dir.path(), "calc.py", &seen).unwrap();
        let again = read(dir.path(), "calc.py").unwrap();
        assert_eq!(again.text, "return a - b\n");
        assert_eq!(again.modified, seen.modified);
        assert!(read(dir.path(), "missing.py").is_none());
    }
}
