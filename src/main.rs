//! The `agent-ls` command line: `serve` (the default) speaks LSP on stdio; `config` prints the
//! effective configuration with the source of every value.

use std::path::PathBuf;
use std::process::ExitCode;

use agent_ls::config::{self, Inputs};
use agent_ls::{logging, server};
use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "agent-ls",
    version,
    about = "A language server that puts a coding agent in your editor"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Speak the Language Server Protocol on stdin/stdout (the default).
    Serve,
    /// Print the effective configuration and where each value came from.
    Config {
        /// The workspace whose `.agent-ls.toml` applies (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print JSON instead of annotated TOML.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(),
        Command::Config { workspace, json } => match print_config(workspace, json) {
            Ok(code) => code,
            Err(err) => {
                eprintln!("agent-ls: {err:#}");
                ExitCode::from(1)
            }
        },
    }
}

fn serve() -> ExitCode {
    // Logging is set up from the layers known before the client connects (user file and
    // environment); the level follows later layers once the session has them.
    let early = config::load(&Inputs::from_process(None));
    let log = logging::init(early.config.log.level, early.config.log.file.as_deref());
    for err in &early.errors {
        tracing::error!("{err}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("agent-ls: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(server::serve_stdio(log));
    // Background tasks may still hold the runtime; the protocol is finished, so leave now.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    ExitCode::from(code as u8)
}

fn print_config(workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let root = match workspace {
        Some(dir) => dir,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let loaded = config::load(&Inputs::from_process(Some(root)));
    let entries = loaded.entries();
    if json {
        let items: Vec<_> = entries
            .iter()
            .map(|(key, value, source)| {
                serde_json::json!({"key": key, "value": value, "source": source.to_string()})
            })
            .collect();
        let errors: Vec<String> = loaded.errors.iter().map(|e| e.to_string()).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"entries": items, "errors": errors}))?
        );
    } else {
        for (key, value, source) in &entries {
            let shown = if value.is_null() {
                "(unset)".to_string()
            } else {
                value.to_string()
            };
            println!("{key} = {shown}    # {source}");
        }
        for err in &loaded.errors {
            eprintln!("agent-ls: {err}");
        }
    }
    Ok(if loaded.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
