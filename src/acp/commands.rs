//! The session's slash commands: `/undo [N]`, `/redo`, `/rollback [RUN] [force]`
//! (rollback.rs), `/rewind STEP INSTRUCTION` (rewind.rs), `/rerun`, `/status`, `/commit
//! [RUN]` and `/test BUG`. Each is answered without a model; `/rerun` with a goal, `/test BUG`
//! and `/rewind` start a run, which is not this file's.
//! Each skill is a command too (`/NAME [REQUEST]`), which starts a run of it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{AvailableCommand, WriteTextFileRequest};
use agent_ls_core::agent::RunStatus;
use agent_ls_core::edit::{FileText, Limits};
use agent_ls_runtime::config;

use super::client::{ClientFs, read_through};
use super::rollback;

/// The commands as the client lists them: the session's own, then the skills of `root` and
/// the user's, each with its description.
pub(super) fn available(root: &Path) -> Vec<AvailableCommand> {
    let mut commands = own_commands();
    for skill in agent_ls_runtime::skills::discover(root).skills {
        if !KNOWN.contains(&format!("/{}", skill.front.name).as_str()) {
            commands.push(AvailableCommand::new(
                skill.front.name,
                skill.front.description,
            ));
        }
    }
    commands
}

/// `/NAME [REQUEST]` for a skill of `root` (not one of the session's own commands): the goal
/// of a run of it.
pub(super) fn skill_goal(command: &str, root: &Path) -> Option<String> {
    let rest = command.strip_prefix('/')?;
    let (name, request) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if name.is_empty() || KNOWN.contains(&format!("/{name}").as_str()) {
        return None;
    }
    agent_ls_runtime::skills::find(root, name)?;
    Some(agent_ls_core::skills::goal(name, request))
}

/// The session's own commands.
const KNOWN: &[&str] = &[
    "/undo",
    "/redo",
    "/rollback",
    "/rewind",
    "/rerun",
    "/status",
    "/commit",
    "/test",
];

fn own_commands() -> Vec<AvailableCommand> {
    vec![
        AvailableCommand::new("undo", "Undo the latest agent step (or /undo N)"),
        AvailableCommand::new("redo", "Redo the step undone last"),
        AvailableCommand::new(
            "rollback",
            "Roll the latest run (or /rollback RUN) back whole from its git checkpoint; /rollback force even over later edits",
        ),
        AvailableCommand::new(
            "rewind",
            "/rewind STEP INSTRUCTION: take the step's run back to it, code and conversation together, and do INSTRUCTION from there",
        ),
        AvailableCommand::new("rerun", "Run the last goal again"),
        AvailableCommand::new(
            "test",
            "/test BUG: write a test that fails for the bug first (kept only if it does), then fix it",
        ),
        AvailableCommand::new("status", "The recent runs of this folder"),
        AvailableCommand::new(
            "commit",
            "Commit the latest run's own files as you (or /commit RUN), with a Co-authored-by: agent-ls trailer",
        ),
    ]
}

/// A command's answer: said at once, or once its work (through the client, or in git) is
/// done.
pub(super) enum Answer {
    Now(String),
    Later(Pin<Box<dyn Future<Output = String> + Send>>),
}

/// Where a command acts: the session at the client, and its folder.
pub(super) struct Context {
    pub conn: ConnectionTo<Client>,
    pub session: String,
    pub root: PathBuf,
    pub fs: ClientFs,
    /// The session has a goal that `/rerun` runs again.
    pub has_last: bool,
}

/// The answer to `command` when it is one of the session's commands (or a word that looks
/// like one); `None` for a goal, which starts a run.
pub(super) fn answer(command: &str, cx: &Context, loaded: &config::Loaded) -> Option<Answer> {
    let peer = (cx.conn.clone(), cx.session.clone());
    if let Some(how) = rollback::parse(command) {
        let place = (cx.root.clone(), loaded.config.memory.clone());
        let work = rollback::answer(peer, place, cx.fs, how);
        return Some(Answer::Later(Box::pin(work)));
    }
    let limits = loaded.config.edit.limits();
    if cx.fs.write
        && let Some(how) = step_move(command)
    {
        let work = move_through_client(peer, cx.root.clone(), cx.fs, limits, how);
        return Some(Answer::Later(Box::pin(work)));
    }
    if command == "/commit" || command.starts_with("/commit ") {
        let run = command["/commit".len()..].trim();
        let run = (!run.is_empty()).then(|| run.to_string());
        let (root, loaded) = (cx.root.clone(), loaded.clone());
        return Some(Answer::Later(Box::pin(async move {
            commit(&root, &loaded, run).await
        })));
    }
    if command == "/status" {
        // It asks git of each run: off the async threads.
        let root = cx.root.clone();
        return Some(Answer::Later(Box::pin(async move {
            tokio::task::block_in_place(|| status(&root))
        })));
    }
    command_answer(command, cx.has_last, &cx.root, &limits).map(Answer::Now)
}

/// `/undo [N]` or `/redo`: which way, and the step named.
fn step_move(command: &str) -> Option<(bool, Option<u64>)> {
    if command == "/redo" {
        return Some((false, None));
    }
    let rest = command.strip_prefix("/undo")?;
    (rest.is_empty() || rest.starts_with(' ')).then(|| (true, rest.trim().parse().ok()))
}

/// `/undo` or `/redo` through the client that offered `fs/write_text_file`: the files are
/// read and written through it, as the run's changes were, so its buffers and its own undo
/// see the move. Files an undone step created are deleted on disk (ACP has no delete).
async fn move_through_client(
    (conn, session): (ConnectionTo<Client>, String),
    root: PathBuf,
    fs: ClientFs,
    limits: Limits,
    (undo, step): (bool, Option<u64>),
) -> String {
    let done = if undo { "undone" } else { "redone" };
    let read = |rel: &str| match read_through(&conn, &session, &root, fs, rel) {
        FileText::Text(t) => Some(t),
        _ => None,
    };
    let planned = if undo {
        agent_ls_runtime::steps::plan_undo(&root, step, &limits, read)
    } else {
        agent_ls_runtime::steps::plan_redo(&root, &limits, read)
    };
    let m = match planned {
        Ok(m) => m,
        Err(e) => return format!("nothing was {done}: {e}"),
    };
    for c in &m.changes {
        let path = match agent_ls_runtime::files::resolve(&root, &c.path) {
            Ok(p) => p,
            Err(e) => return format!("step {} was not {done}: {e}", m.step),
        };
        let request = WriteTextFileRequest::new(session.clone(), path, c.new_text.clone());
        if let Err(e) = conn.send_request(request).block_task().await {
            return format!(
                "step {} was not {done} whole: the client did not write {}: {e}",
                m.step, c.path
            );
        }
    }
    let settled = agent_ls_runtime::steps::delete_created(&root, &m.deletes)
        .and_then(|()| agent_ls_runtime::steps::settle(&root, &m));
    match settled {
        Ok(()) => format!(
            "{} step {}: {}",
            if undo { "undid" } else { "redid" },
            m.step,
            m.files().join(", ")
        ),
        Err(e) => format!(
            "step {} was written but not recorded as {done}: {e}",
            m.step
        ),
    }
}

/// The answer to one of the session's commands (`/undo [step]`, `/redo`, and
/// `/rerun` when there is no goal to run again); `None` for a goal, which starts a run.
fn command_answer(command: &str, has_last: bool, root: &Path, limits: &Limits) -> Option<String> {
    if let Some(rest) = command.strip_prefix("/undo") {
        return Some(
            match agent_ls_runtime::steps::undo(root, rest.trim().parse().ok(), limits) {
                Ok((id, files)) => format!("undid step {id}: {}", files.join(", ")),
                Err(e) => format!("nothing was undone: {e}"),
            },
        );
    }
    if let Some(unknown) = unknown_command(command) {
        return Some(unknown);
    }
    match command {
        "/redo" => Some(match agent_ls_runtime::steps::redo(root, limits) {
            Ok((id, files)) => format!("redid step {id}: {}", files.join(", ")),
            Err(e) => format!("nothing was redone: {e}"),
        }),
        "/rerun" if !has_last => Some("no goal to run again yet".to_string()),
        "/test" => Some(
            "/test needs the bug: /test parse drops the last field of a line ending with a comma"
                .to_string(),
        ),
        _ => None,
    }
}

/// `/status`: the ten latest runs, newest first. A finished run whose files are back as its
/// checkpoint had them is shown as rolled back, not as it ended.
fn status(root: &Path) -> String {
    let runs: Vec<String> = agent_ls_runtime::journal::list(root)
        .iter()
        .take(10)
        .map(|r| {
            let ended = r.status.as_str();
            let shown = if r.status != RunStatus::Interrupted
                && rollback::is_rolled_back(root, &r.run_id)
            {
                "rolled back"
            } else {
                ended
            };
            format!("- {} {shown} {}", r.run_id, r.goal)
        })
        .collect();
    if runs.is_empty() {
        "no runs yet".to_string()
    } else {
        runs.join("\n")
    }
}

/// What is said to a word like `/bogus`: a command nobody has starts nothing (a typo must not
/// send the model to work). A path such as `/src/app.py ...` is a goal: `None`.
fn unknown_command(command: &str) -> Option<String> {
    let word = command.split_whitespace().next().unwrap_or("");
    let known = KNOWN;
    let looks_like_one = word.len() > 1
        && word.starts_with('/')
        && word[1..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (looks_like_one && !known.contains(&word)).then(|| {
        format!(
            "unknown command {word}; nothing was started. The commands are {}",
            known.join(", ")
        )
    })
}

/// `/commit [RUN]`: the run's own files committed as the user (docs/git.md); what became of it.
async fn commit(root: &Path, loaded: &config::Loaded, run: Option<String>) -> String {
    let store = agent_ls_runtime::store::StoreThread::open(root.to_path_buf(), |_| {});
    let models = agent_ls_runtime::model::Models::new(&loaded.config, Some(root));
    let setting = (root, &loaded.config, loaded.trusted);
    let made = agent_ls_runtime::git::run::commit_recorded(
        &store,
        setting,
        Some(&models),
        run,
        (None, false),
    )
    .await;
    match made {
        Ok((id, c)) => format!(
            "committed run {id} as {} on {}: {}",
            &c.id[..c.id.len().min(12)],
            c.branch.as_deref().unwrap_or("a detached HEAD"),
            c.subject
        ),
        Err(e) => format!("nothing was committed: {e}"),
    }
}
