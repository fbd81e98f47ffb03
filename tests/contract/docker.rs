//! The `docker://` contract runs, one after the other in one binary: the sandboxd path (the
//! default: sandboxd as each container's main process, over its attach stream), then the
//! exec-API path (each command a Docker exec). The command line's arguments apply to each.

use std::process::ExitCode;

use sandboxio::backends::docker::ExecPath;

mod docker_support;

fn main() -> ExitCode {
    let runs = [
        (ExecPath::Sandboxd, "contract_docker (sandboxd path)"),
        (ExecPath::ExecApi, "contract_docker (exec-API path)"),
    ];
    let mut failed = Vec::new();
    for (path, name) in runs {
        println!("\n==== contract run: {name}");
        if docker_support::run(path, name) != ExitCode::SUCCESS {
            failed.push(name);
        }
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("contract runs that failed: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}
