//! The batch's progress on stderr: one bar redrawn in place on a terminal, plain lines
//! otherwise (a log, CI). indicatif is not a dependency of agent-ls and one line needs none.

use std::io::{IsTerminal, Write};

use super::results::TaskResult;

/// The bar's width in characters.
const WIDTH: usize = 30;

pub struct Progress {
    total: usize,
    /// Tasks done before this batch started (skipped) or ended in it.
    ended: usize,
    failed: usize,
    running: usize,
    terminal: bool,
}

impl Progress {
    pub fn new(total: usize, skipped: usize) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        if skipped > 0 {
            eprintln!(
                "agent-ls: batch: {skipped} of {total} task(s) have a result already; skipped"
            );
        }
        Progress {
            total,
            ended: skipped,
            failed: 0,
            running: 0,
            terminal,
        }
    }

    pub fn started(&mut self, id: &str) {
        self.running += 1;
        if self.terminal {
            self.draw(&format!("{id} started"));
        } else {
            eprintln!(
                "agent-ls: batch: [{}/{}] {id} started",
                self.ended, self.total
            );
        }
    }

    pub fn finished(&mut self, r: &TaskResult) {
        self.running = self.running.saturating_sub(1);
        self.ended += 1;
        if !r.succeeded() {
            self.failed += 1;
        }
        let what = format!("{} {} ({} ms)", r.id, r.status, r.duration_ms);
        if self.terminal {
            self.draw(&what);
        } else {
            eprintln!("agent-ls: batch: [{}/{}] {what}", self.ended, self.total);
        }
    }

    /// Leaves the bar's last state on its own line.
    pub fn end(&self) {
        if self.terminal {
            eprintln!();
        }
        eprintln!(
            "agent-ls: batch: {} of {} task(s) have a result, {} not done in this batch",
            self.ended, self.total, self.failed
        );
    }

    fn draw(&self, last: &str) {
        let filled = (self.ended * WIDTH)
            .checked_div(self.total)
            .unwrap_or(WIDTH);
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[K[{}{}] {}/{} · {} failed · {} running · {last}",
            "#".repeat(filled),
            "-".repeat(WIDTH - filled),
            self.ended,
            self.total,
            self.failed,
            self.running
        );
        let _ = err.flush();
    }
}
