//! The `docker://` contract run on the exec-API path (`exec=api`): one engine exec per
//! command, the fallback for builds without sandboxd.

use std::process::ExitCode;

use sandboxio::backends::docker::ExecPath;

mod docker_support;

fn main() -> ExitCode {
    docker_support::run(ExecPath::ExecApi, "contract_docker_exec_api")
}
