//! Issue 51's benchmark: bugs injected into real projects fetched at bench time (two PyPI
//! sdists run under pytest, one npm package whose shipped node:test tests run under `node
//! --test`), each fixed through the real binary by a stand-in model on 127.0.0.1 that answers
//! the fix as soon as the buggy line is in the conversation and otherwise explores with the
//! tools, with the fault localisation on and off. It prints, per case, whether the fix
//! landed, the request bytes and the model calls; the cases are not tuned to the figures.
//! Run with `cargo bench --profile dev --bench locate` (the bytes do not depend on the build);
//! `LOCATE_BENCH_CASE=NAME` runs only the cases whose function or file names NAME.
//! Needs `python3`, `node` and `npm` on PATH, and the package registries (pytest goes into a
//! virtualenv of its own under `target/locate-bench/venv`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::model_server::{ModelServer, Reply, conversation, openai_text, openai_tool_call_as};

/// A fetched project: how to get it, where its code is, how its tests run.
struct Project {
    name: &'static str,
    /// The folder the archive unpacks to, under the cache.
    dir: &'static str,
    fetch: &'static [&'static str],
    archive: &'static str,
    /// Where the unpacked folder is inside the archive's folder (npm's `package`).
    root: &'static str,
    test: &'static [&'static str],
    /// The extension of the project's own source files (what the stand-in may read).
    ext: &'static str,
    cases: &'static [Case],
}

/// One injected bug: `line` (whole, indentation too) becomes `bug` in `file`. `chain` is the
/// call path from a test down to the function, as read in the project's code.
#[derive(Clone, Copy)]
struct Case {
    file: &'static str,
    line: &'static str,
    bug: &'static str,
    chain: &'static str,
}

const PROJECTS: &[Project] = &[
    Project {
        name: "toolz 0.12.1 (PyPI)",
        dir: "toolz-0.12.1",
        fetch: &[
            "python",
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "toolz==0.12.1",
            "-d",
            ".",
        ],
        archive: "toolz-0.12.1.tar.gz",
        root: "toolz-0.12.1",
        test: &[
            "python",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "toolz/tests",
        ],
        ext: ".py",
        cases: &[
            Case {
                file: "toolz/itertoolz.py",
                line: "                if val2 < val1:",
                bug: "                if val2 > val1:",
                chain: "test_merge_sorted > merge_sorted > _merge_sorted_binary > _merge_sorted_binary",
            },
            Case {
                file: "toolz/itertoolz.py",
                line: "                if key2 < key1:",
                bug: "                if key2 > key1:",
                chain: "test_merge_sorted > merge_sorted > _merge_sorted_binary_key > _merge_sorted_binary_key",
            },
            Case {
                file: "toolz/functoolz.py",
                line: "        sigspec.bind(*args, **kwargs)",
                // Not `bind_partial`: is_partial_args has that line already.
                bug: "        sigspec.bind(*args)",
                chain: "test_curry_* > curry.__call__ > curry._should_curry > is_valid_args",
            },
            Case {
                file: "toolz/functoolz.py",
                line: "    if isinstance(sigspec, ValueError):",
                bug: "    if not isinstance(sigspec, ValueError):",
                chain: "test_curry_* > curry.__call__ > curry._should_curry > is_partial_args > _check_sigspec",
            },
        ],
    },
    Project {
        name: "more-itertools 10.2.0 (PyPI)",
        dir: "more-itertools-10.2.0",
        fetch: &[
            "python",
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "more-itertools==10.2.0",
            "-d",
            ".",
        ],
        archive: "more-itertools-10.2.0.tar.gz",
        root: "more-itertools-10.2.0",
        test: &[
            "python",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests",
        ],
        ext: ".py",
        cases: &[
            Case {
                file: "more_itertools/recipes.py",
                line: "    limit = math.isqrt(n) + 1",
                bug: "    limit = math.isqrt(n)",
                chain: "test_totient > totient > factor > sieve",
            },
            Case {
                file: "more_itertools/recipes.py",
                line: "                yield (i := seq_index(value, i + 1, stop))",
                bug: "                yield (i := seq_index(value, i + 2, stop))",
                chain: "test_totient > totient > factor > sieve > iter_index",
            },
            Case {
                file: "more_itertools/recipes.py",
                line: "        while not n % prime:",
                bug: "        while n % prime:",
                chain: "test_totient > totient > unique_justseen(factor(n)) > factor",
            },
            Case {
                file: "more_itertools/recipes.py",
                line: "        return map(operator.itemgetter(0), groupby(iterable))",
                bug: "        return map(operator.itemgetter(1), groupby(iterable))",
                chain: "test_totient > totient > unique_justseen",
            },
        ],
    },
    Project {
        name: "uuid 11.0.3 (npm; its shipped dist/esm-browser/test, node:test)",
        dir: "uuid-11.0.3",
        fetch: &["npm", "pack", "uuid@11.0.3"],
        archive: "uuid-11.0.3.tgz",
        root: "package",
        test: &["node", "--test", "dist/esm-browser/test/"],
        ext: ".js",
        cases: &[
            Case {
                file: "dist/esm-browser/md5.js",
                line: "    return (num << cnt) | (num >>> (32 - cnt));",
                bug: "    return (num << cnt) | (num >>> (31 - cnt));",
                chain: "v35 test > v3 > v35 > md5 > wordsToMd5 > md5ff > md5cmn > bitRotateLeft",
            },
            Case {
                file: "dist/esm-browser/md5.js",
                line: "    const msw = (x >> 16) + (y >> 16) + (lsw >> 16);",
                bug: "    const msw = (x >> 16) + (y >> 16) + (lsw >> 15);",
                chain: "v35 test > v3 > v35 > md5 > wordsToMd5 > md5ff > md5cmn > safeAdd",
            },
            Case {
                file: "dist/esm-browser/md5.js",
                line: "    return (((inputLength8 + 64) >>> 9) << 4) + 14 + 1;",
                bug: "    return (((inputLength8 + 64) >>> 9) << 4) + 14 - 1;",
                chain: "v35 test > v3 > v35 > md5 > uint8ToUint32 > getOutputLength",
            },
            Case {
                file: "dist/esm-browser/sha1.js",
                line: "            return (x & y) ^ (x & z) ^ (y & z);",
                bug: "            return (x & y) ^ (x & z) ^ (y | z);",
                chain: "v35 test > v5 > v35 > sha1 > f",
            },
            Case {
                file: "dist/esm-browser/sha1.js",
                line: "    return (x << n) | (x >>> (32 - n));",
                bug: "    return (x << n) | (x >>> (33 - n));",
                chain: "v35 test > v5 > v35 > sha1 > ROTL",
            },
        ],
    },
];

fn cache() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/locate-bench")
}

/// The unpacked project, fetched once into the cache; None (said why) when it cannot be.
fn fetched(p: &Project) -> Option<PathBuf> {
    let home = cache().join(p.dir);
    let root = home.join(p.root);
    if root.is_dir() {
        return Some(root);
    }
    std::fs::create_dir_all(&home).ok()?;
    let ok = |cmd: &mut Command| {
        cmd.current_dir(&home)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ok(Command::new(p.fetch[0]).args(&p.fetch[1..]))
        || !ok(Command::new("tar").args(["xzf", p.archive]))
    {
        println!("{}: could not fetch ({})", p.name, p.fetch.join(" "));
        return None;
    }
    root.is_dir().then_some(root)
}

/// The test command's outcome in `ws`: passed, and what it printed.
fn run_tests(p: &Project, ws: &Path) -> (bool, String) {
    match Command::new(p.test[0])
        .args(&p.test[1..])
        .current_dir(ws)
        .output()
    {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, e.to_string()),
    }
}

fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-r")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .expect("cp runs");
    assert!(status.success(), "cp {from:?} {to:?}");
}

/// A copy of the project with the case's bug in it, or why the case cannot be injected; the
/// buggy line's number (1-based).
fn injected(root: &Path, case: &Case) -> Result<(tempfile::TempDir, usize), String> {
    let ws = tempfile::tempdir().expect("a temporary folder");
    copy_tree(root, ws.path());
    let path = ws.path().join(case.file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", case.file))?;
    let lines: Vec<&str> = text.lines().collect();
    let at: Vec<usize> = (0..lines.len())
        .filter(|i| lines[*i] == case.line)
        .collect();
    if at.len() != 1 || lines.contains(&case.bug) {
        return Err(format!(
            "{}: the line is there {} time(s), the bug {}",
            case.file,
            at.len(),
            if lines.contains(&case.bug) {
                "too"
            } else {
                "not"
            }
        ));
    }
    let mut out: Vec<&str> = lines.clone();
    out[at[0]] = case.bug;
    let mut body = out.join("\n");
    if text.ends_with('\n') {
        body.push('\n');
    }
    std::fs::write(&path, body).expect("write the bug");
    Ok((ws, at[0] + 1))
}

/// The arguments of every tool call the model made so far.
fn calls_made(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .map(|c| {
            c["function"]["arguments"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// What the stand-in knows of the project: its source files and the names defined in them,
/// as a model that can list and search would find them.
struct Known {
    files: Vec<String>,
    names: Vec<String>,
}

fn known(root: &Path, ext: &str) -> Known {
    let mut files = Vec::new();
    let mut names = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(ext) {
                let rel = path.strip_prefix(root).expect("below the root");
                files.push(rel.to_string_lossy().into_owned());
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for l in text.lines() {
                    let l = l.trim_start();
                    let rest = l
                        .strip_prefix("def ")
                        .or_else(|| l.strip_prefix("function "));
                    if let Some(rest) = rest {
                        let name: String = rest
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if name.len() > 2 {
                            names.insert(name);
                        }
                    }
                }
            }
        }
    }
    // Longer paths first: `a/b/md5.js` is found before a shorter path inside it matches.
    files.sort_by_key(|f| std::cmp::Reverse(f.len()));
    Known {
        files,
        names: names.into_iter().collect(),
    }
}

/// The read_file call to make next, if any: the first place the conversation names that the
/// stand-in has not read, a `file:N` (from a traceback or a grep hit: 80 lines from there) or
/// a bare file (read whole, as far as the tool shows it).
fn next_read(said: &str, made: &[String], k: &Known) -> Option<String> {
    let mut best: Option<(usize, Value)> = None;
    for f in &k.files {
        for (at, _) in said.match_indices(f.as_str()) {
            let rest = &said[at + f.len()..];
            let line: Option<u64> = rest
                .strip_prefix(':')
                .map(|r| {
                    r.chars()
                        .take_while(char::is_ascii_digit)
                        .collect::<String>()
                })
                .and_then(|n| n.parse().ok())
                .or_else(|| {
                    let r = rest.strip_prefix("\", line ")?;
                    r.chars()
                        .take_while(char::is_ascii_digit)
                        .collect::<String>()
                        .parse()
                        .ok()
                });
            let args = match line {
                Some(n) => {
                    serde_json::json!({ "path": f, "start_line": n.max(1), "end_line": n + 80 })
                }
                None => serde_json::json!({ "path": f }),
            };
            let done = made
                .iter()
                .any(|a| serde_json::from_str::<Value>(a).is_ok_and(|v| v == args));
            if !done && best.as_ref().is_none_or(|(b, _)| at < *b) {
                best = Some((at, args));
                break;
            }
        }
    }
    best.map(|(_, a)| a.to_string())
}

/// The stand-in: the fix once the bug is in view; else read the first place the conversation
/// names that it has not read (`next_read`), else grep for a definition of a name the
/// conversation mentions and it has not searched, else give up.
fn stand_in(body: &Value, case: &Case, k: &Known) -> Reply {
    let said = conversation(body);
    let id = format!("call_{}", calls_made(body).len() + 1);
    if said.contains(case.bug.trim()) {
        return openai_text(&[&format!(
            "{}\n<<<<<<< SEARCH\n{}\n=======\n{}\n>>>>>>> REPLACE\n",
            case.file, case.bug, case.line
        )]);
    }
    if body.get("tools").is_none() {
        return openai_text(&["I cannot see the code."]);
    }
    let made = calls_made(body);
    if let Some(args) = next_read(&said, &made, k) {
        return openai_tool_call_as(&id, "read_file", &[&args]);
    }
    let keyword = if k.files.iter().any(|f| f.ends_with(".py")) {
        "def "
    } else {
        "function "
    };
    let name = k
        .names
        .iter()
        .filter(|n| said.contains(n.as_str()))
        .find(|n| !made.iter().any(|a| a.contains(&format!("{keyword}{n}"))));
    match name {
        Some(n) => {
            let args = serde_json::json!({ "pattern": format!("{keyword}{n}") }).to_string();
            openai_tool_call_as(&id, "grep", &[&args])
        }
        None => openai_text(&["I could not find the bug."]),
    }
}

/// One run of `agent-ls run` on the case: fixed, request bytes, model calls.
fn measure(p: &Project, root: &Path, case: &Case, locate: bool) -> (bool, usize, usize) {
    let (ws, _) = injected(root, case).expect("injected before");
    let command: Vec<String> = p.test.iter().map(|s| format!("{s:?}")).collect();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        format!(
            "[agent]\nevaluate = false\n[test]\ncommand = [{}]\n",
            command.join(", ")
        ),
    )
    .expect("config");
    let k = known(ws.path(), p.ext);
    let server = {
        let case = *case;
        ModelServer::answering(move |body| stand_in(body, &case, &k))
    };
    let home = tempfile::tempdir().expect("home");
    // The user trusts the folder, so its `.agent-ls.toml` names the test command (an
    // untrusted folder's is ignored, and agent-ls picks its own).
    let trusted = support::agent_ls(&["trust"], home.path())
        .arg(ws.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("agent-ls trust runs");
    assert!(trusted.success(), "agent-ls trust {:?}", ws.path());
    let out = support::cli(
        &["run", "fix the failing tests", "--yes"],
        ws.path(),
        home.path(),
    )
    .env("AGENT_LS_MODEL__PROVIDER", "openai")
    .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
    .env("OPENAI_API_KEY", "bench-key")
    .env("AGENT_LS_AGENT__LOCATE", locate.to_string())
    .output()
    .expect("agent-ls runs");
    if std::env::var_os("LOCATE_BENCH_VERBOSE").is_some() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    let requests = server.requests();
    // `LOCATE_BENCH_DUMP=DIR` keeps each request's body, to read what the model was shown.
    if let Some(dir) = std::env::var_os("LOCATE_BENCH_DUMP") {
        let dir = Path::new(&dir);
        std::fs::create_dir_all(dir).expect("the dump folder");
        for (i, r) in requests.iter().enumerate() {
            let name = format!("{}-{}-{i:02}.json", case.file.replace('/', "_"), locate);
            std::fs::write(dir.join(name), r.body.to_string()).expect("dump a request");
        }
    }
    let bytes = requests.iter().map(|r| r.body.to_string().len()).sum();
    (run_tests(p, ws.path()).0, bytes, requests.len())
}

fn median(mut v: Vec<usize>) -> usize {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// A virtualenv in the cache with pytest in it, first on PATH for the bench and the runs it
/// starts, so the Python projects' tests run whatever the machine's `python` has.
fn with_pytest() {
    let venv = cache().join("venv");
    let bin = venv.join("bin");
    if !bin.join("pytest").is_file() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(bin.join("python"))
                .args(["-m", "pip", "install", "-q", "pytest==8.3.4"])
                .status()
                .is_ok_and(|s| s.success());
        if !made {
            println!(
                "could not make a virtualenv with pytest in {venv:?}: the Python projects will be left out"
            );
            return;
        }
    }
    let path = std::env::var("PATH").unwrap_or_default();
    // SAFETY: set before any thread is started.
    unsafe { std::env::set_var("PATH", format!("{}:{path}", bin.display())) };
}

fn main() {
    with_pytest();
    println!(
        "| project | case (file: buggy function's chain) | named | locate on: fixed, KB, calls | locate off: fixed, KB, calls |"
    );
    println!("|---|---|---|---|---|");
    let (mut on, mut off) = ((0, Vec::new()), (0, Vec::new()));
    let mut ran = 0;
    for p in PROJECTS {
        let Some(root) = fetched(p) else { continue };
        let (pass, output) = run_tests(p, &root);
        if !pass {
            println!("{}: its tests fail unmodified, left out:\n{output}", p.name);
            continue;
        }
        // `LOCATE_BENCH_CASE=sieve` runs only the cases whose chain or file names it.
        let only = std::env::var("LOCATE_BENCH_CASE").ok();
        for case in p.cases {
            if only
                .as_deref()
                .is_some_and(|o| !case.chain.contains(o) && !case.file.contains(o))
            {
                continue;
            }
            let (ws, line) = match injected(&root, case) {
                Ok(x) => x,
                Err(e) => {
                    println!("| {} | {} | not injected: {e} | | |", p.name, case.chain);
                    continue;
                }
            };
            let (pass, output) = run_tests(p, ws.path());
            drop(ws);
            if pass {
                println!(
                    "| {} | {}: {} | no test fails | | |",
                    p.name, case.file, case.chain
                );
                continue;
            }
            let base = case.file.rsplit('/').next().unwrap_or(case.file);
            let named = output.contains(&format!("{base}:{line}"))
                || output.contains(&format!("{base}\", line {line}"));
            let a = measure(p, &root, case, true);
            let b = measure(p, &root, case, false);
            ran += 1;
            on.0 += usize::from(a.0);
            on.1.push(a.1);
            off.0 += usize::from(b.0);
            off.1.push(b.1);
            let kb = |n: usize| format!("{:.1}", n as f64 / 1024.0);
            println!(
                "| {} | {}:{line}: {} | {} | {}, {}, {} | {}, {}, {} |",
                p.name,
                case.file,
                case.chain,
                if named { "named" } else { "no" },
                a.0,
                kb(a.1),
                a.2,
                b.0,
                kb(b.1),
                b.2
            );
        }
    }
    let kb = |n: usize| format!("{:.1}", n as f64 / 1024.0);
    println!(
        "\n{ran} case(s) ran. locate on: {} fixed, median {} KB of requests per run; locate off: {} fixed, median {} KB",
        on.0,
        kb(median(on.1)),
        off.0,
        kb(median(off.1)),
    );
    assert!(ran > 0, "no case ran: nothing fetched or injected");
}
