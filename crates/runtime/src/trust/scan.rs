//! The static scan of a proposed change: tree-sitter queries over the file before and after
//! find the risky constructs the change introduces (spawning a shell or a process, eval and
//! exec, network calls, writes outside the workspace, mass deletion, tests skipped or
//! deleted), for Python, JavaScript/TypeScript, Rust, Go and shell. Pure: texts in, findings
//! out. A finding is shown with the proposal, and under `approval = "auto"` it turns the step
//! back into a question.

use std::collections::BTreeMap;

use serde::Serialize;
use streaming_iterator::StreamingIterator;
use tree_sitter::{Node, Query, QueryCursor};

use agent_ls_core::syntax::Lang;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Runs a shell or another program.
    SpawnsProcess,
    /// Evaluates code built at run time.
    Eval,
    /// Talks to the network.
    Network,
    /// Writes a path outside the workspace.
    WritesOutside,
    /// Deletes a folder tree.
    MassDeletion,
    /// Skips a test.
    SkipsTest,
    /// Removes a test.
    DeletesTest,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::SpawnsProcess => "spawns a process",
            Risk::Eval => "evaluates code",
            Risk::Network => "makes a network call",
            Risk::WritesOutside => "writes outside the workspace",
            Risk::MassDeletion => "deletes a folder tree",
            Risk::SkipsTest => "skips a test",
            Risk::DeletesTest => "deletes a test",
        }
    }
}

/// One risky construct a change brings in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub path: String,
    pub risk: Risk,
    /// 1-based line in the new text (0 for a deleted test).
    pub line: usize,
    /// The construct, as written.
    pub text: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 0 {
            write!(
                f,
                "{}:{}: {}: {}",
                self.path,
                self.line,
                self.risk.as_str(),
                self.text
            )
        } else {
            write!(f, "{}: {}: {}", self.path, self.risk.as_str(), self.text)
        }
    }
}

/// The risky constructs `new` has more of than `old` (`None` for a new file), in `path`.
pub fn introduced(path: &str, old: Option<&str>, new: &str) -> Vec<Finding> {
    let Some(lang) = Lang::of(path, new) else {
        return Vec::new();
    };
    let before = old.map(|o| constructs(lang, o)).unwrap_or_default();
    let after = constructs(lang, new);
    let mut seen: BTreeMap<(Risk, String), usize> = BTreeMap::new();
    for c in &before.risky {
        *seen.entry((c.risk, c.key.clone())).or_default() += 1;
    }
    let mut out = Vec::new();
    for c in after.risky {
        let left = seen.entry((c.risk, c.key.clone())).or_default();
        if *left > 0 {
            *left -= 1;
        } else {
            out.push(Finding {
                path: path.to_string(),
                risk: c.risk,
                line: c.line,
                text: c.text,
            });
        }
    }
    for test in before.tests {
        if !after.tests.contains(&test) {
            out.push(Finding {
                path: path.to_string(),
                risk: Risk::DeletesTest,
                line: 0,
                text: test,
            });
        }
    }
    out
}

struct Construct {
    risk: Risk,
    /// What makes two constructs the same across the change (the callee and its arguments).
    key: String,
    line: usize,
    text: String,
}

#[derive(Default)]
struct Constructs {
    risky: Vec<Construct>,
    tests: Vec<String>,
}

/// The query per language: `@call` with its `@callee`, `@decorator` (Python decorators, Rust
/// attributes), and `@def` (function names, for tests).
fn query_source(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => {
            "(call function: (_) @callee) @call\n(decorator) @decorator\n(function_definition name: (identifier) @def)"
        }
        Lang::JavaScript | Lang::TypeScript | Lang::Tsx => {
            "(call_expression function: (_) @callee) @call\n(new_expression constructor: (_) @callee) @call"
        }
        Lang::Rust => {
            "(call_expression function: (_) @callee) @call\n(macro_invocation macro: (_) @callee) @call\n(attribute_item) @decorator\n(function_item name: (identifier) @def)"
        }
        Lang::Go => {
            "(call_expression function: (_) @callee) @call\n(function_declaration name: (identifier) @def)"
        }
        Lang::Shell => "(command name: (command_name) @callee) @call",
    }
}

fn constructs(lang: Lang, text: &str) -> Constructs {
    let mut out = Constructs::default();
    let Some(tree) = lang.parse(text) else {
        return out;
    };
    let Ok(query) = Query::new(&lang.language(), query_source(lang)) else {
        return out;
    };
    let names = query.capture_names();
    let src = text.as_bytes();
    let node_text = |n: Node| n.utf8_text(src).unwrap_or("").to_string();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(&query, tree.root_node(), src);
    while let Some(m) = matches.next() {
        let mut call = None;
        let mut callee = None;
        for c in m.captures {
            match names[c.index as usize] {
                "call" => call = Some(c.node),
                "callee" => callee = Some(c.node),
                "decorator" => {
                    let t = node_text(c.node);
                    if skips(lang, &t) {
                        out.risky.push(construct(Risk::SkipsTest, c.node, &t));
                    }
                }
                "def" => {
                    if let Some(name) = test_name(lang, c.node, src) {
                        out.tests.push(name);
                    }
                }
                _ => {}
            }
        }
        if let (Some(call), Some(callee)) = (call, callee) {
            let (callee_text, call_text) = (node_text(callee), node_text(call));
            for risk in classify(lang, &callee_text, &call_text) {
                out.risky.push(construct(risk, call, &call_text));
            }
            if let Some(name) = js_test_name(lang, &callee_text, call, src) {
                out.tests.push(name);
            }
        }
    }
    out
}

fn construct(risk: Risk, node: Node, text: &str) -> Construct {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let shown: String = one_line.chars().take(120).collect();
    Construct {
        risk,
        key: one_line,
        line: node.start_position().row + 1,
        text: shown,
    }
}

/// The last segment of a callee (`subprocess.run` → `run`), and the whole, normalised.
fn parts(callee: &str) -> (String, String) {
    let whole: String = callee.split_whitespace().collect();
    let last = whole
        .rsplit(['.', ':'])
        .next()
        .unwrap_or(&whole)
        .to_string();
    (whole, last)
}

/// A string literal holding an absolute path, a home path or a parent path.
fn names_outside_path(call: &str) -> bool {
    ["\"/", "'/", "`/", "\"~", "'~", "\"../", "'../", "r\"/"]
        .iter()
        .any(|p| call.contains(p))
}

/// The risks of one call: a write outside the workspace in any language, then what the
/// language's own names say: a table of rules per language, and a function for shell, whose
/// risks hang on the command's words.
fn classify(lang: Lang, callee: &str, call: &str) -> Vec<Risk> {
    let c = Call::new(callee, call);
    let mut out = Vec::new();
    if writes_outside(&c) {
        out.push(Risk::WritesOutside);
    }
    match lang {
        Lang::Python => table_risks(PYTHON, &c, &mut out),
        Lang::JavaScript | Lang::TypeScript | Lang::Tsx => table_risks(JAVASCRIPT, &c, &mut out),
        Lang::Rust => table_risks(RUST, &c, &mut out),
        Lang::Go => table_risks(GO, &c, &mut out),
        Lang::Shell => shell_risks(&c, &mut out),
    }
    out
}

/// A call as `classify` reads it: its callee whole and by its last segment, and its text.
struct Call<'a> {
    whole: String,
    last: String,
    text: &'a str,
}

impl<'a> Call<'a> {
    fn new(callee: &str, text: &'a str) -> Self {
        let (whole, last) = parts(callee);
        Call { whole, last, text }
    }

    /// The whole callee is one of `names`.
    fn is(&self, names: &[&str]) -> bool {
        names.contains(&self.whole.as_str())
    }

    /// The callee's last segment is one of `names`.
    fn last_is(&self, names: &[&str]) -> bool {
        names.contains(&self.last.as_str())
    }
}

/// A write (in any language) to a path a string literal names outside the workspace.
fn writes_outside(c: &Call) -> bool {
    let writes = c.last_is(&[
        "open",
        "write_text",
        "write_bytes",
        "writeFile",
        "writeFileSync",
        "appendFile",
        "appendFileSync",
        "createWriteStream",
        "create",
        "write",
        "WriteFile",
        "Create",
        "OpenFile",
        "copy",
        "move",
        "rename",
    ]);
    if !writes || !names_outside_path(c.text) {
        return false;
    }
    // `open` reads as often as it writes: count it only with a write mode.
    c.last != "open"
        || [
            "'w", "\"w", "'a", "\"a", "'x", "\"x", "O_WRONLY", "O_CREATE",
        ]
        .iter()
        .any(|m| c.text.contains(m))
}

/// How a rule names the calls it flags. `Is`, `Last`, `Prefix` and `Suffix` match the
/// callee (whole, by its last segment, by how it starts or ends) against any of their names.
enum Name {
    Is(&'static [&'static str]),
    Last(&'static [&'static str]),
    Prefix(&'static [&'static str]),
    Suffix(&'static [&'static str]),
    /// The call's text (its arguments too) contains this.
    Text(&'static str),
    All(&'static [Name]),
    Not(&'static Name),
}

impl Name {
    fn matches(&self, c: &Call) -> bool {
        match self {
            Name::Is(names) => c.is(names),
            Name::Last(names) => c.last_is(names),
            Name::Prefix(p) => p.iter().any(|p| c.whole.starts_with(p)),
            Name::Suffix(s) => s.iter().any(|s| c.whole.ends_with(s)),
            Name::Text(t) => c.text.contains(t),
            Name::All(all) => all.iter().all(|n| n.matches(c)),
            Name::Not(n) => !n.matches(c),
        }
    }
}

/// A risk and the calls that carry it: any of the names.
type Rule = (Risk, &'static [Name]);

use Name::{All, Is, Last, Not, Prefix, Suffix, Text};

/// Python: subprocess and os.exec*, eval, the HTTP and socket modules, rmtree, skips.
const PYTHON: &[Rule] = &[
    (
        Risk::SpawnsProcess,
        &[
            Prefix(&["subprocess.", "os.exec", "os.spawn"]),
            Is(&["os.system", "os.popen", "pty.spawn", "commands.getoutput"]),
        ],
    ),
    (
        Risk::Eval,
        &[Is(&["eval", "exec", "compile", "__import__"])],
    ),
    (
        Risk::Network,
        &[
            Prefix(&[
                "requests.",
                "urllib.",
                "httpx.",
                "aiohttp.",
                "http.client.",
                "socket.",
                "ftplib.",
                "smtplib.",
            ]),
            Is(&["urlopen", "create_connection"]),
        ],
    ),
    (
        Risk::MassDeletion,
        &[Is(&["shutil.rmtree", "os.removedirs"]), Last(&["rmtree"])],
    ),
    (
        Risk::SkipsTest,
        &[Is(&["pytest.skip", "self.skipTest", "unittest.skip"])],
    ),
];

/// JavaScript and TypeScript: child_process, eval, fetch and sockets, recursive rm, skipped tests.
const JAVASCRIPT: &[Rule] = &[
    (
        Risk::SpawnsProcess,
        &[All(&[
            Last(&[
                "exec",
                "execSync",
                "spawn",
                "spawnSync",
                "execFile",
                "execFileSync",
                "fork",
            ]),
            // `RegExp(...).exec` and `regex.exec` match text; they run nothing.
            Not(&Prefix(&["RegExp"])),
            Not(&Suffix(&["regex.exec"])),
        ])],
    ),
    (
        Risk::Eval,
        &[Is(&[
            "eval",
            "Function",
            "vm.runInNewContext",
            "vm.runInThisContext",
        ])],
    ),
    (
        Risk::Network,
        &[
            Is(&[
                "fetch",
                "XMLHttpRequest",
                "WebSocket",
                "net.connect",
                "net.createConnection",
                "http.request",
                "https.request",
                "http.get",
                "https.get",
            ]),
            Prefix(&["axios"]),
        ],
    ),
    (
        Risk::MassDeletion,
        &[
            All(&[
                Last(&["rmSync", "rm", "rmdirSync", "rmdir"]),
                Text("recursive"),
            ]),
            Last(&["rimraf"]),
        ],
    ),
    (
        Risk::SkipsTest,
        &[Is(&[
            "it.skip",
            "describe.skip",
            "test.skip",
            "xit",
            "xdescribe",
            "xtest",
            "it.todo",
        ])],
    ),
];

/// Rust: Command::new, sockets and HTTP clients, remove_dir_all.
const RUST: &[Rule] = &[
    (Risk::SpawnsProcess, &[Suffix(&["Command::new"])]),
    (
        Risk::Network,
        &[
            Suffix(&["TcpStream::connect", "UdpSocket::bind", "TcpListener::bind"]),
            Prefix(&["reqwest::", "ureq::"]),
        ],
    ),
    (Risk::MassDeletion, &[Last(&["remove_dir_all"])]),
];

/// Go: exec, net/http and net, os.RemoveAll, t.Skip.
const GO: &[Rule] = &[
    (
        Risk::SpawnsProcess,
        &[Is(&[
            "exec.Command",
            "exec.CommandContext",
            "syscall.Exec",
            "os.StartProcess",
        ])],
    ),
    (
        Risk::Network,
        &[
            All(&[
                Prefix(&["http."]),
                Last(&[
                    "Get",
                    "Post",
                    "PostForm",
                    "Head",
                    "NewRequest",
                    "ListenAndServe",
                ]),
            ]),
            Prefix(&["net.Dial"]),
            Is(&["net.Listen"]),
        ],
    ),
    (Risk::MassDeletion, &[Is(&["os.RemoveAll"])]),
    (
        Risk::SkipsTest,
        &[Is(&["t.Skip", "t.Skipf", "t.SkipNow", "b.Skip"])],
    ),
];

/// The risks `rules` give one call, in the rules' order.
fn table_risks(rules: &[Rule], c: &Call, out: &mut Vec<Risk>) {
    for (risk, names) in rules {
        if names.iter().any(|n| n.matches(c)) {
            out.push(*risk);
        }
    }
}

/// Shell: network tools, nested shells, `rm -r`, and copies or moves out of the workspace.
fn shell_risks(c: &Call, out: &mut Vec<Risk>) {
    let words: Vec<&str> = c.text.split_whitespace().collect();
    match c.last.as_str() {
        "curl" | "wget" | "nc" | "ncat" | "ssh" | "scp" | "rsync" | "telnet" => {
            out.push(Risk::Network)
        }
        "sh" | "bash" | "zsh" | "eval" | "exec" | "source" | "." => out.push(Risk::SpawnsProcess),
        "rm" if words.iter().any(|w| {
            w.starts_with('-') && !w.starts_with("--") && (w.contains('r') || w.contains('R'))
        }) || words.contains(&"--recursive") =>
        {
            out.push(Risk::MassDeletion)
        }
        _ => {}
    }
    if words
        .iter()
        .skip(1)
        .any(|w| names_outside_path(&format!("\"{w}")))
        && ["cp", "mv", "tee", "dd", "install", "ln"].contains(&c.last.as_str())
    {
        out.push(Risk::WritesOutside);
    }
}

/// A decorator or attribute that skips a test.
fn skips(lang: Lang, text: &str) -> bool {
    let t: String = text.split_whitespace().collect();
    match lang {
        Lang::Python => {
            t.starts_with("@pytest.mark.skip")
                || t.starts_with("@unittest.skip")
                || t.starts_with("@unittest.expectedFailure")
        }
        Lang::Rust => t.starts_with("#[ignore"),
        _ => false,
    }
}

/// A test function's name: Python `test_*`, Go `Test*`, Rust functions marked `#[test]` (or
/// named `test_*`).
fn test_name(lang: Lang, name: Node, src: &[u8]) -> Option<String> {
    let n = name.utf8_text(src).ok()?;
    match lang {
        Lang::Python if n.starts_with("test") => Some(n.to_string()),
        Lang::Go if n.starts_with("Test") => Some(n.to_string()),
        Lang::Rust => {
            let function = name.parent()?;
            let mut marked = n.starts_with("test_");
            let mut sibling = function.prev_named_sibling();
            while let Some(s) = sibling.filter(|s| s.kind() == "attribute_item") {
                marked |= s
                    .utf8_text(src)
                    .is_ok_and(|a| a.contains("test]") || a.contains("::test"));
                sibling = s.prev_named_sibling();
            }
            marked.then(|| n.to_string())
        }
        _ => None,
    }
}

/// A JavaScript test: `it("name", ...)` or `test("name", ...)`.
fn js_test_name(lang: Lang, callee: &str, call: Node, src: &[u8]) -> Option<String> {
    if !matches!(lang, Lang::JavaScript | Lang::TypeScript | Lang::Tsx)
        || !["it", "test"].contains(&callee)
    {
        return None;
    }
    let args = call.child_by_field_name("arguments")?;
    let first = args.named_child(0)?;
    matches!(first.kind(), "string" | "template_string")
        .then(|| first.utf8_text(src).ok().map(|t| format!("{callee}({t})")))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn risks(path: &str, old: Option<&str>, new: &str) -> Vec<Risk> {
        introduced(path, old, new)
            .into_iter()
            .map(|f| f.risk)
            .collect()
    }

    #[test]
    fn python_shell_eval_network_writes_deletion_and_skips() {
        let old = "import os\n\ndef test_add():\n    assert add(1, 2) == 3\n";
        let new = "import os, subprocess, shutil\n\n@pytest.mark.skip\ndef test_add():\n    subprocess.run('curl x | sh', shell=True)\n    eval(data)\n    requests.get('http://evil')\n    open('/etc/passwd', 'w').write('x')\n    shutil.rmtree(path)\n";
        let got = risks("t.py", Some(old), new);
        for r in [
            Risk::SpawnsProcess,
            Risk::Eval,
            Risk::Network,
            Risk::WritesOutside,
            Risk::MassDeletion,
            Risk::SkipsTest,
        ] {
            assert!(got.contains(&r), "{r:?} in {got:?}");
        }
        // What was there before is not the change's doing.
        assert!(risks("t.py", Some(new), new).is_empty());
        // Reading an absolute path is not writing it.
        assert!(risks("r.py", Some(""), "data = open('/etc/hosts').read()\n").is_empty());
    }

    #[test]
    fn deleted_tests_are_found_in_every_language() {
        assert_eq!(
            risks(
                "t.py",
                Some("def test_a():\n    pass\ndef test_b():\n    pass\n"),
                "def test_a():\n    pass\n"
            ),
            [Risk::DeletesTest]
        );
        assert_eq!(
            risks(
                "a_test.go",
                Some("package a\nfunc TestA(t *testing.T) {}\nfunc TestB(t *testing.T) {}\n"),
                "package a\nfunc TestA(t *testing.T) { t.Skip() }\n"
            ),
            [Risk::SkipsTest, Risk::DeletesTest]
        );
        assert_eq!(
            risks(
                "lib.rs",
                Some("#[test]\nfn adds() {}\n#[test]\nfn subs() {}\n"),
                "#[test]\n#[ignore]\nfn adds() {}\n"
            ),
            [Risk::SkipsTest, Risk::DeletesTest]
        );
        assert_eq!(
            risks(
                "a.test.js",
                Some("it('adds', () => {});\nit('subs', () => {});\n"),
                "it('adds', () => {});\nit.skip('subs', () => {});\n"
            ),
            [Risk::SkipsTest, Risk::DeletesTest]
        );
    }

    #[test]
    fn javascript_rust_go_and_shell_processes_and_network() {
        assert!(risks("a.js", None, "const { execSync } = require('child_process');\nexecSync('ls');\nfetch('http://x');\n").contains(&Risk::SpawnsProcess));
        assert!(risks("a.ts", None, "await fetch(url);\n").contains(&Risk::Network));
        assert!(risks("a.rs", None, "fn f() { std::process::Command::new(\"sh\").status(); std::fs::remove_dir_all(p); }\n").contains(&Risk::MassDeletion));
        assert!(
            risks(
                "a.go",
                None,
                "package a\nfunc f() { exec.Command(\"sh\").Run(); os.RemoveAll(\"/\") }\n"
            )
            .contains(&Risk::SpawnsProcess)
        );
        let sh = risks("x.sh", None, "curl -s http://x | sh\nrm -rf build\n");
        assert!(
            sh.contains(&Risk::Network)
                && sh.contains(&Risk::SpawnsProcess)
                && sh.contains(&Risk::MassDeletion),
            "{sh:?}"
        );
        // A shebang names the language of a file without an extension.
        assert!(
            risks(
                ".git/hooks/pre-commit",
                None,
                "#!/bin/sh\ncurl http://x | sh\n"
            )
            .contains(&Risk::Network)
        );
        // Plain code is not flagged.
        assert!(
            risks(
                "a.py",
                Some("def f():\n    return 1\n"),
                "def f():\n    return 2\n"
            )
            .is_empty()
        );
    }
}
