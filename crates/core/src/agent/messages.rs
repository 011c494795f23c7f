//! Each role's messages, built from a run: the system prompt (the role's text, or the run's
//! agent's own), the fixed context (goal, task, failures, memory, the files within the first
//! prompt's budget) and what the role must hear this turn. A phase names the model call it
//! wants (`Call`); `call` writes it from the run once the step is over, so the driver hands
//! in the files the prompt shows only for a step that calls a model. Pure: the texts come
//! from `prompts`, the files from the run's context.

use super::AgentKind;
use super::run::{Effect, Phase, Run};
use crate::conversation::{Message, Role};

/// A model call a phase asks for; its messages are written from the run by `call`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Call {
    /// The next call of the phase's model turn (the coder's, the planner's, a Markdown
    /// answer's or the reviewer's): its prompt, then the tool calls and results so far.
    Turn,
    /// The planner again, told why its plan could not be read.
    PlanAgain(String),
    Intent,
    Reflector,
    Evaluator,
    /// The summariser, on the turn's tool rounds so far.
    Summarizer,
    /// The tester, with what it heard so far, then these messages (a repair request).
    Tester(Vec<Message>),
}

/// The model call `call`, written from the run as it is now.
pub(super) fn call(run: &Run, call: &Call) -> Effect {
    let (role, messages) = match call {
        Call::Turn => return turn_call(run),
        Call::PlanAgain(e) => (Role::Planner, plan_again(run, e)),
        Call::Intent => (Role::Intent, intent(run)),
        Call::Reflector => (Role::Reflector, reflect(run)),
        Call::Evaluator => (Role::Evaluator, evaluate(run)),
        Call::Summarizer => (Role::Summarizer, summarize(run)),
        Call::Tester(extra) => (Role::Tester, tester(run, extra)),
    };
    Effect::CallModel {
        role,
        messages,
        tools: Vec::new(),
    }
}

/// The model's next call within its turn (the coder's, the planner's, a Markdown answer's
/// or the reviewer's): its prompt, then the tool calls and results so far, with the tools
/// its phase allows while it has tool steps left.
fn turn_call(run: &Run) -> Effect {
    let agent = run.agent();
    let (role, (mut messages, shown), tools) = match run.phase {
        Phase::Planning => (Role::Planner, plan(run, None), agent.reading_tools()),
        Phase::Explaining => (Role::Coder, explain(run), agent.reading_tools()),
        Phase::Reviewing => (
            Role::Reviewer,
            (review(run), Vec::new()),
            agent.reading_tools(),
        ),
        _ => (Role::Coder, code(run), agent.tools.clone()),
    };
    messages.extend(run.turn.messages().iter().cloned());
    // Each file's lines once: an earlier copy the turn read again becomes a pointer.
    let messages = super::context::lean(messages, &shown);
    Effect::CallModel {
        role,
        messages,
        tools: if !run.turn.spent(run.budget().max_tool_steps) {
            tools
        } else {
            Vec::new()
        },
    }
}

/// The planner's prompt and turn once more, then why its plan could not be read.
fn plan_again(run: &Run, error: &str) -> Vec<Message> {
    let (mut messages, shown) = plan(run, None);
    messages.extend(run.turn.messages().iter().cloned());
    let mut messages = super::context::lean(messages, &shown);
    messages.push(Message::user(format!(
        "Your plan could not be read ({error}). Answer with the JSON only."
    )));
    messages
}

/// The tester's prompt: its mode, the goal, the change a regression test is for, the files,
/// what it heard so far; then `extra`.
fn tester(run: &Run, extra: &[Message]) -> Vec<Message> {
    let (mode, change, feedback) = run
        .reproducing
        .work()
        .map_or((super::tester::Mode::Reproduce, "", &[][..]), |w| {
            (w.mode, w.change.as_str(), w.feedback.as_slice())
        });
    let (files, _) = fixed_context(run, &[], 0);
    let mut messages = super::tester::prompt(
        run.prompts.get("tester"),
        (mode, &run.goal, change),
        &files,
        feedback,
    );
    messages.extend(extra.iter().cloned());
    messages
}

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
fn code(run: &Run) -> (Vec<Message>, Vec<(&str, &str)>) {
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
    let mut messages = vec![Message::system(system)];
    messages.extend(earlier(run));
    messages.push(Message::user(user));
    for f in &run.feedback {
        messages.push(Message::user(f.clone()));
    }
    (messages, shown)
}

/// The rewound run's conversation, when this run follows one: after the system prompt and
/// before the goal, so the model reads what was tried, then what to do instead.
fn earlier(run: &Run) -> Vec<Message> {
    run.earlier
        .as_ref()
        .map(|e| e.messages.clone())
        .unwrap_or_default()
}

/// "Files:" and the context, within what is left of the first prompt's budget after `used`
/// bytes when the turn has tools to read the rest with (without tools, the runtime's
/// agent.context_bytes is the only limit), and the files it shows whole.
fn fixed_context<'r>(
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

fn reflect(run: &Run) -> Vec<Message> {
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
fn explain(run: &Run) -> (Vec<Message>, Vec<(&str, &str)>) {
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
    let mut messages = vec![Message::system(system)];
    messages.extend(earlier(run));
    messages.push(Message::user(format!("{head}{code}")));
    (messages, shown)
}

/// The summariser's prompt: the turn's tool calls and results so far, to be condensed.
fn summarize(run: &Run) -> Vec<Message> {
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

fn intent(run: &Run) -> Vec<Message> {
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
    let mut messages = vec![Message::system(system)];
    messages.extend(earlier(run));
    messages.push(Message::user(format!("{head}{files}")));
    if let Some(e) = parse_error {
        messages.push(Message::user(format!(
            "Your plan could not be read ({e}). Answer with the JSON only."
        )));
    }
    (messages, shown)
}

fn evaluate(run: &Run) -> Vec<Message> {
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
fn review(run: &Run) -> Vec<Message> {
    let tests = run.tests.as_ref().map_or("not run".to_string(), tests_line);
    let diff = run.reviewing.diff();
    super::review::prompt(run.prompts.get("reviewer"), &run.goal, &tests, diff)
}
