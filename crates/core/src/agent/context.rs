//! The lean context: what a model call shows besides the goal and the failures, and each
//! file's text at most once. The runtime gathers the pieces (files in the order they matter,
//! the repo map); `Context::render` keeps them within the first prompt's byte budget, and
//! `lean` replaces a file's earlier copy in a turn's tool results by a one-line pointer when
//! the same lines come again. Both are pure and deterministic, so the messages before the
//! newest tool round are the same bytes from call to call and providers' prompt caches hit.

use serde::{Deserialize, Serialize};

use crate::conversation::{Message, Speaker};

/// One piece of the context, in the order the runtime ranks them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// The file the piece is the whole text of; `None` for a block shown as it is (the repo
    /// map, the latest change's diff), which goes in before any file.
    pub path: Option<String>,
    pub text: String,
}

/// The pieces the prompt may show, and the files not read for them (over the runtime's own
/// limit), which are only named.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    pub pieces: Vec<Piece>,
    pub unread: Vec<String>,
}

impl From<String> for Context {
    fn from(text: String) -> Self {
        Context {
            pieces: if text.is_empty() {
                Vec::new()
            } else {
                vec![Piece { path: None, text }]
            },
            unread: Vec::new(),
        }
    }
}

/// What a rendered context shows: its text and the files shown whole.
pub struct Rendered<'a> {
    pub text: String,
    pub files: Vec<(&'a str, &'a str)>,
}

/// The most names the closing "Other files" line lists.
pub const MAX_NAMED: usize = 100;

impl Context {
    fn block(piece: &Piece) -> String {
        match &piece.path {
            Some(path) => format!("{path}\n```\n{}```\n\n", piece.text),
            None => piece.text.clone(),
        }
    }

    /// The pieces within `room` bytes: the blocks first (the repo map is what points the model
    /// at the rest), then the files in rank order, each whole or not at all; a file left out
    /// is named in a closing line while that line fits. Shown in the runtime's order.
    pub fn render(&self, room: usize) -> Rendered<'_> {
        let room = room.min(usize::MAX / 2);
        let mut blocks: Vec<String> = self.pieces.iter().map(Context::block).collect();
        let mut keep = vec![false; blocks.len()];
        let mut used = 0;
        for files in [false, true] {
            for (i, p) in self.pieces.iter().enumerate() {
                if p.path.is_some() != files {
                    continue;
                }
                // A block too long for what is left keeps its first lines: the map's are
                // its best-ranked ones.
                if !files && used + blocks[i].len() > room {
                    blocks[i] = head_lines(&blocks[i], room - used);
                }
                if !blocks[i].is_empty() && used + blocks[i].len() <= room {
                    keep[i] = true;
                    used += blocks[i].len();
                }
            }
        }
        let mut text = String::new();
        let mut files = Vec::new();
        let mut left: Vec<&str> = Vec::new();
        for (i, p) in self.pieces.iter().enumerate() {
            match (&p.path, keep[i]) {
                (Some(path), true) => files.push((path.as_str(), p.text.as_str())),
                (Some(path), false) => left.push(path),
                (None, _) => {}
            }
            if keep[i] {
                text.push_str(&blocks[i]);
            }
        }
        left.extend(self.unread.iter().map(String::as_str));
        left.truncate(MAX_NAMED);
        // The names are a hint, not a need: as many as fit.
        let head = "Other files (not shown): ";
        let mut line = String::new();
        for name in left {
            let sep = if line.is_empty() { head } else { ", " };
            if used + line.len() + sep.len() + name.len() + 1 > room {
                break;
            }
            line.push_str(sep);
            line.push_str(name);
        }
        if !line.is_empty() {
            text.push_str(&line);
            text.push('\n');
        }
        Rendered { text, files }
    }
}

/// The whole lines of `text` that fit in `room` bytes; none when only its first line (a
/// heading) or less would.
fn head_lines(text: &str, room: usize) -> String {
    let mut out = String::new();
    let mut lines = 0;
    for line in text.split_inclusive('\n') {
        if out.len() + line.len() > room {
            break;
        }
        out.push_str(line);
        lines += 1;
    }
    if lines < 2 { String::new() } else { out }
}

/// A read_file result's path (from its call) and the numbered lines it shows.
struct Read<'a> {
    path: String,
    lines: Vec<(usize, &'a str)>,
}

/// The lines a read_file result shows, as the tool numbers them (`   41| text`).
fn numbered(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .filter_map(|l| {
            let (n, rest) = l.split_once("| ")?;
            Some((n.trim().parse().ok()?, rest))
        })
        .collect()
}

fn clean(path: &str) -> String {
    path.trim().trim_start_matches("./").to_string()
}

/// Each read_file result of `messages` with its call's path, by message index.
fn reads(messages: &[Message]) -> Vec<(usize, Read<'_>)> {
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let Some((id, name)) = &m.answers else {
            continue;
        };
        if m.speaker != Speaker::Tool || name != "read_file" {
            continue;
        }
        let path = messages[..i]
            .iter()
            .rev()
            .flat_map(|a| a.tool_calls.iter())
            .find(|c| &c.id == id)
            .and_then(|c| c.arguments.get("path")?.as_str().map(clean));
        let lines = numbered(&m.content);
        if let Some(path) = path
            && !lines.is_empty()
        {
            out.push((i, Read { path, lines }));
        }
    }
    out
}

/// The messages with each file's lines shown at most once: a read_file result whose lines a
/// later read of the same file shows again becomes a pointer to the later one, and one whose
/// lines are already in the fixed context (`shown`: the files the first prompt has whole)
/// becomes a pointer to that, so the prompt's prefix is left as it was.
pub fn lean(mut messages: Vec<Message>, shown: &[(&str, &str)]) -> Vec<Message> {
    let reads = reads(&messages);
    let mut pointers: Vec<(usize, String)> = Vec::new();
    for (k, (i, read)) in reads.iter().enumerate() {
        let (first, last) = (read.lines[0].0, read.lines[read.lines.len() - 1].0);
        let again = reads[k + 1..].iter().any(|(_, later)| {
            later.path == read.path
                && read
                    .lines
                    .iter()
                    .all(|(n, _)| later.lines.iter().any(|(m, _)| m == n))
        });
        let in_prompt = shown.iter().any(|(path, text)| {
            *path == read.path && {
                let file: Vec<&str> = text.lines().collect();
                read.lines
                    .iter()
                    .all(|(n, l)| n.checked_sub(1).and_then(|n| file.get(n)) == Some(l))
            }
        });
        let pointer = if in_prompt {
            format!(
                "[file {} lines {first}-{last}: the same text is in the first message]",
                read.path
            )
        } else if again {
            format!(
                "[file {} lines {first}-{last}: shown again below]",
                read.path
            )
        } else {
            continue;
        };
        pointers.push((*i, pointer));
    }
    for (i, p) in pointers {
        messages[i].content = p;
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ToolCall;

    fn file(path: &str, text: &str) -> Piece {
        Piece {
            path: Some(path.into()),
            text: text.into(),
        }
    }

    #[test]
    fn the_render_keeps_the_map_then_whole_files_within_the_room() {
        let cx = Context {
            pieces: vec![
                file("big_test.py", &"x = 1\n".repeat(200)),
                Piece {
                    path: None,
                    text: "Repo map:\na.py:1: def f():\n".into(),
                },
                file("a.py", "def f():\n    return 1\n"),
                file("b.py", &"y = 2\n".repeat(100)),
            ],
            unread: vec!["c.py".into()],
        };
        let r = cx.render(400);
        assert!(r.text.len() <= 400, "{}", r.text.len());
        assert!(r.text.starts_with("Repo map:"), "{}", r.text);
        assert!(r.text.contains("a.py\n```\ndef f():\n    return 1\n```"));
        assert_eq!(r.files, [("a.py", "def f():\n    return 1\n")]);
        assert!(
            r.text
                .ends_with("Other files (not shown): big_test.py, b.py, c.py\n"),
            "{}",
            r.text
        );
        // With room, everything in the runtime's order.
        let all = cx.render(usize::MAX);
        assert!(all.text.starts_with("big_test.py\n"));
        assert_eq!(all.files.len(), 3);
        // No room: nothing, not even the names.
        assert_eq!(cx.render(0).text, "");
        // Room for part of a long map: its first (best-ranked) lines.
        let map: String = (1..=5)
            .map(|n| format!("m.py:{n}: def f{n}():\n"))
            .collect();
        let long = Context::from(format!("Repo map:\n{map}"));
        let r = long.render(60);
        assert_eq!(r.text, "Repo map:\nm.py:1: def f1():\nm.py:2: def f2():\n");
        let r = long.render(20);
        assert_eq!(r.text, "", "a heading alone is left out");
    }

    fn read(id: &str, path: &str, range: std::ops::RangeInclusive<usize>) -> Vec<Message> {
        let call = ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: serde_json::json!({"path": path}),
        };
        let text: String = range.map(|n| format!("{n:>6}| line {n}\n")).collect();
        vec![
            Message::calls(String::new(), vec![call.clone()]),
            Message::tool_result(&call, text),
        ]
    }

    #[test]
    fn a_file_read_twice_is_shown_once_and_the_prefix_stays() {
        let mut m = vec![Message::system("s"), Message::user("goal")];
        m.extend(read("1", "a.py", 1..=40));
        m.extend(read("2", "b.py", 1..=3));
        m.extend(read("3", "./a.py", 1..=60));
        let out = lean(m.clone(), &[]);
        assert_eq!(out[3].content, "[file a.py lines 1-40: shown again below]");
        assert_eq!(out[5], m[5], "another file stays");
        assert_eq!(out[7], m[7], "the later copy stays");
        // Lines the later read does not cover are not lost.
        let mut part = vec![Message::user("goal")];
        part.extend(read("1", "a.py", 1..=40));
        part.extend(read("2", "a.py", 30..=60));
        assert_eq!(lean(part.clone(), &[]), part);
        // Lines the first prompt has whole: the read points there, the first message stays.
        let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
        let mut m = vec![Message::user(format!("a.py\n```\n{text}```"))];
        m.extend(read("1", "a.py", 2..=5));
        let out = lean(m.clone(), &[("a.py", &text)]);
        assert_eq!(out[0], m[0]);
        assert_eq!(
            out[2].content,
            "[file a.py lines 2-5: the same text is in the first message]"
        );
        // Changed since: the read stays.
        assert_eq!(lean(m.clone(), &[("a.py", "other\n")]), m);
    }
}
