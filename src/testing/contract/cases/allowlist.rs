//! Policy: the allowlist against the project's own test network ([`TestNetwork`]): names,
//! the addresses they resolve to, TLS server names, DNS and UDP from inside, and chained
//! proxy requests. Every name and path a test uses carries its token, so the network's logs
//! tell its traffic from other tests'; each refusal sits beside its positive control.

use std::sync::Arc;
use std::time::Duration;

use crate::NetworkPolicy;
use crate::exec::{Command, ExecResult};
use crate::policy::Capabilities as C;
use crate::testing::TestNetwork;

use super::super::ProbeKind as P;
use super::super::Row;
use super::super::ctx::{Ctx, Verdict, expect};
use super::Case;

pub(super) fn cases() -> Vec<Case> {
    let case = |name, run: fn(Arc<Ctx>) -> crate::backend::BoxFuture<'static, Verdict>| {
        Case::new(Row::Policy, name, run).requires(C::RUN | C::NETWORK_ALLOWLIST).probes(&[P::TestNetwork])
    };
    vec![
        case("policy__allowlist_reaches_a_listed_name_on_its_port_and_nothing_else", |cx| {
            Box::pin(listed_name(cx))
        }),
        case("policy__allowlist_refuses_a_listed_name_resolving_to_an_unlisted_private_address", |cx| {
            Box::pin(private_address(cx))
        }),
        case("policy__allowlist_refuses_tls_naming_another_host_than_the_tunnel", |cx| {
            Box::pin(sni_mismatch(cx))
        }),
        case("policy__allowlist_no_dns_query_from_inside_reaches_a_resolver", |cx| Box::pin(no_dns(cx))),
        case("policy__allowlist_no_udp_leaves_the_sandbox", |cx| Box::pin(no_udp(cx))),
        case("policy__allowlist_a_chained_request_through_the_proxy_gains_nothing", |cx| {
            Box::pin(chained(cx))
        }),
    ]
}

/// What one command did: its exit and what it printed, for failure messages.
struct Outcome {
    ok: bool,
    said: String,
}

/// Runs `commands` one after another in one new sandbox under `policy`.
async fn run_all(cx: &Ctx, policy: &NetworkPolicy, commands: Vec<Command>) -> Result<Vec<Outcome>, String> {
    let sandbox =
        cx.builder().network(policy.clone()).create().await.map_err(|e| cx.unexpected("create()", &e))?;
    let mut outcomes = Vec::new();
    for command in commands {
        match sandbox.run(command.timeout(Duration::from_mins(1))).await {
            Ok(out) => outcomes.push(outcome(&out)),
            Err(e) => {
                let _ = sandbox.close().await;
                return Err(cx.unexpected(&format!("run() under {policy}"), &e));
            }
        }
    }
    let _ = sandbox.close().await;
    Ok(outcomes)
}

fn outcome(out: &ExecResult) -> Outcome {
    let said = format!("{} {}", out.stdout_lossy().trim(), out.stderr_lossy().trim());
    Outcome { ok: out.success(), said: said.trim().to_owned() }
}

fn allowlist<S: AsRef<str>>(entries: impl IntoIterator<Item = S>) -> Result<NetworkPolicy, String> {
    NetworkPolicy::allowlist(entries).map_err(|e| e.to_string())
}

/// A name below `base` unique to this test and `what`.
fn name(cx: &Ctx, what: &str, base: &str) -> String {
    format!("{what}-{}.{base}", cx.token)
}

/// The probe `command` works where the network is open: it succeeds in a sandbox under
/// allow-all (so its failing under an allowlist is the policy's doing, not a broken probe).
async fn works_when_open(cx: &Ctx, command: Command, what: &str) -> Verdict {
    let out = run_all(cx, &NetworkPolicy::allow_all(), vec![command]).await?;
    if out[0].ok {
        Ok(())
    } else {
        Err(cx.control_unavailable(format!("{what} failed even under allow-all: {}", out[0].said)))
    }
}

/// A name below the web host's and one below the other host's, unique to this test.
fn web_and_other(cx: &Ctx, net: &TestNetwork, web: &str, other: &str) -> (String, String) {
    (name(cx, web, &net.web_name), name(cx, other, &net.other_name))
}

/// Passes when `out` succeeded, else says what was `expected`.
fn reached(out: &Outcome, expected: impl FnOnce() -> String) -> Verdict {
    expect(out.ok, || format!("{}, observed a failure: {}", expected(), out.said))
}

/// Passes when `out` failed, else says what was `expected`.
fn refused(out: &Outcome, expected: impl FnOnce() -> String) -> Verdict {
    expect(!out.ok, || format!("{}, observed success: {}", expected(), out.said))
}

/// Passes when no web server logged a line with `needle` at `server` (`addr:port`, or any
/// server for `None`).
fn unseen(net: &TestNetwork, needle: &str, server: Option<&str>, what: &str) -> Verdict {
    let lines = net.http_lines(needle)?;
    let seen: Vec<&String> =
        lines.iter().filter(|l| server.is_none_or(|s| l.starts_with(&format!("{s} ")))).collect();
    expect(seen.is_empty(), || format!("expected {what} to reach no server, observed {seen:?}"))
}

/// Passes when a web server logged a request for `path` at `server` (`addr:port`).
fn seen(net: &TestNetwork, path: &str, server: &str) -> Verdict {
    let lines = net.http_lines(path)?;
    expect(lines.iter().any(|l| l.starts_with(&format!("{server} "))), || {
        format!("expected the request for {path} logged by {server}, observed {lines:?}")
    })
}

async fn listed_name(cx: Arc<Ctx>) -> Verdict {
    let net = cx.test_network()?;
    let (t, port) = (&cx.token, net.http_port);
    let (web, other) = web_and_other(&cx, &net, "listed", "unlisted");
    let urls = [
        format!("http://{web}:{port}/{t}/listed"),
        format!("http://{web}:{}/{t}/other-port", net.unlisted_port),
        format!("http://{other}:{port}/{t}/other-name"),
    ];
    let policy = allowlist([format!("{web}:{port}")])?;
    let out = run_all(&cx, &policy, urls.iter().map(|u| cx.probes.http_get(u)).collect()).await?;
    // The positive control: the listed name on its port, answered by its own server.
    reached(&out[0], || format!("expected {web}:{port} reached under {policy}"))?;
    seen(&net, &format!("/{t}/listed"), &format!("{}:{port}", net.web_addr))?;
    refused(&out[1], || {
        format!("expected {web}:{} refused (only port {port} is listed)", net.unlisted_port)
    })?;
    unseen(&net, &format!("/{t}/other-port"), None, "the request on the unlisted port")?;
    refused(&out[2], || format!("expected the unlisted name {other} refused"))?;
    unseen(&net, &format!("/{t}/other-name"), None, "the request to the unlisted name")?;
    // Nor is an unlisted name looked up (a lookup would carry whatever the sandbox put in
    // the name to the zone's servers); the listed one was, and was counted.
    expect(net.dns_queries(&web)? > 0, || {
        format!("expected the gate's lookup of {web} counted, observed 0")
    })?;
    let asked = net.dns_queries(&other)?;
    expect(asked == 0, || format!("expected the unlisted {other} never looked up, observed {asked} queries"))
}

async fn private_address(cx: Arc<Ctx>) -> Verdict {
    let net = cx.test_network()?;
    let (t, port) = (&cx.token, net.http_port);
    let private = name(&cx, "private", &net.private_name);
    let server = format!("{}:{port}", net.private_addr);
    // The positive control: the same name with its address listed is reachable.
    let listed = allowlist([format!("{private}:{port}"), format!("{}/32:{port}", net.private_addr)])?;
    let out = run_all(&cx, &listed, vec![cx.probes.http_get(&format!("http://{private}:{port}/{t}/listed"))])
        .await?;
    reached(&out[0], || format!("expected {private}:{port} reached under {listed}"))?;
    seen(&net, &format!("/{t}/listed"), &server)?;
    let name_only = allowlist([format!("{private}:{port}")])?;
    let out =
        run_all(&cx, &name_only, vec![cx.probes.http_get(&format!("http://{private}:{port}/{t}/unlisted"))])
            .await?;
    refused(&out[0], || {
        format!(
            "expected {private}, which resolves to the private {}, refused under {name_only}",
            net.private_addr
        )
    })?;
    unseen(&net, &format!("/{t}/unlisted"), None, "the request to a name resolving to a private address")
}

async fn sni_mismatch(cx: Arc<Ctx>) -> Verdict {
    let net = cx.test_network()?;
    let (t, port) = (&cx.token, net.tls_port);
    let (web, other) = web_and_other(&cx, &net, "tls", "sni");
    let matching = cx.probes.tls_get(&web, port, &web, &net.ca_pem, &format!("/{t}/matching"));
    let mismatched = cx.probes.tls_get(&web, port, &other, &net.ca_pem, &format!("/{t}/mismatched"));
    let policy = allowlist([format!("{web}:{port}")])?;
    let out = run_all(&cx, &policy, vec![matching, mismatched]).await?;
    // The positive control: a verified handshake with the test CA, naming the tunnel's host.
    reached(&out[0], || format!("expected a verified TLS session with {web}:{port} naming {web}"))?;
    seen(&net, &format!("/{t}/matching"), &format!("{}:{port}", net.web_addr))?;
    refused(&out[1], || format!("expected a tunnel to {web} carrying TLS for {other} refused"))?;
    unseen(&net, &format!("/{t}/mismatched"), None, "the request inside TLS naming another host")
}

async fn no_dns(cx: Arc<Ctx>) -> Verdict {
    let net = cx.test_network()?;
    let (t, port) = (&cx.token, net.http_port);
    let gate_name = name(&cx, "gate", &net.web_name);
    let direct = name(&cx, "direct", &net.web_name);
    let system = name(&cx, "system", &net.web_name);
    // The probe's own control: under allow-all it reaches the counting server, which counts.
    let open = name(&cx, "open", &net.web_name);
    works_when_open(&cx, cx.probes.dns_query(Some(net.dns), &open), "the dns_query probe").await?;
    let counted = net.dns_queries(&open)?;
    expect(counted > 0, || format!("expected the query for {open} under allow-all counted, observed 0"))?;
    let policy = allowlist([format!("{gate_name}:{port}")])?;
    let out = run_all(
        &cx,
        &policy,
        vec![
            cx.probes.http_get(&format!("http://{gate_name}:{port}/{t}/dns")),
            cx.probes.dns_query(Some(net.dns), &direct),
            cx.probes.dns_query(None, &system),
        ],
    )
    .await?;
    // The positive control: the gate's own lookup of the listed name reaches the counting
    // server, and is counted.
    reached(&out[0], || format!("expected {gate_name}:{port} reached under {policy}"))?;
    let counted = net.dns_queries(&gate_name)?;
    expect(counted > 0, || format!("expected the gate's lookup of {gate_name} counted, observed 0 queries"))?;
    refused(&out[1], || format!("expected no answer from the DNS server {} inside the sandbox", net.dns))?;
    refused(&out[2], || "expected no answer from any resolver the sandbox's resolv.conf names".to_owned())?;
    for asked in [&direct, &system] {
        let queries = net.dns_queries(asked)?;
        expect(queries == 0, || format!("expected 0 queries for {asked} from inside, observed {queries}"))?;
    }
    Ok(())
}

async fn no_udp(cx: Arc<Ctx>) -> Verdict {
    let net = cx.test_network()?;
    let echo = net.udp_echo_port;
    let control = format!("control-{}", cx.token);
    // The positive controls: the echo answers this process, outside any sandbox, and the
    // probe from a sandbox under allow-all.
    if !net.udp_echo_from_here(control.as_bytes())? {
        return Err(cx.control_unavailable(format!(
            "the UDP echo {}:{echo} did not answer this process outside the sandbox",
            net.web_addr
        )));
    }
    let open = format!("open-{}", cx.token);
    works_when_open(&cx, cx.probes.udp_echo(net.web_addr, echo, &open), "the udp_echo probe").await?;
    let inside = format!("inside-{}", cx.token);
    // As much as an allowlist can list: the host's name and its address, on every port.
    let policy = allowlist([format!("{}:*", net.web_name), format!("{}/32:*", net.web_addr)])?;
    let out = run_all(&cx, &policy, vec![cx.probes.udp_echo(net.web_addr, echo, &inside)]).await?;
    refused(&out[0], || {
        format!("expected UDP to {}:{echo} to find no way out under {policy}", net.web_addr)
    })?;
    let arrived = net.udp_lines(&inside)?;
    expect(arrived.is_empty(), || {
        format!("expected the echo to see no datagram from inside, observed {arrived:?}")
    })
}

async fn chained(cx: Arc<Ctx>) -> Verdict {
    let net = cx.test_network()?;
    let (t, port) = (&cx.token, net.http_port);
    let (web, other) = web_and_other(&cx, &net, "outer", "inner");
    let other_server = format!("{}:{port}", net.other_addr);
    // The proxy's own address inside, listed by name: the gate must still not dial it.
    let policy = allowlist([format!("{web}:{port}"), "localhost:3128".to_owned()])?;
    let inner = format!("GET http://{other}:{port}/{t}/inner HTTP/1.1\r\nHost: {other}:{port}\r\n\r\n");
    let out = run_all(
        &cx,
        &policy,
        vec![
            cx.probes.http_get(&format!("http://{web}:{port}/{t}/outer")),
            // A second CONNECT down an allowed tunnel.
            cx.probes.proxy_exchange(
                &format!("CONNECT {web}:{port} HTTP/1.1\r\nHost: {web}:{port}\r\n\r\n"),
                &format!("CONNECT {other}:{port} HTTP/1.1\r\n\r\n{inner}"),
            ),
            // A plain request to the listed host that names the other in its Host header,
            // followed by a request for the other host on the same connection.
            cx.probes.proxy_exchange(
                &format!("GET http://{web}:{port}/{t}/host-header HTTP/1.1\r\nHost: {other}:{port}\r\n\r\n"),
                &inner,
            ),
            // The proxy's own listener, by address and by name.
            cx.probes.proxy_exchange("CONNECT 127.0.0.1:3128 HTTP/1.1\r\n\r\n", &inner),
            cx.probes.proxy_exchange("CONNECT localhost:3128 HTTP/1.1\r\n\r\n", &inner),
        ],
    )
    .await?;
    // The positive control: the listed host is reached, and its server logs the request.
    reached(&out[0], || format!("expected {web}:{port} reached under {policy}"))?;
    seen(&net, &format!("/{t}/outer"), &format!("{}:{port}", net.web_addr))?;
    refused(&out[3], || "expected a CONNECT to the proxy's own 127.0.0.1:3128 refused".to_owned())?;
    refused(&out[4], || "expected a CONNECT to localhost:3128, listed by name, refused".to_owned())?;
    unseen(
        &net,
        &format!("/{t}/host-header"),
        Some(&other_server),
        "a request naming the other host in Host",
    )?;
    unseen(&net, &format!("/{t}/inner"), Some(&other_server), "a chained request for the unlisted host")?;
    unseen(&net, &other, None, "any request naming the unlisted host")
}
