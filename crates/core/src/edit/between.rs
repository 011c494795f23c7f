//! A file change between two whole texts, as line-level edits, for a front end that restores
//! a file to a known text (a git rollback) and wants the editor to keep the lines that do
//! not change (their marks, folds and undo history) rather than replace the whole buffer.

use super::apply::{TextEdit, apply_to_string};
use super::change::FileChange;

/// The change that turns `original` (`None`: the file does not exist) into `new_text`, with
/// one edit per run of differing lines, in `original`'s byte offsets.
pub fn change_between(path: &str, original: Option<&str>, new_text: &str) -> FileChange {
    let from = original.unwrap_or("");
    let old_lines: Vec<&str> = from.split_inclusive('\n').collect();
    let new_lines: Vec<&str> = new_text.split_inclusive('\n').collect();
    let ops = similar::capture_diff_slices(similar::Algorithm::Myers, &old_lines, &new_lines);
    // Byte offset of each old line's start, and of the end.
    let mut starts = Vec::with_capacity(old_lines.len() + 1);
    let mut at = 0;
    for l in &old_lines {
        starts.push(at);
        at += l.len();
    }
    starts.push(at);
    let mut edits = Vec::new();
    for op in &ops {
        if matches!(op.tag(), similar::DiffTag::Equal) {
            continue;
        }
        let (old, new) = (op.old_range(), op.new_range());
        edits.push(TextEdit {
            range: starts[old.start]..starts[old.end],
            text: new_lines[new].concat(),
        });
    }
    // Line edits from one diff never overlap; the inverse comes from applying them.
    let inverse = apply_to_string(from, &edits)
        .map(|(_, inverse)| inverse)
        .unwrap_or_default();
    FileChange {
        path: path.to_string(),
        original: original.map(str::to_string),
        new_text: new_text.to_string(),
        edits,
        inverse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(a: &str, b: &str) {
        let c = change_between("f", Some(a), b);
        let (out, inverse) = apply_to_string(a, &c.edits).unwrap();
        assert_eq!(out, b);
        assert_eq!(apply_to_string(&out, &inverse).unwrap().0, a);
        assert_eq!(c.inverse, inverse);
    }

    #[test]
    fn only_the_differing_lines_are_edited() {
        let c = change_between("f", Some("a\nb\nc\n"), "a\nB\nc\n");
        assert_eq!(c.edits.len(), 1);
        assert_eq!(c.edits[0].range, 2..4);
        assert_eq!(c.edits[0].text, "B\n");
        roundtrip("a\nb\nc\n", "a\nB\nc\n");
    }

    #[test]
    fn inserts_deletes_and_a_missing_last_newline_round_trip() {
        roundtrip("a\nb\nc", "x\na\nc\nd");
        roundtrip("", "new\nfile\n");
        roundtrip("gone\n", "");
        roundtrip("same\n", "same\n");
    }

    #[test]
    fn a_missing_file_is_created_whole() {
        let c = change_between("f", None, "hi\n");
        assert!(c.creates());
        assert_eq!(
            c.edits,
            vec![TextEdit {
                range: 0..0,
                text: "hi\n".into()
            }]
        );
    }

    #[test]
    fn equal_texts_need_no_edit() {
        assert!(change_between("f", Some("x\n"), "x\n").edits.is_empty());
    }
}
