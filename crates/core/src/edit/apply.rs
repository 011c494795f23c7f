//! Applies located edits to a text: checked for overlap, applied in reverse document order,
//! and inverted so the change can be undone exactly.

use std::ops::Range;

use ropey::Rope;
use serde::Serialize;

/// Replace the bytes `range` of a text with `text`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TextEdit {
    pub range: Range<usize>,
    pub text: String,
}

/// Two edits that claim the same text: the second (in document order) is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    pub first: usize,
    pub second: usize,
}

/// Sorts `edits` into document order (stable, so insertions at one point keep their order)
/// and reports the first pair that overlaps, by their indices in the input.
pub fn check_overlaps(edits: &[TextEdit]) -> Result<Vec<usize>, Overlap> {
    let mut order: Vec<usize> = (0..edits.len()).collect();
    order.sort_by_key(|&i| (edits[i].range.start, edits[i].range.end));
    for pair in order.windows(2) {
        let (a, b) = (&edits[pair[0]], &edits[pair[1]]);
        let touching_insertions = a.range.is_empty() && b.range.is_empty();
        if b.range.start < a.range.end || (a.range == b.range && !touching_insertions) {
            return Err(Overlap {
                first: pair[0].min(pair[1]),
                second: pair[0].max(pair[1]),
            });
        }
    }
    Ok(order)
}

/// Applies non-overlapping edits to a string and returns the new text with the edits that
/// turn it back into the original (in the new text's coordinates).
pub fn apply_to_string(text: &str, edits: &[TextEdit]) -> Result<(String, Vec<TextEdit>), Overlap> {
    let order = check_overlaps(edits)?;
    // Built front to back in one pass: replacing in place would move the tail once per edit.
    let grown: usize = edits.iter().map(|e| e.text.len()).sum();
    let mut out = String::with_capacity(text.len() + grown);
    let mut at = 0;
    for &i in &order {
        out.push_str(&text[at..edits[i].range.start]);
        out.push_str(&edits[i].text);
        at = edits[i].range.end;
    }
    out.push_str(&text[at..]);
    Ok((out, invert(text, edits, &order)))
}

/// The same on a rope: edits go in reverse document order so earlier offsets stay valid.
pub fn apply_to_rope(rope: &mut Rope, edits: &[TextEdit]) -> Result<Vec<TextEdit>, Overlap> {
    let order = check_overlaps(edits)?;
    let original = rope.clone();
    for &i in order.iter().rev() {
        let start = rope.byte_to_char(edits[i].range.start);
        let end = rope.byte_to_char(edits[i].range.end);
        rope.remove(start..end);
        rope.insert(start, &edits[i].text);
    }
    let mut inverse = Vec::with_capacity(order.len());
    let mut shift: isize = 0;
    for &i in &order {
        let e = &edits[i];
        let start = (e.range.start as isize + shift) as usize;
        let old: String = original.byte_slice(e.range.clone()).into();
        inverse.push(TextEdit {
            range: start..start + e.text.len(),
            text: old,
        });
        shift += e.text.len() as isize - e.range.len() as isize;
    }
    Ok(inverse)
}

fn invert(original: &str, edits: &[TextEdit], order: &[usize]) -> Vec<TextEdit> {
    let mut inverse = Vec::with_capacity(order.len());
    let mut shift: isize = 0;
    for &i in order {
        let e = &edits[i];
        let start = (e.range.start as isize + shift) as usize;
        inverse.push(TextEdit {
            range: start..start + e.text.len(),
            text: original[e.range.clone()].to_string(),
        });
        shift += e.text.len() as isize - e.range.len() as isize;
    }
    inverse
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn edit(start: usize, end: usize, text: &str) -> TextEdit {
        TextEdit {
            range: start..end,
            text: text.into(),
        }
    }

    #[test]
    fn overlapping_edits_are_reported() {
        let err = apply_to_string("abcdef", &[edit(0, 3, "x"), edit(2, 4, "y")]).unwrap_err();
        assert_eq!(
            err,
            Overlap {
                first: 0,
                second: 1
            }
        );
        assert!(apply_to_string("abcdef", &[edit(0, 3, "x"), edit(3, 4, "y")]).is_ok());
    }

    /// Random text with multi-byte characters and CRLF, and random non-overlapping edits on
    /// char boundaries.
    fn text_and_edits() -> impl Strategy<Value = (String, Vec<TextEdit>)> {
        let piece = prop::sample::select(vec!["a", "é", "😀", "漢", "\r\n", "\n", " ", "\t", "z"]);
        (
            prop::collection::vec(piece.clone(), 0..60),
            prop::collection::vec(
                (
                    any::<prop::sample::Index>(),
                    any::<prop::sample::Index>(),
                    prop::collection::vec(piece, 0..4),
                ),
                0..8,
            ),
        )
            .prop_map(|(pieces, raw)| {
                let text: String = pieces.concat();
                let bounds: Vec<usize> = text
                    .char_indices()
                    .map(|(i, _)| i)
                    .chain([text.len()])
                    .collect();
                let mut cuts: Vec<(usize, usize, String)> = raw
                    .into_iter()
                    .map(|(a, b, ins)| {
                        let (x, y) = (bounds[a.index(bounds.len())], bounds[b.index(bounds.len())]);
                        (x.min(y), x.max(y), ins.concat())
                    })
                    .collect();
                cuts.sort();
                let mut edits = Vec::new();
                let mut last_end = 0;
                for (s, e, t) in cuts {
                    if s >= last_end
                        && !(s == e && edits.last().is_some_and(|p: &TextEdit| p.range == (s..e)))
                    {
                        edits.push(edit(s, e, &t));
                        last_end = e.max(s + usize::from(s == e));
                    }
                }
                edits.reverse(); // the input order must not matter
                (text, edits)
            })
    }

    proptest! {
        #[test]
        fn rope_and_string_agree_and_inverting_restores_the_original((text, edits) in text_and_edits()) {
            let (new_text, inverse) = apply_to_string(&text, &edits).unwrap();
            let mut rope = Rope::from_str(&text);
            let rope_inverse = apply_to_rope(&mut rope, &edits).unwrap();
            prop_assert_eq!(rope.to_string(), new_text.clone());
            prop_assert_eq!(&rope_inverse, &inverse);
            let (restored, _) = apply_to_string(&new_text, &inverse).unwrap();
            prop_assert_eq!(restored, text.clone());
            let mut back = Rope::from_str(&new_text);
            apply_to_rope(&mut back, &inverse).unwrap();
            prop_assert_eq!(back.to_string(), text);
        }
    }
}
