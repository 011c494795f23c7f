//! Level 3 of the context budget: before each call the conversation is cut to the model's
//! window. The oldest middle turns go first; the system prompt, the goal (the first user
//! message) and the latest turn (the latest failure, the last tool results) never do. A tool
//! call and its results go together, as the protocols require. Pure.

use crate::conversation::{Message, Speaker};

pub struct Fitted {
    pub messages: Vec<Message>,
    /// Messages left out.
    pub dropped: usize,
    /// The tokens of what is sent.
    pub tokens: usize,
}

/// `messages` within `window` tokens as `count` counts them (per message, plus a few for its
/// framing). When even the kept messages exceed the window they are sent as they are: the
/// server's own error then says so.
pub fn fit(messages: Vec<Message>, window: usize, count: impl Fn(&str) -> usize) -> Fitted {
    let cost = |m: &Message| {
        4 + count(&m.content)
            + m.tool_calls
                .iter()
                .map(|c| count(&c.name) + count(&c.arguments.to_string()))
                .sum::<usize>()
    };
    let costs: Vec<usize> = messages.iter().map(cost).collect();
    let mut total: usize = costs.iter().sum();
    if total <= window || messages.len() <= 3 {
        return Fitted {
            messages,
            dropped: 0,
            tokens: total,
        };
    }
    // Kept whatever happens: the system prompt and the first user message at the front, and
    // the last unit at the back.
    let head = messages
        .iter()
        .position(|m| m.speaker == Speaker::User)
        .map_or(1, |i| i + 1);
    let units = units(&messages, head);
    let mut drop = vec![false; messages.len()];
    // Every unit but the last may go, oldest first.
    for unit in units.iter().take(units.len().saturating_sub(1)) {
        if total <= window {
            break;
        }
        for i in unit.clone() {
            drop[i] = true;
            total -= costs[i];
        }
    }
    let dropped = drop.iter().filter(|d| **d).count();
    let mut kept: Vec<Message> = messages
        .into_iter()
        .zip(drop)
        .filter_map(|(m, d)| (!d).then_some(m))
        .collect();
    if dropped > 0 {
        let note = Message::user(format!(
            "[{dropped} earlier messages were left out to fit the model's window]"
        ));
        total += cost(&note);
        kept.insert(head, note);
    }
    Fitted {
        messages: kept,
        dropped,
        tokens: total,
    }
}

/// The messages after `head` in units that go together: an assistant's tool calls with the
/// results that answer them; every other message alone.
fn units(messages: &[Message], head: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut i = head;
    while i < messages.len() {
        let mut end = i + 1;
        if !messages[i].tool_calls.is_empty() {
            while end < messages.len()
                && (messages[end].speaker == Speaker::Tool || messages[end].answers.is_some())
            {
                end += 1;
            }
        }
        out.push(i..end);
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ToolCall;

    fn bytes(t: &str) -> usize {
        t.len()
    }

    #[test]
    fn the_oldest_middle_turns_go_and_the_ends_stay() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "grep".into(),
            arguments: serde_json::json!({"pattern": "x"}),
        };
        let msgs = vec![
            Message::system("system prompt"),
            Message::user("goal and the latest failure"),
            Message::calls(String::new(), vec![call("1")]),
            Message::tool_result(&call("1"), "a".repeat(500)),
            Message::calls(String::new(), vec![call("2")]),
            Message::tool_result(&call("2"), "b".repeat(500)),
            Message::user("That was the last tool call"),
        ];
        let all = fit(msgs.clone(), 10_000, bytes);
        assert_eq!((all.dropped, all.messages.len()), (0, 7));
        let cut = fit(msgs.clone(), 700, bytes);
        // The first call and its result went together; the second round stays.
        assert_eq!(cut.dropped, 2);
        assert_eq!(cut.messages[0].content, "system prompt");
        assert_eq!(cut.messages[1].content, "goal and the latest failure");
        assert!(cut.messages[2].content.contains("2 earlier messages"));
        assert_eq!(cut.messages[3].tool_calls[0].id, "2");
        assert_eq!(
            cut.messages.last().unwrap().content,
            "That was the last tool call"
        );
        assert!(cut.tokens <= 700, "{}", cut.tokens);
        // A window smaller than what must stay: everything else goes, the ends are sent.
        let tiny = fit(msgs, 10, bytes);
        assert_eq!(tiny.dropped, 4);
        assert_eq!(tiny.messages.len(), 4);
    }
}
