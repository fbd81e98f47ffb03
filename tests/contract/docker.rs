//! The `docker://` contract run on the sandboxd path (the default): sandboxd as each
//! container's main process, over its attach stream.

use std::process::ExitCode;

use sandboxio::backends::docker::ExecPath;

mod docker_support;

fn main() -> ExitCode {
    docker_support::run(ExecPath::Sandboxd, "contract_docker")
}
