//! The agent's tools: what the model may call to find its way in a workspace (read a file,
//! list a directory, find files by glob, grep, the known failures), run the tests or a
//! command, and propose edits. Each has a JSON schema, a description and a cap on its result
//! that is always enforced. The reading tools run here, through `Files`, which gives the
//! editor's unsaved buffer where there is one, and never leave the workspace; the driver runs
//! the others (commands through the test policy, edits through approval).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobSetBuilder};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{SearcherBuilder, sinks::UTF8};
use serde_json::{Value, json};

use crate::model::{ToolCall, ToolSpec};
use agent_ls_core::edit::{FileText, PathError, normalize_path};

mod symbols;

/// The workspace as the tools see it.
pub trait Files {
    fn root(&self) -> &Path;
    /// The text of a workspace-relative file: the editor's buffer when it has one.
    fn read(&self, relative: &str) -> FileText;
    /// Files that exist only as unsaved buffers (a file the agent created, not yet saved).
    fn unsaved_only(&self) -> Vec<String> {
        Vec::new()
    }
    /// The failures the last test run found, for `get_diagnostics`.
    fn diagnostics(&self) -> &[Diagnostic] {
        &[]
    }
}

/// One failure the server knows, as `get_diagnostics` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub path: String,
    pub line: u32,
    pub source: String,
    pub message: String,
}

/// The workspace as of one moment, owned, so tool calls can run on other threads at the same
/// time: the root, the editor's buffers, and the known failures.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub root: PathBuf,
    pub buffers: HashMap<String, FileText>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Files for Snapshot {
    fn root(&self) -> &Path {
        &self.root
    }
    fn read(&self, relative: &str) -> FileText {
        match self.buffers.get(relative) {
            Some(t) => t.clone(),
            None => crate::files::read_for_plan(&self.root, relative),
        }
    }
    fn unsaved_only(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .buffers
            .keys()
            .filter(|p| !self.root.join(p).exists())
            .cloned()
            .collect();
        out.sort();
        out
    }
    fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }
}

/// Caps on what a tool returns; the model's context is the scarce thing.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of one result; beyond them the head and the tail are kept with a marker.
    pub result_bytes: usize,
    /// Lines `read_file` returns when no range is asked for.
    pub page_lines: usize,
    /// Matches `grep` and paths `find_files` return.
    pub max_matches: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            result_bytes: 16_000,
            page_lines: 400,
            max_matches: 200,
        }
    }
}

/// A tool's answer, as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub text: String,
    /// The call failed (bad arguments, a path outside the workspace): the model hears why.
    pub is_error: bool,
}

impl Output {
    pub fn ok(text: String) -> Output {
        Output {
            text,
            is_error: false,
        }
    }
    pub fn error(text: impl Into<String>) -> Output {
        Output {
            text: text.into(),
            is_error: true,
        }
    }
}

/// What a tool does to the workspace, for a front end that shows tool calls by kind (ACP's
/// read, search, execute and edit icons). It says nothing of how a front end draws it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Reads files or what is known of them.
    Read,
    /// Searches the workspace.
    Search,
    /// Runs a command (the tests, an allowlisted program).
    Execute,
    /// Proposes a change to the files.
    Edit,
    /// Not a built-in tool (another server's, or an unknown name).
    Other,
}

/// The kind of the tool named `name`.
pub fn kind_of(name: &str) -> ToolKind {
    match name {
        "read_file" | "list_files" | "get_diagnostics" | "read_skill" | "outline"
        | "read_symbol" => ToolKind::Read,
        "find_files" | "grep" => ToolKind::Search,
        "run_tests" | "run_command" => ToolKind::Execute,
        "edit_file" | "write_file" | "apply_patch" => ToolKind::Edit,
        _ => ToolKind::Other,
    }
}

/// Why a built-in tool call gave no answer; the model reads the text.
#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error("there is no tool `{0}`; the tools are {names}", names = tool_names())]
    NoSuchTool(String),
    #[error("`{0}` is required")]
    Required(&'static str),
    #[error("`{name}` must be a string, not {value}")]
    NotAString { name: String, value: Value },
    #[error("`{name}` must be a line number from 1, not {value}")]
    NotALine { name: String, value: Value },
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("`{0}` does not exist")]
    Missing(String),
    /// The file cannot be read (not UTF-8, out of sync with the editor, ...): why.
    #[error("{0}")]
    Unreadable(String),
    #[error("`{path}` has {total} lines; start_line {start} is past its end")]
    PastEnd {
        path: String,
        total: usize,
        start: usize,
    },
    #[error("end_line {end} is before start_line {start}")]
    EndBeforeStart { end: usize, start: usize },
    #[error("`{}` is not a folder of the workspace", .0.display())]
    NotAFolder(PathBuf),
    #[error("bad glob `{glob}`: {source}")]
    BadGlob {
        glob: String,
        source: globset::Error,
    },
    #[error(
        "`{0}` is not a language the outline reads (Python, JavaScript, TypeScript, Rust, Go); read_file pages through it"
    )]
    NoOutline(String),
    #[error(
        "no definition named `{0}` (a function, method, class or type); grep finds where the name is used"
    )]
    NoSymbol(String),
    #[error("bad pattern `{pattern}`: {source}")]
    BadPattern {
        pattern: String,
        source: grep_regex::Error,
    },
}

/// The built-in tools' names, for the answer to an unknown one.
fn tool_names() -> String {
    specs()
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The specs of the tools named, in the registry's order (unknown names are skipped).
pub fn specs_named(names: &[String]) -> Vec<ToolSpec> {
    specs()
        .into_iter()
        .filter(|s| names.contains(&s.name))
        .collect()
}

/// Every built-in tool, as offered to the model.
pub fn specs() -> Vec<ToolSpec> {
    let mut all = vec![
        tool(
            "read_file",
            "Read a workspace file as numbered lines. Large files come a page at a time, whole lines only, with the file's outline first; ask for start_line to read on, or read one definition with read_symbol.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "relative to the workspace root"},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1}
            }, "required": ["path"]}),
        ),
        tool(
            "list_files",
            "List one directory of the workspace (files, and folders with a trailing /), skipping what .gitignore ignores.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "a folder relative to the workspace root; empty for the root"}
            }}),
        ),
        tool(
            "find_files",
            "Find workspace files whose path matches a glob, such as **/*.py or src/**/test_*.rs, skipping what .gitignore ignores.",
            json!({"type": "object", "properties": {"glob": {"type": "string"}}, "required": ["glob"]}),
        ),
        tool(
            "grep",
            "Search the workspace's files for a regular expression (smart case); returns path:line: text for each match, skipping what .gitignore ignores.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "maxLength": 200},
                "glob": {"type": "string", "description": "only files whose path matches this glob"}
            }, "required": ["pattern"]}),
        ),
        tool(
            "get_diagnostics",
            "The failures the last test run found, per file, as path:line: [source] message. Give a path for one file only.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        ),
        tool(
            "run_tests",
            "Run the workspace's tests (the configured command), or only those matching `filter` (a test name or path, passed to the test runner). Returns the failures and the output.",
            json!({"type": "object", "properties": {"filter": {"type": "string"}}}),
        ),
        tool(
            "run_command",
            "Run a command the test allowlist allows (an argument vector, no shell), in the sandbox; returns its output.",
            json!({"type": "object", "properties": {
                "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1}
            }, "required": ["argv"]}),
        ),
        tool(
            "edit_file",
            "Propose replacing the exact text `search` in a file with `replace` (an empty search creates the file). The change is shown to the user for approval, then tested; it ends your turn.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "search": {"type": "string"},
                "replace": {"type": "string"}
            }, "required": ["path", "search", "replace"]}),
        ),
        tool(
            "write_file",
            "Propose a file's whole new content (or a new file). Shown for approval, then tested; it ends your turn.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"}
            }, "required": ["path", "content"]}),
        ),
        tool(
            "apply_patch",
            "Propose a change as a unified diff (--- a/path, +++ b/path, @@ hunks). Shown for approval, then tested; it ends your turn.",
            json!({"type": "object", "properties": {"patch": {"type": "string"}}, "required": ["patch"]}),
        ),
    ];
    // The reading tools by structure come right after `read_file`.
    all.splice(1..1, structure_specs());
    all
}

/// `outline` and `read_symbol`'s specs.
fn structure_specs() -> Vec<ToolSpec> {
    vec![
        tool(
            "outline",
            "A source file's outline: each function, method, class and type with its line number, nested as in the file. Cheaper than reading the file; then read_symbol or read_file with start_line reads what matters.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "relative to the workspace root"}
            }, "required": ["path"]}),
        ),
        tool(
            "read_symbol",
            "Read a function, method, class or type whole, by name, as numbered lines: in `path`, or wherever the workspace defines it (up to 5 definitions).",
            json!({"type": "object", "properties": {
                "name": {"type": "string", "description": "the definition's name (`total`, or `Cart.total`)"},
                "path": {"type": "string", "description": "the file that defines it, when known"}
            }, "required": ["name"]}),
        ),
    ]
}

/// One tool's spec: its name, what it does (for the model) and its JSON Schema arguments.
fn tool(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters,
    }
}

/// Runs one call; every failure is an answer for the model, never an error of the run.
pub fn run(call: &ToolCall, files: &dyn Files, limits: &Limits) -> Output {
    let args = &call.arguments;
    let out = match call.name.as_str() {
        "read_file" => read_file(args, files, limits),
        "outline" => outline(args, files, limits),
        "read_symbol" => read_symbol(args, files, limits),
        "list_files" => list_files(args, files, limits),
        "find_files" => find_files(args, files, limits),
        "grep" => grep(args, files, limits),
        "get_diagnostics" => get_diagnostics(args, files),
        other => Err(ToolError::NoSuchTool(other.into())),
    };
    match out {
        Ok(text) => Output::ok(cap(&text, limits.result_bytes)),
        Err(why) => Output::error(cap(&why.to_string(), limits.result_bytes)),
    }
}

/// `text` cut to `max` bytes: its head and tail, with a marker that says how much went.
pub fn cap(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let keep = max.saturating_sub(64) / 2;
    let mut head = keep;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - keep;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes cut ...]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

fn str_arg<'a>(args: &'a Value, name: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ToolError::NotAString {
            name: name.into(),
            value: other.clone(),
        }),
    }
}

fn line_arg(args: &Value, name: &str) -> Result<Option<usize>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .map(|n| Some(n as usize))
            .ok_or_else(|| ToolError::NotALine {
                name: name.into(),
                value: v.clone(),
            }),
    }
}

fn relative(files: &dyn Files, raw: &str) -> Result<String, ToolError> {
    Ok(normalize_path(files.root(), raw)?)
}

fn read_file(args: &Value, files: &dyn Files, limits: &Limits) -> Result<String, ToolError> {
    let path = str_arg(args, "path")?.ok_or(ToolError::Required("path"))?;
    let rel = relative(files, path)?;
    let text = match files.read(&rel) {
        FileText::Text(t) => t,
        FileText::Missing => return Err(ToolError::Missing(rel)),
        FileText::Refused(why) => return Err(ToolError::Unreadable(why)),
    };
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    let start = line_arg(args, "start_line")?.unwrap_or(1);
    let end = line_arg(args, "end_line")?
        .unwrap_or(start + limits.page_lines - 1)
        .min(total);
    if total == 0 {
        return Ok(format!("{rel} is empty"));
    }
    if start > total {
        return Err(ToolError::PastEnd {
            path: rel,
            total,
            start,
        });
    }
    if end < start {
        return Err(ToolError::EndBeforeStart { end, start });
    }
    // Whole lines up to the result's budget: a cap never cuts the middle of what is shown.
    let mut budget = limits.result_bytes.saturating_sub(200);
    let mut out = String::new();
    if line_arg(args, "start_line")?.is_none() && (end < total || text.len() > budget) {
        let room = budget / 4;
        if let Some(o) = symbols::outline_of(&rel, &text, room) {
            out.push_str(&format!("{rel} ({total} lines) defines:\n{o}\n"));
            budget = budget.saturating_sub(out.len());
        }
    }
    let (body, shown) = symbols::numbered(&lines, (start, end), budget);
    out.push_str(&body);
    if shown < total {
        out.push_str(&format!(
            "[lines {start}-{shown} of {total}; read on with start_line {}]\n",
            shown + 1
        ));
    }
    Ok(out)
}

/// `outline {path}`: the file's definitions by line.
fn outline(args: &Value, files: &dyn Files, limits: &Limits) -> Result<String, ToolError> {
    let path = str_arg(args, "path")?.ok_or(ToolError::Required("path"))?;
    let rel = relative(files, path)?;
    let text = match files.read(&rel) {
        FileText::Text(t) => t,
        FileText::Missing => return Err(ToolError::Missing(rel)),
        FileText::Refused(why) => return Err(ToolError::Unreadable(why)),
    };
    let total = text.lines().count();
    match symbols::outline_of(&rel, &text, limits.result_bytes.saturating_sub(200)) {
        Some(o) => Ok(format!(
            "{rel} ({total} lines), its definitions by line (read_symbol reads one whole):\n{o}"
        )),
        None => Err(ToolError::NoOutline(rel)),
    }
}

/// `read_symbol {name, path?}`: each definition named `name` (in `path`, or anywhere in the
/// workspace), whole, as numbered lines. `Cart.total` (or `Cart::total`) is the `total`
/// inside `Cart`.
fn read_symbol(args: &Value, files: &dyn Files, limits: &Limits) -> Result<String, ToolError> {
    let asked = str_arg(args, "name")?.ok_or(ToolError::Required("name"))?;
    let mut parts = asked.rsplit(['.', ':']).filter(|p| !p.trim().is_empty());
    let name = parts
        .next()
        .map(str::trim)
        .ok_or(ToolError::Required("name"))?;
    let within = parts.next().map(str::trim);
    let paths = match str_arg(args, "path")? {
        Some(p) => vec![relative(files, p)?],
        None => {
            let mut all = workspace_files(files.root(), None);
            all.extend(files.unsaved_only());
            all
        }
    };
    let texts = paths.into_iter().filter_map(|rel| match files.read(&rel) {
        FileText::Text(t) => Some((rel, t)),
        _ => None,
    });
    let found = symbols::definitions((name, within), texts);
    if found.is_empty() {
        return Err(ToolError::NoSymbol(asked.to_string()));
    }
    Ok(symbols::show_definitions(
        &found,
        limits.result_bytes.saturating_sub(200),
    ))
}

fn rel_of(root: &Path, path: &Path) -> Option<String> {
    crate::walk::relative(root, path)
}

fn list_files(args: &Value, files: &dyn Files, limits: &Limits) -> Result<String, ToolError> {
    let root = files.root();
    let dir = match str_arg(args, "path")?.filter(|p| !p.trim().is_empty() && *p != ".") {
        Some(p) => root.join(relative(files, p)?),
        None => root.to_path_buf(),
    };
    if !dir.is_dir() {
        return Err(ToolError::NotAFolder(dir));
    }
    let mut entries: Vec<String> = crate::walk::builder(&dir, Some(1))
        .build()
        .flatten()
        .filter(|e| e.depth() == 1)
        .filter_map(|e| {
            let rel = rel_of(root, e.path())?;
            Some(if e.file_type().is_some_and(|t| t.is_dir()) {
                format!("{rel}/")
            } else {
                rel
            })
        })
        .collect();
    // A file the agent created that the editor has not saved yet is listed too.
    let dir_rel = dir
        .strip_prefix(root)
        .ok()
        .and_then(Path::to_str)
        .unwrap_or("")
        .to_string();
    entries.extend(
        files
            .unsaved_only()
            .into_iter()
            .filter(|p| Path::new(p).parent().and_then(Path::to_str).unwrap_or("") == dir_rel),
    );
    entries.sort();
    let total = entries.len();
    entries.truncate(limits.max_matches * 5);
    let mut out = entries.join("\n");
    if total > entries.len() {
        out.push_str(&format!("\n[{} more entries]", total - entries.len()));
    }
    Ok(if out.is_empty() {
        "(empty)".into()
    } else {
        out
    })
}

fn glob_set(glob: &str) -> Result<globset::GlobSet, ToolError> {
    let bad = |source| ToolError::BadGlob {
        glob: glob.into(),
        source,
    };
    // A glob without a folder part matches a file name anywhere, as a user means `*.py`.
    let mut b = GlobSetBuilder::new();
    b.add(Glob::new(glob).map_err(bad)?);
    if !glob.contains('/') {
        b.add(Glob::new(&format!("**/{glob}")).map_err(bad)?);
    }
    b.build().map_err(bad)
}

/// The workspace's files (relative paths, sorted), those matching `glob` when given.
fn workspace_files(root: &Path, glob: Option<&globset::GlobSet>) -> Vec<String> {
    let mut out = crate::walk::files_parallel(root, |rel, _| {
        glob.is_none_or(|g| g.is_match(&rel)).then_some(rel)
    });
    out.sort();
    out
}

fn find_files(args: &Value, files: &dyn Files, limits: &Limits) -> Result<String, ToolError> {
    let glob = str_arg(args, "glob")?.ok_or(ToolError::Required("glob"))?;
    let set = glob_set(glob)?;
    let mut found = workspace_files(files.root(), Some(&set));
    found.extend(files.unsaved_only().into_iter().filter(|p| set.is_match(p)));
    found.sort();
    if found.is_empty() {
        return Ok(format!("no file matches `{glob}`"));
    }
    let total = found.len();
    let mut out = found[..total.min(limits.max_matches)].join("\n");
    if total > limits.max_matches {
        out.push_str(&format!(
            "\n[{} more; narrow the glob]",
            total - limits.max_matches
        ));
    }
    Ok(out)
}

fn get_diagnostics(args: &Value, files: &dyn Files) -> Result<String, ToolError> {
    let only = str_arg(args, "path")?
        .map(|p| relative(files, p))
        .transpose()?;
    let mut lines: Vec<String> = files
        .diagnostics()
        .iter()
        .filter(|d| only.as_ref().is_none_or(|p| *p == d.path))
        .map(|d| {
            let first = d.message.lines().next().unwrap_or("");
            format!("{}:{}: [{}] {first}", d.path, d.line, d.source)
        })
        .collect();
    lines.sort();
    lines.dedup();
    Ok(if lines.is_empty() {
        "no failures are known (run_tests to find out)".into()
    } else {
        lines.join("\n")
    })
}

fn grep(args: &Value, files: &dyn Files, limits: &Limits) -> Result<String, ToolError> {
    let pattern = str_arg(args, "pattern")?.ok_or(ToolError::Required("pattern"))?;
    let matcher = RegexMatcherBuilder::new()
        .case_smart(true)
        .build(pattern)
        .map_err(|source| ToolError::BadPattern {
            pattern: pattern.into(),
            source,
        })?;
    let set = str_arg(args, "glob")?.map(glob_set).transpose()?;
    let mut searcher = SearcherBuilder::new().line_number(true).build();
    let mut hits: Vec<String> = Vec::new();
    let mut more = 0usize;
    let mut paths = workspace_files(files.root(), set.as_ref());
    paths.extend(
        files
            .unsaved_only()
            .into_iter()
            .filter(|p| set.as_ref().is_none_or(|g| g.is_match(p))),
    );
    for rel in paths {
        // The buffer's text where the editor has one; binary and unreadable files are skipped.
        let FileText::Text(text) = files.read(&rel) else {
            continue;
        };
        let _ = searcher.search_slice(
            &matcher,
            text.as_bytes(),
            UTF8(|line, found| {
                if hits.len() < limits.max_matches {
                    let found = found.trim_end_matches(['\n', '\r']);
                    let shown: String = found.chars().take(300).collect();
                    hits.push(format!("{rel}:{line}: {shown}"));
                } else {
                    more += 1;
                }
                Ok(true)
            }),
        );
    }
    if hits.is_empty() {
        return Ok(format!("no match for `{pattern}`"));
    }
    let mut out = hits.join("\n");
    if more > 0 {
        out.push_str(&format!(
            "\n[{more} more matches; narrow the pattern or the glob]"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Disk {
        root: std::path::PathBuf,
        buffers: HashMap<String, String>,
    }

    impl Files for Disk {
        fn root(&self) -> &Path {
            &self.root
        }
        fn read(&self, rel: &str) -> FileText {
            match self.buffers.get(rel) {
                Some(t) => FileText::Text(t.clone()),
                None => crate::files::read_for_plan(&self.root, rel),
            }
        }
    }

    fn workspace() -> (tempfile::TempDir, Disk) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for (p, t) in [
            ("src/app/core.py", "def total(x):\n    return base(x) * 2\n"),
            ("src/app/util.py", "def base(x):\n    return x\n"),
            ("tests/test_core.py", "from app.core import total\n"),
            ("build/out.py", "def base(x): pass\n"),
            (".gitignore", "build/\n"),
        ] {
            std::fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
            std::fs::write(root.join(p), t).unwrap();
        }
        let disk = Disk {
            root,
            buffers: HashMap::new(),
        };
        (dir, disk)
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "1".into(),
            name: name.into(),
            arguments,
        }
    }

    #[test]
    fn grep_finds_lines_in_buffers_and_files_and_skips_ignored_ones() {
        let (_d, mut ws) = workspace();
        ws.buffers.insert(
            "src/app/util.py".into(),
            "def base(x):\n    return x + 1  # unsaved\n".into(),
        );
        let out = run(
            &call("grep", json!({"pattern": "def base|unsaved"})),
            &ws,
            &Limits::default(),
        );
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(
            out.text,
            "src/app/util.py:1: def base(x):\nsrc/app/util.py:2:     return x + 1  # unsaved"
        );
        let py = run(
            &call("grep", json!({"pattern": "total", "glob": "tests/**"})),
            &ws,
            &Limits::default(),
        );
        assert_eq!(py.text, "tests/test_core.py:1: from app.core import total");
    }

    #[test]
    fn read_file_numbers_lines_and_pages_through_large_files() {
        let (_d, ws) = workspace();
        let big: String = (1..=1000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(ws.root.join("big.txt"), big).unwrap();
        let out = run(
            &call("read_file", json!({"path": "big.txt"})),
            &ws,
            &Limits::default(),
        );
        assert!(out.text.starts_with("     1| line 1\n"));
        assert!(
            out.text
                .ends_with("[lines 1-400 of 1000; read on with start_line 401]\n")
        );
        let range = run(
            &call("read_file", json!({"path": "big.txt", "start_line": 999})),
            &ws,
            &Limits::default(),
        );
        assert_eq!(range.text, "   999| line 999\n  1000| line 1000\n");
        for bad in [
            json!({"path": "../etc/passwd"}),
            json!({"path": "/etc/passwd"}),
            json!({"path": 3}),
            json!({"path": "nope.py"}),
        ] {
            let out = run(&call("read_file", bad.clone()), &ws, &Limits::default());
            assert!(out.is_error, "{bad}: {}", out.text);
        }
    }

    #[test]
    fn list_and_find_honour_gitignore() {
        let (_d, ws) = workspace();
        let list = run(&call("list_files", json!({})), &ws, &Limits::default());
        assert_eq!(list.text, "src/\ntests/");
        let sub = run(
            &call("list_files", json!({"path": "src/app"})),
            &ws,
            &Limits::default(),
        );
        assert_eq!(sub.text, "src/app/core.py\nsrc/app/util.py");
        let found = run(
            &call("find_files", json!({"glob": "*.py"})),
            &ws,
            &Limits::default(),
        );
        assert_eq!(
            found.text,
            "src/app/core.py\nsrc/app/util.py\ntests/test_core.py"
        );
    }

    #[test]
    fn a_file_only_in_an_unsaved_buffer_is_listed_found_and_grepped() {
        let (_d, ws) = workspace();
        let mut buffers = HashMap::new();
        buffers.insert(
            "src/app/new_mod.py".to_string(),
            FileText::Text("def fresh():\n    pass\n".into()),
        );
        let snap = Snapshot {
            root: ws.root.clone(),
            buffers,
            diagnostics: vec![Diagnostic {
                path: "tests/test_core.py".into(),
                line: 1,
                source: "test_total".into(),
                message: "AssertionError: 2 != 3\nmore".into(),
            }],
        };
        let limits = Limits::default();
        let list = run(
            &call("list_files", json!({"path": "src/app"})),
            &snap,
            &limits,
        );
        assert!(list.text.contains("src/app/new_mod.py"), "{}", list.text);
        let found = run(&call("find_files", json!({"glob": "*.py"})), &snap, &limits);
        assert!(found.text.contains("src/app/new_mod.py"), "{}", found.text);
        let grep = run(
            &call("grep", json!({"pattern": "def fresh"})),
            &snap,
            &limits,
        );
        assert_eq!(grep.text, "src/app/new_mod.py:1: def fresh():");
        let diags = run(&call("get_diagnostics", json!({})), &snap, &limits);
        assert_eq!(
            diags.text,
            "tests/test_core.py:1: [test_total] AssertionError: 2 != 3"
        );
        let none = run(
            &call("get_diagnostics", json!({"path": "src/app/core.py"})),
            &snap,
            &limits,
        );
        assert!(
            none.text.starts_with("no failures are known"),
            "{}",
            none.text
        );
    }

    #[test]
    fn every_result_is_capped_and_unknown_tools_are_answered() {
        let (_d, ws) = workspace();
        let line = format!("x{}\n", "y".repeat(200));
        std::fs::write(ws.root.join("wide.txt"), line.repeat(500)).unwrap();
        let limits = Limits {
            result_bytes: 1000,
            ..Limits::default()
        };
        let out = run(
            &call("read_file", json!({"path": "wide.txt"})),
            &ws,
            &limits,
        );
        assert!(out.text.len() <= 1000, "{}", out.text.len());
        // Whole lines up to the cap, then where to read on; never a cut middle.
        assert!(!out.text.contains("bytes cut"), "{}", out.text);
        assert!(
            out.text.ends_with("read on with start_line 4]\n"),
            "{}",
            out.text
        );
        // Other results are cut to their head and tail.
        let listed = run(&call("grep", json!({"pattern": "y"})), &ws, &limits);
        assert!(listed.text.len() <= 1000 && listed.text.contains("bytes cut"));
        let unknown = run(&call("rm_rf", json!({})), &ws, &limits);
        assert!(unknown.is_error && unknown.text.contains("read_file"));
        // Cut between characters, never inside one, and within the cap.
        let wide = cap(&"é".repeat(100), 100);
        assert!(
            wide.len() <= 100 && wide.starts_with("éé") && wide.ends_with("éé"),
            "{wide}"
        );
    }

    #[test]
    fn a_large_source_file_comes_as_its_outline_and_whole_lines() {
        let (_d, ws) = workspace();
        let mut src = String::new();
        for i in 0..300 {
            src.push_str(&format!(
                "def f{i}(value):\n    \"\"\"{}\"\"\"\n    return value + {i}\n\n",
                "words ".repeat(12)
            ));
        }
        std::fs::write(ws.root.join("big.py"), &src).unwrap();
        let limits = Limits::default();
        let out = run(&call("read_file", json!({"path": "big.py"})), &ws, &limits);
        assert!(!out.is_error, "{}", out.text);
        assert!(out.text.len() <= limits.result_bytes, "{}", out.text.len());
        assert!(
            out.text.starts_with("big.py (1200 lines) defines:\n"),
            "{}",
            &out.text[..200]
        );
        assert!(out.text.contains("     1| def f0(value):\n"));
        // No middle cut: the text ends with the line to read on from, after a whole line.
        assert!(!out.text.contains("bytes cut"), "{}", out.text);
        let footer = out.text.lines().last().unwrap();
        assert!(
            footer.starts_with("[lines 1-") && footer.contains("read on with start_line"),
            "{footer}"
        );
        // A range asked for gets no outline.
        let page = run(
            &call(
                "read_file",
                json!({"path": "big.py", "start_line": 5, "end_line": 6}),
            ),
            &ws,
            &limits,
        );
        assert!(
            page.text.starts_with("     5| def f1(value):\n"),
            "{}",
            page.text
        );
    }

    #[test]
    fn a_definition_is_read_whole_by_name_and_a_file_by_its_outline() {
        let (_d, ws) = workspace();
        std::fs::create_dir_all(ws.root.join("shop")).unwrap();
        std::fs::write(
            ws.root.join("shop/cart.py"),
            "class Cart:\n    def __init__(self):\n        self.items = []\n\n    def total(self):\n        return sum(i.price for i in self.items)\n",
        )
        .unwrap();
        let limits = Limits::default();
        let out = run(
            &call("read_symbol", json!({"name": "Cart.total"})),
            &ws,
            &limits,
        );
        assert_eq!(
            out.text,
            "shop/cart.py:5-6\n     5|     def total(self):\n     6|         return sum(i.price for i in self.items)\n"
        );
        let outline = run(
            &call("outline", json!({"path": "shop/cart.py"})),
            &ws,
            &limits,
        );
        assert!(
            outline.text.contains(
                "     1  class Cart:\n     2    def __init__(self):\n     5    def total(self):\n"
            ),
            "{}",
            outline.text
        );
        let none = run(
            &call("read_symbol", json!({"name": "missing_fn"})),
            &ws,
            &limits,
        );
        assert!(none.is_error && none.text.contains("no definition named `missing_fn`"));
        std::fs::write(ws.root.join("notes.txt"), "plain words\n").unwrap();
        let txt = run(&call("outline", json!({"path": "notes.txt"})), &ws, &limits);
        assert!(txt.is_error, "{}", txt.text);
    }
}
