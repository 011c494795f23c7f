//! The suggestions shown lately, so that a user typing the start of one is answered with the
//! rest at once, without a model call: keyed by the document and the text before the cursor
//! when it was asked for, and valid while the text after the cursor's line is unchanged.

use std::collections::VecDeque;

/// How much of the text before the cursor keys an entry: enough to tell two places apart,
/// little enough to compare on every keystroke.
const KEY_BYTES: usize = 256;

/// The suggestions kept, the latest first.
#[derive(Debug, Clone)]
pub struct Cache {
    entries: VecDeque<Entry>,
    capacity: usize,
}

#[derive(Debug, Clone)]
struct Entry {
    doc: String,
    before: String,
    rest_of_line: String,
    suggestion: String,
    id: u64,
}

/// A suggestion found again: what is left of it after what the user typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub rest: String,
    /// The bytes of the suggestion the user typed since it was shown.
    pub typed: usize,
    /// The id the suggestion was shown under.
    pub id: u64,
}

impl Default for Cache {
    fn default() -> Self {
        Cache::new(32)
    }
}

impl Cache {
    pub fn new(capacity: usize) -> Cache {
        Cache {
            entries: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Keeps `suggestion`, shown at the cursor between `prefix` and `suffix` in `doc`.
    pub fn put(&mut self, doc: &str, prefix: &str, suffix: &str, suggestion: &str, id: u64) {
        self.entries.push_front(Entry {
            doc: doc.to_string(),
            before: key_of(prefix).to_string(),
            rest_of_line: first_line(suffix).to_string(),
            suggestion: suggestion.to_string(),
            id,
        });
        self.entries.truncate(self.capacity);
    }

    /// The rest of a kept suggestion whose start the user typed (or none typed yet, at the
    /// same place): the text before the cursor is the entry's followed by a start of the
    /// suggestion, and the rest of the line is as it was. `None` when nothing matches or
    /// the whole suggestion was typed.
    pub fn get(&self, doc: &str, prefix: &str, suffix: &str) -> Option<Hit> {
        let rest_of_line = first_line(suffix);
        self.entries
            .iter()
            .filter(|e| e.doc == doc && e.rest_of_line == rest_of_line)
            .find_map(|e| typed_of(e, prefix))
    }

    /// Forgets a document's suggestions (it was closed).
    pub fn forget(&mut self, doc: &str) {
        self.entries.retain(|e| e.doc != doc);
    }
}

fn typed_of(e: &Entry, prefix: &str) -> Option<Hit> {
    let ends = e
        .suggestion
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(e.suggestion.len()));
    // The most typed first: a suggestion of repeated text must not be offered again from
    // an earlier place in it.
    let mut ends: Vec<usize> = ends.collect();
    ends.reverse();
    for typed in ends {
        let part = &e.suggestion[..typed];
        let Some(head) = prefix.strip_suffix(part) else {
            continue;
        };
        if head.ends_with(&e.before) {
            let rest = &e.suggestion[typed..];
            return (!rest.is_empty()).then(|| Hit {
                rest: rest.to_string(),
                typed,
                id: e.id,
            });
        }
    }
    None
}

fn first_line(s: &str) -> &str {
    s.split('\n').next().unwrap_or("")
}

/// The last `KEY_BYTES` of `prefix` at most, starting on a character.
fn key_of(prefix: &str) -> &str {
    if prefix.len() <= KEY_BYTES {
        return prefix;
    }
    let mut start = prefix.len() - KEY_BYTES;
    while !prefix.is_char_boundary(start) {
        start += 1;
    }
    &prefix[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typing_the_start_of_a_suggestion_gives_its_rest() {
        let mut c = Cache::default();
        c.put("a.py", "def add(a, b):\n    ", "\n", "return a + b", 7);
        let hit = c.get("a.py", "def add(a, b):\n    ret", "\n").unwrap();
        assert_eq!(
            hit,
            Hit {
                rest: "urn a + b".into(),
                typed: 3,
                id: 7
            }
        );
        // Asked again at the same place: the whole suggestion.
        assert_eq!(
            c.get("a.py", "def add(a, b):\n    ", "\n").unwrap().typed,
            0
        );
        // Typed in full: nothing left to suggest.
        assert_eq!(
            c.get("a.py", "def add(a, b):\n    return a + b", "\n"),
            None
        );
        // Typed something else, another document, or the rest of the line changed.
        assert_eq!(c.get("a.py", "def add(a, b):\n    x", "\n"), None);
        assert_eq!(c.get("b.py", "def add(a, b):\n    ret", "\n"), None);
        assert_eq!(c.get("a.py", "def add(a, b):\n    ret", ")\n"), None);
    }

    #[test]
    fn a_long_prefix_is_keyed_by_its_end_and_multibyte_text_is_cut_on_characters() {
        let mut c = Cache::new(2);
        let long = "é".repeat(400);
        c.put("a", &long, "", "ünïcode", 1);
        assert_eq!(c.get("a", &format!("{long}ün"), "").unwrap().rest, "ïcode");
        c.put("a", "x", "", "1", 2);
        c.put("a", "y", "", "2", 3);
        assert_eq!(c.get("a", &long, ""), None, "the oldest entry went");
        c.forget("a");
        assert_eq!(c.get("a", "x", ""), None);
    }
}
