//! What one source file defines and what it refers to, read with tree-sitter: the raw
//! material of the repo map. Pure: a path and its text in, tags out.

use streaming_iterator::StreamingIterator;
use tree_sitter::{Node, Query, QueryCursor};

use crate::syntax::Lang;

/// A definition: a function, method, class, struct, type or trait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Def {
    pub name: String,
    /// 1-based line of the definition.
    pub line: u32,
    /// Its line as written (trimmed, without a trailing `{`), the map's text. Empty for tags
    /// read from the map's cache, which keeps no text: `signature_at` reads it again from the
    /// file when the map is rendered.
    pub signature: String,
}

/// A file's tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tags {
    pub defs: Vec<Def>,
    /// Identifiers the file uses, with how often (its own definitions' names left out).
    pub refs: Vec<(String, u32)>,
}

/// The definitions JavaScript and TypeScript share (TypeScript's grammar extends
/// JavaScript's); each adds its classes, which TypeScript names by a type identifier.
macro_rules! js_defs {
    () => {
        "(function_declaration name: (identifier) @name) @def
         (generator_function_declaration name: (identifier) @name) @def
         (method_definition name: (property_identifier) @name) @def
         (variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)]) @def
         "
    };
}

/// The definitions of each language, captured as `@name` inside `@def`. Written for these
/// grammars' node kinds; a test compiles every one.
fn def_query(lang: Lang) -> Option<&'static str> {
    Some(match lang {
        Lang::Python => {
            "(function_definition name: (identifier) @name) @def
             (class_definition name: (identifier) @name) @def"
        }
        Lang::Rust => {
            "(function_item name: (identifier) @name) @def
             (function_signature_item name: (identifier) @name) @def
             (struct_item name: (type_identifier) @name) @def
             (enum_item name: (type_identifier) @name) @def
             (trait_item name: (type_identifier) @name) @def
             (type_item name: (type_identifier) @name) @def
             (union_item name: (type_identifier) @name) @def
             (const_item name: (identifier) @name) @def
             (static_item name: (identifier) @name) @def
             (macro_definition name: (identifier) @name) @def"
        }
        Lang::Go => {
            "(function_declaration name: (identifier) @name) @def
             (method_declaration name: (field_identifier) @name) @def
             (type_spec name: (type_identifier) @name) @def"
        }
        Lang::JavaScript => concat!(
            js_defs!(),
            "(class_declaration name: (identifier) @name) @def"
        ),
        Lang::TypeScript | Lang::Tsx => concat!(
            js_defs!(),
            "(class_declaration name: (type_identifier) @name) @def
             (abstract_class_declaration name: (type_identifier) @name) @def
             (interface_declaration name: (type_identifier) @name) @def
             (type_alias_declaration name: (type_identifier) @name) @def
             (enum_declaration name: (identifier) @name) @def"
        ),
        Lang::Shell => return None,
    })
}

/// The definition query of `lang`, compiled once: compiling costs more than parsing a file.
fn compiled(lang: Lang) -> Option<&'static Query> {
    use std::sync::OnceLock;
    static QUERIES: [OnceLock<Option<Query>>; 7] = [const { OnceLock::new() }; 7];
    let slot = match lang {
        Lang::Python => 0,
        Lang::JavaScript => 1,
        Lang::TypeScript => 2,
        Lang::Tsx => 3,
        Lang::Rust => 4,
        Lang::Go => 5,
        Lang::Shell => 6,
    };
    QUERIES[slot]
        .get_or_init(|| Query::new(&lang.language(), def_query(lang)?).ok())
        .as_ref()
}

/// The node kinds that are uses of a name, in every grammar we read.
const IDENT_KINDS: &[&str] = &[
    "identifier",
    "type_identifier",
    "field_identifier",
    "property_identifier",
];

/// Reads `text` as `lang`; `None` for languages the map does not cover.
pub fn extract(lang: Lang, text: &str) -> Option<Tags> {
    let query = compiled(lang)?;
    let tree = lang.parse(text)?;
    let bytes = text.as_bytes();
    let name_ix = query.capture_index_for_name("name")?;
    let def_ix = query.capture_index_for_name("def")?;
    let mut defs = Vec::new();
    let lines: Vec<&str> = text.split('\n').collect();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, tree.root_node(), bytes);
    while let Some(m) = matches.next() {
        let name = m.captures.iter().find(|c| c.index == name_ix);
        let def = m.captures.iter().find(|c| c.index == def_ix);
        if let (Some(name), Some(def)) = (name, def)
            && let Ok(n) = name.node.utf8_text(bytes)
        {
            defs.push(Def {
                name: n.to_string(),
                line: def.node.start_position().row as u32 + 1,
                signature: lines
                    .get(def.node.start_position().row)
                    .map_or_else(String::new, |l| signature_of(l)),
            });
        }
    }
    defs.sort_by_key(|d| d.line);
    defs.dedup_by(|a, b| a.line == b.line && a.name == b.name);
    let mut counts: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let own: std::collections::HashSet<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    walk_idents(tree.root_node(), bytes, &mut |name| {
        if !own.contains(name) && name.len() > 1 {
            *counts.entry(name.to_string()).or_default() += 1;
        }
    });
    let mut refs: Vec<(String, u32)> = counts.into_iter().collect();
    refs.sort();
    Some(Tags { defs, refs })
}

/// A definition with its whole extent, for reading it by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub name: String,
    /// Its first and last 1-based lines.
    pub first: u32,
    pub last: u32,
}

/// Every definition of `text` read as `lang`, with its extent, in order of their first line;
/// `None` for languages the map does not cover. A definition inside another (a method in its
/// class) is listed on its own too.
pub fn spans(lang: Lang, text: &str) -> Option<Vec<Span>> {
    let query = compiled(lang)?;
    let tree = lang.parse(text)?;
    let bytes = text.as_bytes();
    let name_ix = query.capture_index_for_name("name")?;
    let def_ix = query.capture_index_for_name("def")?;
    let mut out = Vec::new();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, tree.root_node(), bytes);
    while let Some(m) = matches.next() {
        let name = m.captures.iter().find(|c| c.index == name_ix);
        let def = m.captures.iter().find(|c| c.index == def_ix);
        if let (Some(name), Some(def)) = (name, def)
            && let Ok(n) = name.node.utf8_text(bytes)
        {
            // A node ending at column 0 ends with the line before's newline.
            let end = def.node.end_position();
            let last = if end.column == 0 && end.row > 0 {
                end.row
            } else {
                end.row + 1
            };
            out.push(Span {
                name: n.to_string(),
                first: def.node.start_position().row as u32 + 1,
                last: last as u32,
            });
        }
    }
    out.sort_by_key(|s| (s.first, s.last));
    out.dedup();
    Some(out)
}

/// Every identifier leaf under `node`, without recursion (deep files would overflow the stack).
fn walk_idents(node: Node<'_>, bytes: &[u8], f: &mut impl FnMut(&str)) {
    let mut cursor = node.walk();
    loop {
        let n = cursor.node();
        if IDENT_KINDS.contains(&n.kind())
            && let Ok(t) = n.utf8_text(bytes)
        {
            f(t);
        }
        if cursor.goto_first_child() || cursor.goto_next_sibling() {
            continue;
        }
        loop {
            if !cursor.goto_parent() {
                return;
            }
            if cursor.goto_next_sibling() {
                break;
            }
        }
    }
}

/// The signature of a definition on 1-based `line` of `text`: that line, trimmed, without the
/// body's opening, at most 160 characters. The whole line rather than the definition's node
/// alone (`export function f()`, not `function f()`), so the map's cache need keep only the
/// line number. `None` past the end of the text.
pub fn signature_at(text: &str, line: u32) -> Option<String> {
    let line = text.split('\n').nth(line.checked_sub(1)? as usize)?;
    Some(signature_of(line))
}

/// `signature_at` for the line's text.
fn signature_of(line: &str) -> String {
    let line = line.trim().trim_end_matches('{').trim_end();
    let mut out: String = line.chars().take(160).collect();
    if line.chars().count() > 160 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(t: &Tags) -> Vec<(&str, u32)> {
        t.defs.iter().map(|d| (d.name.as_str(), d.line)).collect()
    }

    #[test]
    fn every_language_query_compiles() {
        for lang in [
            Lang::Python,
            Lang::Rust,
            Lang::Go,
            Lang::JavaScript,
            Lang::TypeScript,
            Lang::Tsx,
        ] {
            let q = Query::new(&lang.language(), def_query(lang).unwrap());
            assert!(q.is_ok(), "{lang:?}: {:?}", q.err());
        }
    }

    #[test]
    fn definitions_and_references_per_language() {
        let py = extract(
            Lang::Python,
            "class Cart:\n    def total(self, items):\n        return sum_prices(items)\n",
        )
        .unwrap();
        assert_eq!(names(&py), [("Cart", 1), ("total", 2)]);
        assert_eq!(py.defs[1].signature, "def total(self, items):");
        assert!(py.refs.iter().any(|(n, c)| n == "sum_prices" && *c == 1));
        assert!(!py.refs.iter().any(|(n, _)| n == "total"));

        let rs = extract(
            Lang::Rust,
            "pub struct Cart;\nimpl Cart {\n    pub fn total(&self) -> u32 {\n        price(1)\n    }\n}\ntrait T {}\n",
        )
        .unwrap();
        assert_eq!(names(&rs), [("Cart", 1), ("total", 3), ("T", 7)]);
        assert_eq!(rs.defs[1].signature, "pub fn total(&self) -> u32");

        let go = extract(
            Lang::Go,
            "package x\ntype Cart struct{}\nfunc (c Cart) Total() int { return Price() }\nfunc Price() int { return 1 }\n",
        )
        .unwrap();
        assert_eq!(names(&go), [("Cart", 2), ("Total", 3), ("Price", 4)]);

        let js = extract(
            Lang::JavaScript,
            "export function total(a) { return price(a) }\nconst price = (a) => a;\nclass Cart { sum() {} }\n",
        )
        .unwrap();
        assert_eq!(
            names(&js),
            [("total", 1), ("price", 2), ("Cart", 3), ("sum", 3)]
        );

        let ts = extract(
            Lang::TypeScript,
            "interface Item { price: number }\nexport function total(items: Item[]): number { return 0 }\ntype Id = string;\n",
        )
        .unwrap();
        assert_eq!(names(&ts), [("Item", 1), ("total", 2), ("Id", 3)]);
        assert_eq!(
            ts.defs[1].signature,
            "export function total(items: Item[]): number { return 0 }"
        );
        assert!(extract(Lang::Shell, "echo hi").is_none());
    }

    #[test]
    fn a_signature_is_its_line_trimmed_and_cut_at_160_characters() {
        let text = format!("a\n    def f(x):\r\nfn g() {{\n{}\n", "x".repeat(200));
        assert_eq!(signature_at(&text, 2).as_deref(), Some("def f(x):"));
        assert_eq!(signature_at(&text, 3).as_deref(), Some("fn g()"));
        let long = signature_at(&text, 4).unwrap();
        assert_eq!(long.chars().count(), 161);
        assert!(long.ends_with('…'));
        assert_eq!(signature_at(&text, 0), None);
        assert_eq!(signature_at(&text, 6), None);
    }

    #[test]
    fn a_definition_spans_its_body() {
        let py = "import os\n\n\nclass Cart:\n    def total(self):\n        return sum(self.items)\n\n    def empty(self):\n        return not self.items\n\n\ndef helper():\n    pass\n";
        let spans = spans(Lang::Python, py).unwrap();
        let got: Vec<(&str, u32, u32)> = spans
            .iter()
            .map(|s| (s.name.as_str(), s.first, s.last))
            .collect();
        assert_eq!(
            got,
            [
                ("Cart", 4, 9),
                ("total", 5, 6),
                ("empty", 8, 9),
                ("helper", 12, 13)
            ]
        );
        let js = "function add(a, b) {\n  return a + b;\n}\nconst twice = (x) => {\n  return add(x, x);\n};\n";
        let spans = super::spans(Lang::JavaScript, js).unwrap();
        assert_eq!((spans[0].first, spans[0].last), (1, 3));
        assert_eq!((spans[1].name.as_str(), spans[1].last), ("twice", 6));
    }
}
