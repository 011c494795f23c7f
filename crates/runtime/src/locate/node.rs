//! JavaScript's coverage from node's own test runner (`node --test`, also as the
//! package.json test script): a listing run with agent-ls's reporter (`reporter.mjs`) says
//! which tests ran and failed, then each chosen test runs alone (`--test-name-pattern`, its
//! file only) with `NODE_V8_COVERAGE` set, and V8's block counts become the lines it ran.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agent_ls_core::locate::TestLines;
use tokio_util::sync::CancellationToken;

use super::run::{Lines, LocateError, Probe, coverage_run, new_file, own_file, probe_each, sample};
use crate::config::Config;

/// The reporter, written into `.agent-ls/locate/` for each run.
const REPORTER: &str = include_str!("reporter.mjs");
const REPORTER_REL: &str = ".agent-ls/locate/reporter.mjs";

/// node's arguments for a test command that runs node's test runner (`node --test ARGS`, or
/// `npm test` whose script is one, with no shell in it); `None` for another.
pub(super) fn runner(root: &Path, argv: &[String]) -> Option<Vec<String>> {
    let first = argv.first()?;
    let base = first.rsplit('/').next().unwrap_or(first);
    if base == "node" && argv.iter().any(|a| a == "--test") {
        return Some(argv[1..].to_vec());
    }
    let rest: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    if base != "npm" || !matches!(rest.as_slice(), ["test"] | ["t"] | ["run", "test"]) {
        return None;
    }
    let text = std::fs::read_to_string(root.join("package.json")).ok()?;
    let package: serde_json::Value = serde_json::from_str(&text).ok()?;
    let script = package["scripts"]["test"].as_str()?;
    // A script that needs a shell (`&&`, quotes, variables) is not what we would run.
    if script.contains(|c: char| "&|;<>$`'\"\\*?(){}".contains(c)) {
        return None;
    }
    let words: Vec<String> = script.split_whitespace().map(str::to_string).collect();
    (words.first().is_some_and(|w| w == "node") && words.iter().any(|w| w == "--test"))
        .then(|| words[1..].to_vec())
}

/// The listing run, then each chosen test alone under coverage.
pub(super) async fn trace(
    root: &Path,
    config: &Config,
    args: &[String],
    cancel: &CancellationToken,
) -> Result<Vec<TestLines>, LocateError> {
    let dir = root.join(".agent-ls").join("locate");
    new_file(&root.join(REPORTER_REL), REPORTER).map_err(|e| LocateError::Write(dir.clone(), e))?;
    // Our own flags replace the user's reporter and name filter; the files go last.
    let flags: Vec<String> = args
        .iter()
        .filter(|a| a.starts_with('-') && *a != "--test")
        .filter(|a| !a.starts_with("--test-reporter") && !a.starts_with("--test-name-pattern"))
        .cloned()
        .collect();
    let files: Vec<String> = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .cloned()
        .collect();
    let listing = node_argv(&flags, None, &files);
    let (result, output) = coverage_run(root, config, listing, Vec::new(), cancel).await?;
    let listed = parse_listing(root, &output);
    if listed.is_empty() {
        let why = "node's test runner listed no test".to_string();
        return Err(LocateError::NoRecord(why, result.report));
    }
    let probes = units(listed)
        .into_iter()
        .map(|t| Probe {
            test: format!("{} > {}", t.file.as_deref().unwrap_or("?"), t.name),
            group: t.file.clone().unwrap_or_default(),
            failed: t.failed,
            argv: node_argv(
                &flags,
                Some(&format!("^{}$", regex_escape(&t.name))),
                &t.file.map_or(files.clone(), |f| vec![f]),
            ),
            env: Vec::new(),
        })
        .collect();
    let mut chosen = sample(probes);
    let coverage = |i: usize| dir.join("v8").join(i.to_string());
    for (i, p) in chosen.iter_mut().enumerate() {
        let at = coverage(i).to_string_lossy().into_owned();
        p.env = vec![("NODE_V8_COVERAGE".to_string(), at)];
    }
    let real = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    probe_each(root, config, chosen, cancel, &|i| {
        read_coverage(&real, &coverage(i))
    })
    .await
}

/// `node --test` with agent-ls's reporter, the user's `flags`, only the tests `pattern`
/// names when given, and `files`.
fn node_argv(flags: &[String], pattern: Option<&str>, files: &[String]) -> Vec<String> {
    let mut argv = vec![
        "node".to_string(),
        "--test".to_string(),
        format!("--test-reporter=./{REPORTER_REL}"),
        "--test-reporter-destination=stdout".to_string(),
    ];
    argv.extend(flags.iter().cloned());
    if let Some(pattern) = pattern {
        argv.push(format!("--test-name-pattern={pattern}"));
    }
    argv.extend(files.iter().cloned());
    argv
}

/// The tests that can run alone: a leaf, or for subtests their outermost `test()` parent
/// (a parent that matches the name filter runs all its subtests, and a subtest runs only
/// when its parent does), failed when one of its subtests did. A `describe` suite is no
/// unit: it runs for any test in it that matches, that test alone. In the order listed.
fn units(listed: Vec<Listed>) -> Vec<Listed> {
    let mut out: Vec<Listed> = Vec::new();
    for t in listed {
        let name = t.parents.first().cloned().unwrap_or(t.name);
        match out.iter_mut().find(|u| u.name == name && u.file == t.file) {
            Some(unit) => unit.failed |= t.failed,
            None => out.push(Listed {
                name,
                parents: Vec::new(),
                ..t
            }),
        }
    }
    out
}

/// `text` matched literally in a JavaScript regular expression.
fn regex_escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\^$.*+?()[]{}|/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A test the reporter listed.
#[derive(Debug, PartialEq, serde::Deserialize)]
struct Listed {
    #[serde(rename = "agentLsTest")]
    name: String,
    /// Its workspace file, when node said it and it is the project's own.
    file: Option<String>,
    failed: bool,
    /// The `test()` tests it runs inside, outermost first.
    #[serde(default)]
    parents: Vec<String>,
}

/// The reporter's lines in `output`.
fn parse_listing(root: &Path, output: &str) -> Vec<Listed> {
    let real = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    output
        .lines()
        .filter(|l| l.starts_with("{\"agentLsTest\""))
        .filter_map(|l| serde_json::from_str::<Listed>(l).ok())
        .map(|t| Listed {
            file: t.file.and_then(|f| own_file(&real, Path::new(&f))),
            ..t
        })
        .collect()
}

/// The lines of the project's own files that one run's V8 coverage records (every
/// `coverage-*.json` in `dir`, one per process) show executed.
fn read_coverage(root: &Path, dir: &Path) -> Lines {
    #[derive(serde::Deserialize)]
    struct Record {
        result: Vec<Script>,
    }
    #[derive(serde::Deserialize)]
    struct Script {
        url: String,
        functions: Vec<Function>,
    }
    #[derive(serde::Deserialize)]
    struct Function {
        ranges: Vec<Range>,
    }
    let mut lines = Lines::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Ok(record) = serde_json::from_str::<Record>(&text) else {
            continue;
        };
        for script in record.result {
            let Some(path) = file_url(&script.url) else {
                continue;
            };
            let Some(rel) = own_file(root, &path) else {
                continue;
            };
            let Ok(source) = std::fs::read_to_string(&path) else {
                continue;
            };
            let ranges: Vec<Range> = script
                .functions
                .into_iter()
                .flat_map(|f| f.ranges)
                .collect();
            let ran = executed_lines(&source, &ranges);
            if !ran.is_empty() {
                lines.entry(rel).or_default().extend(ran);
            }
        }
    }
    lines
}

/// A V8 block: its count, from `startOffset` to `endOffset` (UTF-16 code units).
#[derive(Debug, Clone, Copy, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Range {
    start_offset: usize,
    end_offset: usize,
    count: u64,
}

/// The lines of `source` with code V8 counted as run: each offset takes the count of the
/// innermost range around it (a function's first range is the whole function, the others
/// its blocks, nested ones after their containers), and a line ran when a character of it
/// other than white space has a count above zero.
fn executed_lines(source: &str, ranges: &[Range]) -> BTreeSet<u32> {
    // Per UTF-16 unit: its line, and whether it is white space.
    let mut units: Vec<(u32, bool)> = Vec::with_capacity(source.len());
    let mut line = 1;
    for c in source.chars() {
        for _ in 0..c.len_utf16() {
            units.push((line, c.is_whitespace()));
        }
        if c == '\n' {
            line += 1;
        }
    }
    let mut counts = vec![0u64; units.len()];
    let mut ordered = ranges.to_vec();
    ordered.sort_by_key(|r| (r.start_offset, std::cmp::Reverse(r.end_offset)));
    for r in ordered {
        let end = r.end_offset.min(counts.len());
        if r.start_offset < end {
            counts[r.start_offset..end].fill(r.count);
        }
    }
    units
        .iter()
        .zip(counts)
        .filter(|((_, blank), count)| !blank && *count > 0)
        .map(|((line, _), _)| *line)
        .collect()
}

/// The path a `file://` URL names, its `%XX` escapes decoded.
fn file_url(url: &str) -> Option<PathBuf> {
    let encoded = url.strip_prefix("file://")?.as_bytes();
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut i = 0;
    while i < encoded.len() {
        let hex = encoded
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (encoded[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                bytes.push(b);
                i += 3;
            }
            (b, _) => {
                bytes.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(bytes).ok().map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start_offset: usize, end_offset: usize, count: u64) -> Range {
        Range {
            start_offset,
            end_offset,
            count,
        }
    }

    #[test]
    fn a_line_ran_when_its_innermost_block_counted() {
        let source = "function f(q) {\n  if (q) {\n    return 1;\n  }\n  return 2;\n}\nfunction g() {\n  return 3;\n}\nf(0);\n";
        let f = source.find("function f").unwrap();
        let f_end = source.find("\nfunction g").unwrap();
        let block = source.find("{\n    return 1").unwrap();
        let block_end = source.find("\n  return 2").unwrap();
        let g = source.find("function g").unwrap();
        let g_end = source.find("\nf(0)").unwrap();
        let ranges = [
            r(0, source.len(), 1),
            r(g, g_end, 0),
            r(f, f_end, 1),
            r(block, block_end, 0),
        ];
        let ran: Vec<u32> = executed_lines(source, &ranges).into_iter().collect();
        // f's untaken branch (lines 3-4) and the uncalled g (7-9) did not run.
        assert_eq!(ran, [1, 2, 5, 6, 10]);
    }

    #[test]
    fn npm_test_is_read_when_its_script_is_nodes_own_runner() {
        let dir = tempfile::tempdir().unwrap();
        let argv = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let package = |script: &str| {
            let text = serde_json::json!({"scripts": {"test": script}}).to_string();
            std::fs::write(dir.path().join("package.json"), text).unwrap();
        };
        package("node --test test/");
        assert_eq!(
            runner(dir.path(), &argv(&["npm", "test"])),
            Some(argv(&["--test", "test/"]))
        );
        package("jest");
        assert_eq!(runner(dir.path(), &argv(&["npm", "test"])), None);
        package("node --test && rm -rf /");
        assert_eq!(runner(dir.path(), &argv(&["npm", "test"])), None);
        assert_eq!(
            runner(dir.path(), &argv(&["node", "--test", "a.test.js"])),
            Some(argv(&["--test", "a.test.js"]))
        );
        assert_eq!(regex_escape("a (b).c"), "a \\(b\\)\\.c");
        let out = "TAP noise\n{\"agentLsTest\":\"t\",\"file\":\"/elsewhere/x.test.js\",\"failed\":true,\"parents\":[\"p\"]}\n";
        let listed = parse_listing(dir.path(), out);
        assert_eq!(
            listed,
            [Listed {
                name: "t".into(),
                file: None,
                failed: true,
                parents: argv(&["p"])
            }]
        );
        // Subtests run with their outermost test() parent, failed when one of them failed.
        let leaf = |name: &str, parents: &[&str], failed| Listed {
            name: name.into(),
            file: Some("t.test.js".into()),
            failed,
            parents: argv(parents),
        };
        let got = units(vec![
            leaf("a", &[], false),
            leaf("b1", &["b"], false),
            leaf("b2", &["b", "inner"], true),
            leaf("b3", &["b"], false),
        ]);
        assert_eq!(got, [leaf("a", &[], false), leaf("b", &[], true)]);
        assert_eq!(
            file_url("file:///w/a%20b.js"),
            Some(PathBuf::from("/w/a b.js"))
        );
    }
}
