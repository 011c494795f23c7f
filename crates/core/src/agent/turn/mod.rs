//! A model's turn (the planner's, a Markdown answer's, the coder's, the reviewer's): its
//! prompt, then its tool calls and their results, with the older rounds summarised every
//! `summarize_after` rounds, until it answers. `Turn` is the turn's own state; the phases
//! with a turn hand it the events that are not their answer (`in_turn`).

mod state;

pub(super) use state::Turn;

use super::{Effect, Event, Phase, Run, messages};
use crate::conversation::{Message, Role, ToolCall};

/// The events of a model's turn that are not its answer, in every phase with a turn
/// (planning, explaining, coding, reviewing): tool calls and their results, and the summary
/// that replaces a long turn's tool rounds.
pub(super) fn in_turn(run: &mut Run, event: Event) -> Vec<Effect> {
    match event {
        Event::ModelAnswered {
            role: Role::Summarizer,
            text,
        } => {
            let rounds = run.turn.exchange.len();
            run.turn.exchange = vec![Message::user(format!(
                "Notes on your earlier tool calls in this turn (summarised to save room):\n{}",
                text.trim()
            ))];
            vec![
                Effect::Progress(format!(
                    "summarised {rounds} messages of tool calls to keep the prompt small"
                )),
                continue_call(run),
            ]
        }
        Event::ModelFailed {
            role: Role::Summarizer,
            error,
        } => vec![
            Effect::Warn(format!(
                "the summary of the tool calls failed ({error}); they stay as they are"
            )),
            continue_call(run),
        ],
        Event::ToolCalls { text, calls } => {
            run.turn.tool_steps += 1;
            run.turn.exchange.push(Message::calls(text, calls.clone()));
            let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            vec![
                Effect::Progress(format!("the model reads the code ({})", names.join(", "))),
                Effect::RunTools(calls),
            ]
        }
        Event::ToolResults(results) => tool_results(run, results),
        _ => Vec::new(),
    }
}

/// The tools' results join the turn; then the model is called again, told when that was its
/// last tool round, or first the summarizer, every `summarize_after` rounds.
fn tool_results(run: &mut Run, results: Vec<(ToolCall, String)>) -> Vec<Effect> {
    let turn = &mut run.turn;
    for (call, text) in &results {
        turn.exchange.push(Message::tool_result(call, text.clone()));
    }
    let budget = &run.settings.budget;
    if turn.tool_steps >= budget.max_tool_steps {
        let what = if run.phase == Phase::Coding {
            "Answer now with your edits."
        } else {
            "Answer now."
        };
        turn.exchange.push(Message::user(format!(
            "That was the last tool call of this turn ({} rounds, agent.max_tool_steps). {what}",
            turn.tool_steps
        )));
    } else if budget.summarize_after > 0 && turn.tool_steps.is_multiple_of(budget.summarize_after) {
        return vec![Effect::CallModel {
            role: Role::Summarizer,
            messages: messages::summarize(run),
            tools: Vec::new(),
        }];
    }
    vec![continue_call(run)]
}

/// The model's next call within its turn (the coder's, the planner's, a Markdown answer's
/// or the reviewer's): its prompt, then the tool calls and results so far, with the tools
/// its phase allows while it has tool steps left.
pub(super) fn continue_call(run: &mut Run) -> Effect {
    if !matches!(
        run.phase,
        Phase::Planning | Phase::Explaining | Phase::Reviewing
    ) {
        run.phase = Phase::Coding;
    }
    let agent = &run.settings.agent;
    let (role, (mut messages, shown), tools) = match run.phase {
        Phase::Planning => (
            Role::Planner,
            messages::plan(run, None),
            agent.reading_tools(),
        ),
        Phase::Explaining => (Role::Coder, messages::explain(run), agent.reading_tools()),
        Phase::Reviewing => (
            Role::Reviewer,
            (messages::review(run), Vec::new()),
            agent.reading_tools(),
        ),
        _ => (Role::Coder, messages::code(run), agent.tools.clone()),
    };
    messages.extend(run.turn.exchange.iter().cloned());
    // Each file's lines once: an earlier copy the turn read again becomes a pointer.
    let messages = super::context::lean(messages, &shown);
    Effect::CallModel {
        role,
        messages,
        tools: if run.turn.tool_steps < run.settings.budget.max_tool_steps {
            tools
        } else {
            Vec::new()
        },
    }
}
