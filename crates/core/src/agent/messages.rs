//! Each role's messages, built from a run: the system prompt (the role's text, or the run's
//! agent's own), the fixed context (goal, task, failures, memory, the files within the first
//! prompt's budget) and what the role must hear this turn. Pure: the texts come from
//! `prompts`, the files from the run's context.

use super::AgentKind;
use super::run::Run;
use crate::conversation::Message;

/// The system prompt of the run's agent for the coder's turn.
fn coder_system(run: &Run) -> String {
    let own = run.agent().prompt.as_deref();
    with_instructions(run, own.unwrap_or_else(|| run.prompts.get("coder")))
}

/// `system` followed by the run's instruction files and skills, when it has any.
fn with_instructions(run: &Run, system: &str) -> String {
    if run.instructions.is_empty() {
        return system.to_string();
    }
    format!("{system}\n\n{}", run.instructions)
}

/// The coder's prompt: the system prompt, then the fixed context (goal, task, failures, the
/// context within the first prompt's budget), then what it must hear this turn (refusals,
/// failures, advice). With the files it shows whole, for `context::lean`.
pub(super) fn code(run: &Run) -> (Vec<Message>, Vec<(&str, &str)>) {
    let system = coder_system(run);
    let mut user = format!("Goal: {}\n\n", run.goal);
    if run.tasks.len() > 1
        && let Some(t) = run.tasks.get(run.task)
    {
        user.push_str(&format!(
            "Do only task {} of {} now: {} {}\nDone when: {}\n\n",
            run.task + 1,
            run.tasks.len(),
            t.id,
            t.title,
            t.acceptance
        ));
    }
    if let Some(t) = &run.tests
        && !t.passed
    {
        user.push_str(&match &t.stopped {
            // A hang or a runaway is a bug of its own, not a failure count.
            Some(why) => format!(
                "The tests did not finish: {why}. This is not a failing assertion: find what hangs or runs away. Test output:\n{}\n\n",
                t.report
            ),
            None => format!(
                "The tests fail ({} failed, {} passed). Test output:\n{}\n\n",
                t.failed_count, t.passed_count, t.report
            ),
        });
    }
    user.push_str(&run.memory);
    let (files, shown) = fixed_context(run, &run.agent().tools, system.len() + user.len());
    user.push_str(&files);
    let mut messages = vec![Message::system(system), Message::user(user)];
    for f in &run.feedback {
        messages.push(Message::user(f.clone()));
    }
    (messages, shown)
}

/// "Files:" and the context, within what is left of the first prompt's budget after `used`
/// bytes when the turn has tools to read the rest with (without tools, the runtime's
/// agent.context_bytes is the only limit), and the files it shows whole.
pub(super) fn fixed_context<'r>(
    run: &'r Run,
    tools: &[String],
    used: usize,
) -> (String, Vec<(&'r str, &'r str)>) {
    const HEAD: &str = "Files:\n";
    let lean =
        run.budget().first_prompt_bytes > 0 && run.budget().max_tool_steps > 0 && !tools.is_empty();
    let room = if lean {
        run.budget()
            .first_prompt_bytes
            .saturating_sub(used + HEAD.len() + 1)
    } else {
        usize::MAX
    };
    let rendered = run.context.render(room);
    (format!("{HEAD}{}\n", rendered.text), rendered.files)
}

pub(super) fn reflect(run: &Run) -> Vec<Message> {
    let report = run.tests.as_ref().map(|t| t.report.as_str()).unwrap_or("");
    vec![
        Message::system(run.prompts.get("reflector")),
        Message::user(format!(
            "Goal: {}\nIteration {} of {}.\nTest output after the last change:\n{report}\n{}",
            run.goal,
            run.iterations,
            run.budget().max_iterations,
            run.memory
        )),
    ]
}

/// An answer in Markdown: an explanation, or the plan or review agent's answer.
pub(super) fn explain(run: &Run) -> (Vec<Message>, Vec<(&str, &str)>) {
    let system = match (&run.agent().prompt, run.agent().kind) {
        (Some(p), _) => p.clone(),
        (None, AgentKind::Plan) => run.prompts.get("plan").to_string(),
        (None, AgentKind::Review) => run.prompts.get("review").to_string(),
        (None, AgentKind::Build) => run.prompts.get("explain").to_string(),
    };
    let system = with_instructions(run, &system);
    let head = format!("{}\n\nCode:\n", run.goal);
    let tools = run.agent().reading_tools();
    let (code, shown) = fixed_context(run, &tools, system.len() + head.len());
    let code = code.strip_prefix("Files:\n").unwrap_or(&code);
    let messages = vec![
        Message::system(system),
        Message::user(format!("{head}{code}")),
    ];
    (messages, shown)
}

/// The summariser's prompt: the turn's tool calls and results so far, to be condensed.
pub(super) fn summarize(run: &Run) -> Vec<Message> {
    let mut transcript = String::new();
    for m in run.turn.messages() {
        for c in &m.tool_calls {
            transcript.push_str(&format!("call {}({})\n", c.name, c.arguments));
        }
        if !m.content.is_empty() {
            transcript.push_str(&m.content);
            transcript.push('\n');
        }
    }
    vec![
        Message::system(run.prompts.get("summarizer")),
        Message::user(format!(
            "Goal: {}\n\nTool calls and results so far:\n{transcript}",
            run.goal
        )),
    ]
}

pub(super) fn intent(run: &Run) -> Vec<Message> {
    vec![
        Message::system(run.prompts.get("intent")),
        Message::user(run.goal.clone()),
    ]
}

pub(super) fn plan<'r>(
    run: &'r Run,
    parse_error: Option<&str>,
) -> (Vec<Message>, Vec<(&'r str, &'r str)>) {
    let system = with_instructions(run, run.prompts.get("planner"));
    let head = format!("Goal: {}\n\n{}", run.goal, run.memory);
    let tools = run.agent().reading_tools();
    let (files, shown) = fixed_context(run, &tools, system.len() + head.len());
    let mut messages = vec![
        Message::system(system),
        Message::user(format!("{head}{files}")),
    ];
    if let Some(e) = parse_error {
        messages.push(Message::user(format!(
            "Your plan could not be read ({e}). Answer with the JSON only."
        )));
    }
    (messages, shown)
}

pub(super) fn evaluate(run: &Run) -> Vec<Message> {
    vec![
        Message::system(run.prompts.get("evaluator")),
        Message::user(format!(
            "Goal: {}\nIterations: {}\nFiles changed: {}\nTests: {}",
            run.goal,
            run.iterations,
            run.files_changed.join(", "),
            run.tests.as_ref().map_or("not run".to_string(), tests_line)
        )),
    ]
}

/// A test run in one line: its counts, or why it was stopped.
fn tests_line(t: &super::TestSummary) -> String {
    match &t.stopped {
        Some(why) => format!("did not finish: {why}"),
        None => format!("{} passed, {} failed", t.passed_count, t.failed_count),
    }
}

/// The reviewer's prompt: the run's diff under review, the goal and the test result.
pub(super) fn review(run: &Run) -> Vec<Message> {
    let tests = run.tests.as_ref().map_or("not run".to_string(), tests_line);
    let diff = run.reviewing.diff();
    super::review::prompt(run.prompts.get("reviewer"), &run.goal, &tests, diff)
}
