//! `agent-ls review [--staged | --base REV | --run RUN] [--json]`: the reviewer on a change
//! the user has (uncommitted work, staged work, a branch against its base) or a run's change
//! against its git checkpoint. The diff is git's; the review is the run loop's reviewer phase,
//! driven by the runtime's run (`runs::drive` with `Begin::Review`), journaled and counted like a run's. It changes
//! no file. Exit code 0 when the verdict is `correct`, 2 otherwise (unavailable included).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agent_ls_core::agent::review::{ReviewResult, Verdict};
use agent_ls_core::edit::{FileChange, FileText};
use agent_ls_runtime::drive::{self, ApplyError, ChangeQuestion, ReviewTarget, Shell};
use agent_ls_runtime::runs::{self, Begin, RunRequest};
use agent_ls_runtime::store::StoreThread;
use agent_ls_runtime::tests_run::{RunError, RunResult};
use tokio_util::sync::CancellationToken;

use super::setup::{load_config, open_workspace};

pub struct Options {
    pub target: ReviewTarget,
    pub workspace: Option<PathBuf>,
    pub json: bool,
    /// What the change is for, as the reviewer is told.
    pub goal: Option<String>,
}

/// Reviews the change and prints the review; the exit code says the verdict.
pub fn run(opts: Options) -> anyhow::Result<ExitCode> {
    let root = open_workspace(opts.workspace.clone())?;
    let loaded = load_config(Some(root.clone()));
    if !loaded.errors.is_empty() {
        let errors: Vec<String> = loaded.errors.iter().map(|e| e.to_string()).collect();
        anyhow::bail!("{}", errors.join("; "));
    }
    let cfg = loaded.config;
    let (diff, _) = drive::review_diff(&root, &opts.target)?;
    if diff.trim().is_empty() {
        if opts.json {
            println!(
                "{}",
                serde_json::json!({"review": null, "answer": "nothing to review"})
            );
        } else {
            println!("nothing to review: the diff is empty");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let goal = opts
        .goal
        .clone()
        .unwrap_or_else(|| "review the change (the author did not say what it is for)".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let store = StoreThread::open(root.clone(), |opened| {
        if let Err(e) = opened {
            eprintln!("agent-ls: the review will not be counted: {e}");
        }
    });
    let request = RunRequest {
        begin: Begin::Review(opts.target.clone()),
        ..RunRequest::new(goal)
    };
    let prepared = runs::prepare(&cfg, request)?;
    let outcome = runtime.block_on(async {
        let cancel = CancellationToken::new();
        let mut shell = ReviewShell { root: &root };
        let env = runs::Env {
            root: &root,
            home: &root,
            cancel: &cancel,
            run_id: drive::new_run_id(),
            store: Some(&store),
            events: None,
            on_token: None,
        };
        runs::drive(prepared, env, &mut shell).await.1
    });
    store.flush_blocking();
    let result = outcome.review.clone().unwrap_or(ReviewResult::Unavailable {
        reason: outcome.answer.clone(),
    });
    if opts.json {
        let mut v = serde_json::json!({"run_id": outcome.run_id, "review": result});
        v["answer"] = serde_json::Value::String(outcome.answer.clone());
        println!("{v}");
    } else {
        print!("{}", describe(&result));
    }
    let correct = matches!(
        &result,
        ReviewResult::Reviewed { review, .. } if review.verdict == Verdict::Correct
    );
    Ok(ExitCode::from(if correct { 0 } else { 2 }))
}

/// The review for a terminal: its summary, then each finding at its place.
fn describe(result: &ReviewResult) -> String {
    let mut out = format!("{}\n", result.summary());
    if let ReviewResult::Reviewed { review, .. } = result {
        if !review.explanation.is_empty() {
            out.push_str(&format!("{}\n", review.explanation));
        }
        for f in &review.findings {
            out.push_str(&format!(
                "{}:{}-{}: [P{}] {} (confidence {:.2}{})\n",
                f.path,
                f.start_line,
                f.end_line,
                f.priority,
                f.title.trim_start_matches(&format!("[P{}] ", f.priority)),
                f.confidence,
                if f.outside_change {
                    ", outside the change"
                } else {
                    ""
                }
            ));
            if !f.body.is_empty() {
                out.push_str(&format!("    {}\n", f.body));
            }
        }
    }
    out
}

/// A review reads the files on disk and changes nothing.
struct ReviewShell<'a> {
    root: &'a Path,
}

impl Shell for ReviewShell<'_> {
    fn read(&self, relative: &str) -> FileText {
        agent_ls_runtime::files::read_for_plan(self.root, relative)
    }

    /// Nobody approves a change here: a review writes nothing.
    fn present(&self) -> bool {
        false
    }

    async fn ask_change(&mut self, _: &ChangeQuestion<'_>) -> bool {
        false
    }

    async fn confirm_protected(&mut self, _: &str, _: &str) -> bool {
        false
    }

    async fn write(&mut self, _: &[FileChange]) -> Result<(), ApplyError> {
        Err(ApplyError::Failed("a review changes no file".into()))
    }

    async fn run_tests(
        &mut self,
        _: &CancellationToken,
        _: Option<Vec<String>>,
    ) -> Result<RunResult, RunError> {
        Err(RunError::Refused("a review runs no tests".into()))
    }

    fn progress(&mut self, message: &str) {
        eprintln!("agent-ls: {message}");
    }

    fn warn(&mut self, message: &str) {
        eprintln!("agent-ls: warning: {message}");
    }

    /// The review is this command's answer, printed once on stdout when it ends.
    fn reviewed(&mut self, _: &ReviewResult, _: &str, _: bool) {}
}
