//! `agent-ls batch`: many tasks, each in its own worktree, N at a time, against a model
//! server on 127.0.0.1; results.jsonl, reruns, --retry-failed, refused tasks and Ctrl-C.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::git::{FIX_AND_CREATE, example_repository, git};
use support::model_server::{ModelServer, Reply, openai_text};

/// The task's settings: only the coder is asked (one model call a task).
fn quiet() -> Value {
    json!({"agent": {"evaluate": false, "review": "off"}})
}

fn task(id: &str, repo: &str, goal: &str) -> Value {
    json!({"id": id, "repo": repo, "goal": goal, "config": quiet()})
}

/// A model that fixes `add` whatever it is asked.
fn fixer() -> ModelServer {
    ModelServer::answering(|_| openai_text(&[FIX_AND_CREATE]))
}

/// `agent-ls batch TASKS --out OUT EXTRA...` against the model at `url`.
fn batch(tasks: &Path, out: &Path, url: &str, extra: &[&str], home: &Path) -> Command {
    let mut cmd = support::agent_ls(&["batch"], home);
    cmd.arg(tasks)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{url}/v1"))
        .env("OPENAI_API_KEY", "test-key");
    cmd
}

/// What each test starts from: the example repository, and a folder and a home of the
/// test's own.
struct Setup {
    repo: tempfile::TempDir,
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            repo: example_repository(),
            dir: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// The example repository's path, as a task names it.
    fn path(&self) -> String {
        self.repo.path().display().to_string()
    }

    /// A task `id` on the example repository.
    fn task(&self, id: &str, goal: &str) -> Value {
        task(id, &self.path(), goal)
    }

    /// `tasks` written to tasks.jsonl in the test's folder.
    fn write_tasks(&self, tasks: &[Value]) -> std::path::PathBuf {
        let file = self.join("tasks.jsonl");
        let text: String = tasks.iter().map(|t| format!("{t}\n")).collect();
        std::fs::write(&file, text).unwrap();
        file
    }

    /// A path in the test's folder (a batch's output folder, say).
    fn join(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// `agent-ls batch TASKS --out OUT EXTRA...` against `model`, with the test's home.
    fn batch(&self, tasks: &Path, out: &Path, model: &ModelServer, extra: &[&str]) -> Command {
        batch(tasks, out, &model.url, extra, self.home.path())
    }

    /// The same, run to its end.
    fn run(&self, tasks: &Path, out: &Path, model: &ModelServer, extra: &[&str]) -> Output {
        self.batch(tasks, out, model, extra).output().unwrap()
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn said(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every line of results.jsonl, each a whole JSON object ending in a newline.
fn results(out: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(out.join("results.jsonl")).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "half a line: {text:?}"
    );
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The source checkout's HEAD, status and files, to compare before and after.
fn snapshot(repo: &Path) -> (String, String, String, String) {
    (
        git(repo, &["rev-parse", "HEAD"]),
        git(repo, &["status", "--porcelain", "--untracked-files=all"]),
        std::fs::read_to_string(repo.join("calc.py")).unwrap(),
        git(repo, &["symbolic-ref", "HEAD"]),
    )
}

#[test]
fn six_tasks_with_three_workers_finish_in_their_own_worktrees_and_a_rerun_does_nothing() {
    let t = Setup::new();
    let url = format!("file://{}", t.repo.path().display());
    let before = snapshot(t.repo.path());
    let path = t.path();
    let tasks: Vec<Value> = (1..=6)
        .map(|n| {
            // Two of them name the repository by URL: it is cloned once.
            let from = if n > 4 { url.as_str() } else { path.as_str() };
            task(
                &format!("t{n}"),
                from,
                &format!("fix the failing tests ({n})"),
            )
        })
        .collect();
    let file = t.write_tasks(&tasks);
    // The output folder inside the checkout, as the default `./agent-ls-batch` often is.
    let out_dir = t.repo.path().join("agent-ls-batch");
    let server = fixer();
    let out = t.run(&file, &out_dir, &server, &["--workers", "3", "--json"]);
    assert_eq!(code(&out), 0, "{}", said(&out));
    let lines = results(&out_dir);
    assert_eq!(lines.len(), 6, "{lines:?}");
    let mut worktrees = std::collections::HashSet::new();
    for r in &lines {
        assert_eq!(r["status"], "done", "{r}");
        assert_eq!(r["exit_code"], 0);
        assert!(r["tokens"].as_u64().unwrap() > 0, "{r}");
        assert!(
            r["diff"].as_str().unwrap().contains("+    return a + b"),
            "{r}"
        );
        assert!(r["diff"].as_str().unwrap().contains("notes.py"), "{r}");
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["branch"], format!("agent/batch-{id}"));
        let wt = Path::new(r["worktree"].as_str().unwrap());
        assert!(
            std::fs::read_to_string(wt.join("calc.py"))
                .unwrap()
                .contains("a + b")
        );
        assert!(Path::new(r["journal"].as_str().unwrap()).is_file(), "{r}");
        assert!(r["checkpoint"].is_string(), "{r}");
        worktrees.insert(wt.to_path_buf());
    }
    assert_eq!(worktrees.len(), 6);
    // The URL was cloned once, and its tasks' worktrees are the clone's.
    let clones: Vec<_> = std::fs::read_dir(out_dir.join("repos"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(clones.len(), 1);
    let listed = git(&clones[0].path(), &["worktree", "list", "--porcelain"]);
    assert!(
        listed.contains("worktrees/t5") && listed.contains("worktrees/t6"),
        "{listed}"
    );
    // The user's checkout: same HEAD, same branch, clean, the bug still there.
    assert_eq!(snapshot(t.repo.path()), before);
    assert!(before.2.contains("a - b"));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["ran"], 6);
    // A second batch on the same file: nothing new, no model call.
    let calls = server.count();
    let again = t.run(&file, &out_dir, &server, &["--workers", "3"]);
    assert_eq!(code(&again), 0, "{}", said(&again));
    assert_eq!(server.count(), calls);
    assert_eq!(results(&out_dir).len(), 6);
    assert!(
        said(&again).contains("6 of 6 task(s) have a result already"),
        "{}",
        said(&again)
    );
}

#[test]
fn retry_failed_reruns_only_the_failed_task() {
    let t = Setup::new();
    let mut later = t.task("later", "fix the failing tests");
    later["ref"] = json!("later");
    let file = t.write_tasks(&[t.task("now", "fix the failing tests"), later]);
    let out_dir = t.join("out");
    let server = fixer();
    let first = t.run(&file, &out_dir, &server, &["--workers", "2"]);
    assert_eq!(code(&first), 1, "{}", said(&first));
    let lines = results(&out_dir);
    let by = |id: &str| lines.iter().find(|r| r["id"] == id).unwrap().clone();
    assert_eq!(by("now")["status"], "done");
    assert_eq!(by("later")["status"], "error");
    assert!(
        by("later")["reason"]
            .as_str()
            .unwrap()
            .contains("\"later\""),
        "{lines:?}"
    );
    let one_task = server.count();
    assert!(one_task > 0);
    // Without --retry-failed the failure stands; with it, only that task runs again.
    git(t.repo.path(), &["branch", "later"]);
    let rerun = t.run(&file, &out_dir, &server, &[]);
    assert_eq!(code(&rerun), 1);
    assert_eq!(results(&out_dir).len(), 2);
    let retry = t.run(&file, &out_dir, &server, &["--retry-failed"]);
    assert_eq!(code(&retry), 0, "{}", said(&retry));
    let lines = results(&out_dir);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["id"], "later");
    assert_eq!(lines[2]["status"], "done");
    assert_eq!(server.count(), 2 * one_task);
    // Another batch folder with the same ids on the same repository: the branch
    // agent/batch-now is another worktree's, so this one gets agent/batch-now-2.
    let elsewhere = t.join("elsewhere");
    let again = t.run(&file, &elsewhere, &server, &[]);
    assert_eq!(code(&again), 0, "{}", said(&again));
    let lines = results(&elsewhere);
    let now = lines.iter().find(|r| r["id"] == "now").unwrap();
    assert_eq!(now["status"], "done", "{now}");
    assert_eq!(now["branch"], "agent/batch-now-2");
}

#[test]
fn a_task_whose_config_names_an_endpoint_is_refused_and_a_bad_line_refuses_the_file() {
    let t = Setup::new();
    let mut evil = t.task("evil", "fix the failing tests");
    evil["config"] = json!({"model": {"base_url": "http://127.0.0.1:9/v1"}, "test": {"command": ["sh", "-c", "true"]}});
    let file = t.write_tasks(&[evil]);
    let out_dir = t.join("out");
    let server = fixer();
    let out = t.run(&file, &out_dir, &server, &[]);
    assert_eq!(code(&out), 1, "{}", said(&out));
    let lines = results(&out_dir);
    assert_eq!(lines[0]["status"], "refused");
    let reason = lines[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("`model.base_url`") && reason.contains("`test.command`"),
        "{reason}"
    );
    assert_eq!(server.count(), 0);
    assert!(!out_dir.join("worktrees/evil").exists());
    // A malformed line: the file is refused before anything runs, the line named.
    let bad = t.join("bad.jsonl");
    let good = t.task("good", "fix the failing tests");
    std::fs::write(&bad, format!("{good}\n{{\"id\": \"x\", \"goal\": 1}}\n")).unwrap();
    let other = t.join("other");
    let out = t.run(&bad, &other, &server, &[]);
    assert_eq!(code(&out), 3);
    assert!(said(&out).contains("line 2: not a task"), "{}", said(&out));
    assert!(results(&other).is_empty());
    assert_eq!(server.count(), 0);
}

/// The worker turns the tester's installs off for every run (they run outside the sandbox,
/// and a run's `--yes` is no one's approval): a task that turns them back on is refused.
#[test]
fn a_task_that_turns_installs_back_on_is_refused() {
    let t = Setup::new();
    let mut install = t.task("install", "fix the failing tests");
    install["config"]["tester"] = json!({"install": true});
    let file = t.write_tasks(&[install]);
    let out_dir = t.join("out");
    let server = fixer();
    let out = t.run(&file, &out_dir, &server, &[]);
    assert_eq!(code(&out), 1, "{}", said(&out));
    let lines = results(&out_dir);
    assert_eq!(lines[0]["status"], "refused", "{}", lines[0]);
    let reason = lines[0]["reason"].as_str().unwrap();
    assert!(reason.contains("`tester.install`"), "{reason}");
    assert_eq!(server.count(), 0);
}

#[test]
fn sigint_leaves_whole_result_lines_and_a_rerun_finishes_the_rest() {
    let t = Setup::new();
    let file = t.write_tasks(&[
        t.task("a", "fix the failing tests"),
        t.task("slow", "fix the failing tests slowly"),
        t.task("b", "fix the failing tests"),
    ]);
    let out_dir = t.join("out");
    // The slow task's model call hangs until the flag is cleared.
    let stall = Arc::new(AtomicBool::new(true));
    let hang = stall.clone();
    let server = ModelServer::answering(move |body| {
        if hang.load(Ordering::SeqCst) && body.to_string().contains("slowly") {
            Reply::Sse {
                events: vec![],
                stall_after: Some(0),
            }
        } else {
            openai_text(&[FIX_AND_CREATE])
        }
    });
    let mut child = t
        .batch(&file, &out_dir, &server, &["--workers", "2"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lock = out_dir.join("worktrees/slow/.agent-ls/run.lock");
    let deadline = Instant::now() + Duration::from_secs(60);
    let run_pid = loop {
        let held: Option<Value> = std::fs::read_to_string(&lock)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        if results(&out_dir).len() == 2
            && let Some(h) = held
        {
            break h["pid"].as_u64().unwrap();
        }
        assert!(Instant::now() < deadline, "the fast tasks did not finish");
        std::thread::sleep(Duration::from_millis(50));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    // The cancelled run's process is gone, and it has no line.
    assert!(!support::alive(run_pid), "the slow task's run still runs");
    let lines = results(&out_dir);
    assert_eq!(lines.len(), 2);
    assert!(
        lines
            .iter()
            .all(|r| r["id"] != "slow" && r["status"] == "done")
    );
    stall.store(false, Ordering::SeqCst);
    let rerun = t.run(&file, &out_dir, &server, &["--workers", "2"]);
    assert_eq!(code(&rerun), 0, "{}", said(&rerun));
    let lines = results(&out_dir);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["id"], "slow");
    assert_eq!(lines[2]["status"], "done");
}

#[test]
fn index_runs_only_that_task_counting_non_blank_lines_and_past_the_end_is_refused() {
    let t = Setup::new();
    // A blank line between the tasks: indexes count tasks, as a Job's completions do.
    let file = t.join("tasks.jsonl");
    let lines = [
        t.task("first", "fix the failing tests"),
        t.task("second", "fix the failing tests"),
        t.task("third", "fix the failing tests"),
    ];
    std::fs::write(
        &file,
        format!("{}\n\n{}\n{}\n", lines[0], lines[1], lines[2]),
    )
    .unwrap();
    let out_dir = t.join("out");
    let server = fixer();
    let out = t.run(&file, &out_dir, &server, &["--index", "1", "--json"]);
    assert_eq!(code(&out), 0, "{}", said(&out));
    let written = results(&out_dir);
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0]["id"], "second");
    assert_eq!(written[0]["status"], "done");
    assert!(!out_dir.join("worktrees/first").exists());
    assert!(!out_dir.join("worktrees/third").exists());
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["tasks"], 1);
    assert_eq!(summary["ran"], 1);
    let calls = server.count();
    // Past the end (a Job with more completions than tasks): refused, nothing run.
    let past = t.join("past");
    let out = t.run(&file, &past, &server, &["--index", "3"]);
    assert_eq!(code(&out), 3, "{}", said(&out));
    assert!(
        said(&out).contains("--index 3 is past the end: the file has 3 task(s), indexes 0 to 2"),
        "{}",
        said(&out)
    );
    assert!(results(&past).is_empty());
    assert_eq!(server.count(), calls);
    // A bad line elsewhere in the file refuses every index, the good one's too.
    std::fs::write(&file, format!("{}\nnot json\n", lines[0])).unwrap();
    let out = t.run(&file, &past, &server, &["--index", "0"]);
    assert_eq!(code(&out), 3, "{}", said(&out));
    assert!(said(&out).contains("line 2: not a task"), "{}", said(&out));
    assert_eq!(server.count(), calls);
}

#[test]
fn a_worker_stops_taking_tasks_once_its_cost_cap_is_spent() {
    let t = Setup::new();
    std::fs::create_dir_all(t.home.path().join("agent-ls")).unwrap();
    std::fs::write(
        t.home.path().join("agent-ls/config.toml"),
        "[model]\nname = \"test-model\"\n[prices.\"test-model\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n",
    )
    .unwrap();
    let tasks = t.write_tasks(&[t.task("first", "fix add"), t.task("second", "fix add")]);
    let out = t.join("out");
    let model = fixer();
    let ran = t.run(
        &tasks,
        &out,
        &model,
        &["--workers", "1", "--max-cost", "0.00001"],
    );
    // The first run costs more than the whole cap (its one call was allowed: nothing was
    // spent yet); the worker then takes no more tasks, and the second stays for later.
    let lines = results(&out);
    assert_eq!(lines.len(), 1, "{lines:?}\n{}", said(&ran));
    assert_eq!(lines[0]["id"], "first");
    assert!(
        lines[0]["cost_usd"].as_f64().is_some_and(|c| c > 0.00001),
        "{}",
        lines[0]
    );
    assert!(said(&ran).contains("takes no more tasks"), "{}", said(&ran));
    assert_eq!(code(&ran), 1);
    assert_eq!(model.count(), 1);
}
