//! A model's turn (the planner's, a Markdown answer's, the coder's, the reviewer's): its
//! prompt, then its tool calls and their results, with the older rounds summarised every
//! `summarize_after` rounds, until it answers. `Turn` is the turn's own state; the phases
//! with a turn send it the events that are not their answer (`To::InTurn`), and the turn's
//! next call is written by `messages::call` (`Call::Turn`).

pub(super) mod state;

use super::messages::Call;
use super::next::{Next, To};
use super::{Effect, Event, Phase, Run};
use crate::conversation::{Message, Role, ToolCall};

/// The events of a model's turn that are not its answer, in every phase with a turn
/// (planning, explaining, coding, reviewing): tool calls and their results, and the summary
/// that replaces a long turn's tool rounds.
pub(super) fn in_turn(run: &mut Run, event: Event) -> Next {
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
            Next::new(
                vec![Effect::Progress(format!(
                    "summarised {rounds} messages of tool calls to keep the prompt small"
                ))],
                To::Ask(Call::Turn),
            )
        }
        Event::ModelFailed {
            role: Role::Summarizer,
            error,
        } => Next::new(
            vec![Effect::Warn(format!(
                "the summary of the tool calls failed ({error}); they stay as they are"
            ))],
            To::Ask(Call::Turn),
        ),
        Event::ToolCalls { text, calls } => {
            run.turn.rounds += 1;
            run.turn.exchange.push(Message::calls(text, calls.clone()));
            let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            Next::stay(vec![
                Effect::Progress(format!("the model reads the code ({})", names.join(", "))),
                Effect::RunTools(calls),
            ])
        }
        Event::ToolResults(results) => tool_results(run, results),
        _ => Next::stay(Vec::new()),
    }
}

/// The tools' results join the turn; then the model is called again, told when that was its
/// last tool round, or first the summarizer, every `summarize_after` rounds.
fn tool_results(run: &mut Run, results: Vec<(ToolCall, String)>) -> Next {
    let turn = &mut run.turn;
    let mut learned = false;
    for (call, text) in &results {
        let key = format!("{}{}", call.name, call.arguments);
        let hash = result_hash(text);
        if !turn.seen.contains(&(key.clone(), hash)) {
            learned = true;
            turn.seen.push((key, hash));
        }
        turn.exchange.push(Message::tool_result(call, text.clone()));
    }
    // Only a round that learned nothing counts toward the step limit.
    if !learned {
        turn.tool_steps += 1;
    }
    let budget = &run.settings.budget;
    if turn.spent(budget.max_tool_steps) {
        let what = if run.phase == Phase::Coding {
            "Answer now with your edits."
        } else {
            "Answer now."
        };
        turn.exchange.push(Message::user(format!(
            "That was the last tool call of this turn ({} rounds, agent.max_tool_steps). {what}",
            turn.rounds
        )));
    } else if budget.summarize_after > 0 && turn.rounds.is_multiple_of(budget.summarize_after) {
        return Next::to(To::Ask(Call::Summarizer));
    }
    Next::to(To::Ask(Call::Turn))
}

/// A result's identity within a turn (FNV-1a: pure, stable across runs and platforms).
fn result_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
