//! One Example Cloud sandbox: commands through the exec endpoint, kill by `DELETE`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandboxio::backend::{BackendSandbox, BoxFuture, KillOutcome, run_blocking};
use sandboxio::{Command, Error, ExecResult, ExitStatus, Result, policy::Capabilities};

use crate::api::{ExecReply, ExecRequest};
use crate::client::Client;
use crate::errors::{self, Asked};
use crate::{CAPABILITIES, SCHEME};

/// A live sandbox, owned or attached (the core keeps track of which).
#[derive(Debug)]
pub(crate) struct ExampleSandbox {
    id: String,
    client: Client,
}

impl ExampleSandbox {
    pub(crate) fn new(id: String, client: Client) -> Self {
        ExampleSandbox { id, client }
    }
}

impl BackendSandbox for ExampleSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn run(&self, command: Command) -> BoxFuture<'_, Result<ExecResult>> {
        let (client, id) = (self.client.clone(), self.id.clone());
        Box::pin(async move {
            // The core has validated the command; the adapter passes on every field of it.
            let timeout = command.timeout_duration();
            let request = ExecRequest {
                exec_id: unique_id("exec"),
                argv: command.argv().to_vec(),
                env: command.env_vars().to_vec(),
                cwd: command.working_dir().map(str::to_owned),
                stdin: command.stdin_bytes().map(<[u8]>::to_vec),
                timeout_ms: timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                output_limit: command.output_limit_bytes(),
            };
            let reply = run_blocking(SCHEME, move |cancel| {
                // The request blocks until the command ends: a dropped future kills it.
                let (killer, sandbox, exec) = (client.clone(), id.clone(), request.exec_id.clone());
                cancel.on_cancel(move || {
                    let _ = killer.kill_exec(&sandbox, &exec);
                });
                client.exec(&id, &request).map_err(|e| errors::map(e, Asked::Sandbox(&id)))
            })
            .await?;
            into_result(reply, timeout)
        })
    }

    fn kill(&self) -> BoxFuture<'_, Result<KillOutcome>> {
        let (client, id) = (self.client.clone(), self.id.clone());
        Box::pin(run_blocking(SCHEME, move |_| match client.delete(&id) {
            Ok(true) => Ok(KillOutcome::Killed),
            Ok(false) => Ok(KillOutcome::AlreadyGone),
            Err(e) => Err(errors::map(e, Asked::Sandbox(&id))),
        }))
    }

    fn detach(&self) -> BoxFuture<'_, Result<()>> {
        // Example Cloud sandboxes live until deleted or until their TTL, whoever holds them:
        // letting go needs no call.
        Box::pin(async { Ok(()) })
    }
}

/// The reply as sandboxio reports it: a timeout is an error carrying the partial output,
/// any exit status (non-zero, a signal) is data.
fn into_result(reply: ExecReply, timeout: Option<Duration>) -> Result<ExecResult> {
    let status = match (reply.exit_code, reply.signal) {
        (_, Some(signal)) => ExitStatus::Signal(signal),
        (Some(code), None) => ExitStatus::Code(code),
        (None, None) if reply.timed_out => ExitStatus::Signal(9),
        (None, None) => {
            return Err(Error::provider_message(
                SCHEME,
                "the exec reply has neither an exit code nor a signal",
            ));
        }
    };
    let result = ExecResult::new(0, reply.stdout, reply.stderr)
        .with_status(status)
        .with_truncated(reply.truncated)
        .with_duration(Duration::from_millis(reply.duration_ms));
    match (reply.timed_out, timeout) {
        (true, Some(timeout)) => Err(Error::execution_timeout(timeout, result)),
        (true, None) => {
            Err(Error::provider_message(SCHEME, "the provider timed out a command that had no timeout"))
        }
        (false, _) => Ok(result),
    }
}

/// An id the provider has never seen: this process, the time, a counter.
pub(crate) fn unique_id(kind: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{kind}-{}-{nanos:x}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}
