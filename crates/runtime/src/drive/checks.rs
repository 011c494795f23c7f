//! The driver's side of the run's check points (`hooks::Gate`): a tool call an `ask` rule
//! holds goes to the user through the shell's own question before it may run, and what the
//! check points have to tell the user is shown by the shell and kept in the journal.

use super::observer::Observer;
use super::policy::{self, Policy};
use super::shell::Shell;
use crate::hooks::Gate;
use crate::permissions::Check;
use agent_ls_core::events::RunEvent;

/// Whether `name` may run with `arguments`: `None` lets it run, `Some(why)` refuses it and is
/// what the model hears. The rules and the mode first; an `ask` rule's question to the user
/// (the `approval_needed` hooks fire before it); then the `before_tool` hooks.
pub(super) async fn call_allowed(
    name: &str,
    arguments: &serde_json::Value,
    (shell, policy): (&mut impl Shell, &Policy),
    (observer, gate): (&mut Observer<'_>, &Gate),
) -> Option<String> {
    match gate.check_call(name, arguments) {
        Check::Refuse(why) => return Some(why),
        Check::Ask(why) => {
            gate.call_approval_needed(name, arguments).await;
            tell(gate, shell, observer);
            if let policy::Held::Refuse(reason) = policy::call(policy, shell.present()) {
                return Some(format!("{why}, and {reason}"));
            }
            if !shell.ask_call(name, arguments, &why).await {
                return Some(format!("{why}, and the user said no"));
            }
        }
        Check::Go => {}
    }
    gate.before_tool(name, arguments).await
}

/// What the check points have to tell the user since the last call (hooks that failed, timed
/// out, were not trusted): each shown by the shell and kept as a `warning` line.
pub(super) fn tell(gate: &Gate, shell: &mut impl Shell, observer: &mut Observer<'_>) {
    for message in gate.take_reports() {
        shell.warn(&message);
        observer.record(RunEvent::Warning { message });
    }
}
