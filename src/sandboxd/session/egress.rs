//! A sandbox under [`NetworkPolicy::allowlist`](crate::NetworkPolicy::allowlist), on every
//! backend that runs sandboxd: the sandbox's network namespace has only loopback, as under
//! deny-all; its one way out is the egress gate (`crate::egress`), which this process serves
//! on a Unix socket the backend binds into the sandbox. A `sandboxd relay` command listens on
//! [`RELAY_ADDR`] inside and carries each connection to that socket, and every command gets
//! the proxy variables common tools read ([`proxy_env`]).
//!
//! The gate lives in the process that created the sandbox, held by the creating handle and,
//! once the sandbox is detached, until the sandbox ends: when that process exits the
//! sandbox has no way out any more (it fails closed), even if it was detached and lives on.
//! A `connect`ed handle holds no gate; its commands get the proxy variables and go out
//! through the creator's gate while it lasts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{Session, SessionExecStream};
use crate::audit::{EgressRecord, OperationKind, OperationRecord, Outcome};
use crate::backend::CreateSpec;
use crate::egress::gate::{Event, Gate};
use crate::egress::server::GateServer;
use crate::error::ErrorCode;
use crate::error::{Error, Result};
use crate::exec::Command;
use crate::policy::{EgressResolver, NetworkPolicy};

/// Where the relay listens inside the sandbox.
pub(crate) const RELAY_ADDR: &str = "127.0.0.1:3128";

/// The proxy URL commands are given.
const PROXY_URL: &str = "http://127.0.0.1:3128";

/// The gate socket's file name, in the directory a backend binds into the sandbox.
pub(crate) const SOCKET: &str = "egress.sock";

/// How long the relay may take to listen.
const RELAY_START: Duration = Duration::from_secs(10);

/// The proxy variables every command of an allowlisted sandbox starts with: the forms curl,
/// wget, Python (`urllib`, pip, requests), Node's npm and Go read. `NO_PROXY` is empty: no
/// destination bypasses the gate (none could: there is no route).
pub(crate) fn proxy_env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"]
            .iter()
            .map(|k| ((*k).to_owned(), PROXY_URL.to_owned()))
            .collect();
    env.extend(
        ["npm_config_proxy", "npm_config_https_proxy"]
            .iter()
            .map(|k| ((*k).to_owned(), PROXY_URL.to_owned())),
    );
    env.extend(["NO_PROXY", "no_proxy"].iter().map(|k| ((*k).to_owned(), String::new())));
    env
}

/// A sandbox's way out: its gate and the relay command inside.
pub(crate) struct Egress {
    _gate: GateServer,
    _relay: SessionExecStream,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress").finish_non_exhaustive()
    }
}

/// Serves a gate for the allowlist of `spec` on a Unix socket at `socket` (before the
/// sandbox starts: the backend binds the socket's directory into it). `scheme` and `id`
/// name the sandbox in errors, in the gate's log lines and in the audit records each
/// decision makes for the sandbox's sinks (`spec.audit`, [`OperationKind::Egress`]). Names
/// are resolved with `resolver` (the backend's `with_egress_resolver`).
///
/// # Errors
///
/// [`Error::Provider`] when the socket or the gate's runtime cannot be set up.
pub(crate) fn serve_gate(
    socket: &Path,
    scheme: &'static str,
    id: &str,
    spec: &CreateSpec,
    resolver: &EgressResolver,
) -> Result<GateServer> {
    let NetworkPolicy::Allowlist(entries) = &spec.network else {
        return Err(Error::provider_message(scheme, "an egress gate needs an allowlist"));
    };
    let template = OperationRecord {
        kind: OperationKind::Egress,
        sandbox_id: Some(id.to_owned()),
        backend: scheme.to_owned(),
        started_at: std::time::SystemTime::now(),
        duration: Duration::ZERO,
        outcome: Outcome::Ok,
        metadata: spec.metadata.clone(),
        policy: Some(spec.network.clone()),
        egress: None,
    };
    let (audit, sandbox) = (spec.audit.clone(), id.to_owned());
    let logged = std::sync::Mutex::new(Budget::new(EVENTS_PER_SECOND));
    let audited = std::sync::Mutex::new(Budget::new(RECORDS_PER_SECOND));
    let events = Arc::new(move |event: Event| {
        // The sandbox's code chooses what these say and how often: bounded both ways.
        if !audit.is_empty()
            && let Some(suppressed) = audited.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
        {
            audit.emit(&record(&template, &event, suppressed));
        }
        let Some(suppressed) = logged.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() else {
            return;
        };
        match event {
            Event::Allowed { host, port, addr } => {
                let host = clip(&host);
                tracing::info!(target: "sandboxio::egress", sandbox = %sandbox, %host, port, %addr, suppressed, "egress allowed");
            }
            Event::Refused { host, port, reason, detail } => {
                let (host, detail) = (clip(&host), clip(&detail));
                tracing::warn!(target: "sandboxio::egress", sandbox = %sandbox, %host, port, reason, %detail, suppressed, "egress refused");
            }
        }
    });
    let cannot = |e| Error::provider(scheme, "cannot start the sandbox's egress gate", e);
    let gate = Gate::new(entries.clone(), events).with_resolver(resolver).map_err(cannot)?;
    GateServer::start(socket, gate).map_err(cannot)
}

/// The audit record of one gate decision.
fn record(template: &OperationRecord, event: &Event, suppressed: u64) -> OperationRecord {
    let (outcome, mut egress) = match event {
        Event::Allowed { host, port, addr } => {
            (Outcome::Ok, EgressRecord::new(host, *port, Some(*addr), None))
        }
        Event::Refused { host, port, reason, .. } => (
            Outcome::Error(ErrorCode::NetworkPolicyViolation),
            EgressRecord::new(host, *port, None, Some(reason)),
        ),
    };
    egress.suppressed = suppressed;
    OperationRecord {
        started_at: std::time::SystemTime::now(),
        outcome,
        egress: Some(egress),
        ..template.clone()
    }
}

/// The most audit records of gate decisions one sandbox makes per second; the rest are
/// counted, and the count rides on the next record.
const RECORDS_PER_SECOND: u32 = 100;

/// The most gate events logged per second for one sandbox; the rest are counted, and the
/// count rides on the next event logged.
const EVENTS_PER_SECOND: u32 = 20;

/// The most characters of sandbox-chosen text (a host, a refusal's detail) one event logs.
const LOGGED_TEXT: usize = 200;

/// A per-second allowance of log lines or records.
struct Budget {
    per_second: u32,
    window: Option<std::time::Instant>,
    used: u32,
    suppressed: u64,
}

impl Budget {
    fn new(per_second: u32) -> Budget {
        Budget { per_second, window: None, used: 0, suppressed: 0 }
    }

    /// `Some(events suppressed since the last logged one)` when this event may be logged.
    fn take(&mut self) -> Option<u64> {
        let now = std::time::Instant::now();
        if self.window.is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1)) {
            self.window = Some(now);
            self.used = 0;
        }
        if self.used >= self.per_second {
            self.suppressed += 1;
            return None;
        }
        self.used += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// `text`, cut to [`LOGGED_TEXT`] characters.
fn clip(text: &str) -> String {
    match text.char_indices().nth(LOGGED_TEXT) {
        Some((at, _)) => format!("{}… ({} bytes)", &text[..at], text.len()),
        None => text.to_owned(),
    }
}

/// Starts the relay inside the sandbox (`sandboxd relay`, run from `sandboxd` there) towards
/// the gate's socket at `socket` there, and waits until it listens.
///
/// # Errors
///
/// [`Error::Provider`] when it does not say it listens within 10 seconds.
pub(crate) async fn start_relay(
    session: &Arc<Session>,
    gate: GateServer,
    sandboxd: &str,
    socket: &str,
) -> Result<Egress> {
    let command = Command::new(sandboxd).args(["relay", RELAY_ADDR, socket]);
    let mut relay = session.stream(&command, false)?;
    let first = futures_lite::future::or(
        async { std::future::poll_fn(|cx| relay.poll_next_chunk(cx)).await },
        async {
            futures_timer::Delay::new(RELAY_START).await;
            None
        },
    )
    .await;
    match first {
        Some(Ok(chunk)) if chunk.data.starts_with(b"listening") => Ok(Egress { _gate: gate, _relay: relay }),
        other => Err(Error::provider_message(
            session.scheme,
            format!("the egress relay did not start in the sandbox: {other:?}"),
        )),
    }
}

/// How a backend records a sandbox's network policy (a container label, a line of the
/// sandbox's record), so a `connect`ed handle reports it and gives its commands the proxy: `deny-all`, `allow-all`, or the allowlist's entries separated by spaces.
pub(crate) fn policy_label(policy: &crate::NetworkPolicy) -> String {
    match policy {
        crate::NetworkPolicy::Allowlist(entries) => {
            entries.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
        }
        other => other.to_string(),
    }
}

/// The policy a label written by [`policy_label`] records; `None` for anything else.
pub(crate) fn policy_of_label(label: &str) -> Option<crate::NetworkPolicy> {
    match label {
        "deny-all" => Some(crate::NetworkPolicy::DenyAll),
        "allow-all" => Some(crate::NetworkPolicy::AllowAll),
        entries => crate::NetworkPolicy::allowlist(entries.split(' ').filter(|e| !e.is_empty())).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NetworkPolicy;

    #[test]
    fn a_policy_survives_its_label() {
        for policy in [
            NetworkPolicy::DenyAll,
            NetworkPolicy::AllowAll,
            NetworkPolicy::allowlist([
                "pypi.org",
                "*.pythonhosted.org:*",
                "!evil.pythonhosted.org",
                "10.0.0.0/8:8080",
            ])
            .unwrap(),
        ] {
            let label = policy_label(&policy);
            assert_eq!(policy_of_label(&label), Some(policy), "{label}");
        }
        assert_eq!(
            policy_label(&NetworkPolicy::allowlist(["pypi.org", "!x.org"]).unwrap()),
            "pypi.org !x.org:*"
        );
        assert_eq!(policy_of_label("not a host!"), None);
    }

    #[test]
    fn logging_is_bounded_in_rate_and_length() {
        let mut budget = Budget::new(EVENTS_PER_SECOND);
        let logged = (0..100).filter(|_| budget.take().is_some()).count();
        assert_eq!(logged, EVENTS_PER_SECOND as usize);
        assert_eq!(budget.suppressed, 80);
        let long = "x".repeat(16 * 1024);
        let clipped = clip(&long);
        assert!(clipped.len() < 300 && clipped.ends_with("(16384 bytes)"), "{clipped}");
        assert_eq!(clip("pypi.org"), "pypi.org");
    }

    #[test]
    fn every_proxy_variable_names_the_relay_and_nothing_bypasses_it() {
        let env = proxy_env();
        for key in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "npm_config_https_proxy",
        ] {
            assert!(env.contains(&(key.to_owned(), "http://127.0.0.1:3128".to_owned())), "{key}");
        }
        assert!(env.contains(&("NO_PROXY".to_owned(), String::new())));
        assert_eq!(RELAY_ADDR, PROXY_URL.trim_start_matches("http://"));
    }
}
