//! `sandboxio`: run untrusted code in a sandbox from a shell (`run`, `code`, `create`,
//! `exec`, `cp`, `kill`), see and clean up what runs (`ls`, `reap`, `extend`), build `docker://` images (`image build`), or serve sandboxes to agent frameworks over MCP (`mcp`).
//!
//! Every subcommand, argument, default and example is in the repository's `docs/cli.md`,
//! generated from the clap tree in `args.rs` by `reference.rs` (a test there fails when the
//! committed page is out of date).

mod args;
mod bounds;
mod commands;
mod image;
mod inventory;
mod mcp;
#[cfg(test)]
mod reference;

mod progress;

use std::time::Duration;

use clap::{CommandFactory, Parser};

use crate::args::{Cli, Cmd};

/// How long the end of `main` waits for background teardowns (a sandbox dropped on an
/// error path) before exiting.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

fn main() {
    let cli = Cli::parse();
    if let Cmd::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "sandboxio", &mut std::io::stdout());
        return;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("sandboxio: cannot start the async runtime: {e}");
            std::process::exit(commands::EXIT_ERROR);
        }
    };
    let code = runtime.block_on(async {
        let code = match cli.command {
            Cmd::Run(a) => commands::run(a).await,
            Cmd::Code(a) => commands::code(a).await,
            Cmd::Create(a) => commands::create(a).await,
            Cmd::Exec(a) => commands::exec(a).await,
            Cmd::Cp(a) => commands::cp(a).await,
            Cmd::Kill(a) => commands::kill(a).await,
            Cmd::Ls(a) => inventory::ls(a).await,
            Cmd::Reap(a) => inventory::reap(a).await,
            Cmd::Extend(a) => inventory::extend(a).await,
            Cmd::Mcp(a) => mcp::serve(a).await,
            Cmd::Image(a) => image::run(a).await,
            Cmd::Completions { .. } => unreachable!("handled before the runtime starts"),
        };
        sandboxio::runtime::shutdown(SHUTDOWN_WAIT).await;
        code
    });
    // Stop the runtime before exit so no task outlives the teardown wait.
    drop(runtime);
    std::process::exit(code);
}
