//! The egress gate: how a sandbox under [`NetworkPolicy::allowlist`](crate::NetworkPolicy::allowlist)
//! reaches the listed destinations and nothing else.
//!
//! The gate runs in sandboxio's own process, one per sandbox, and speaks HTTP `CONNECT` and
//! plain-HTTP proxying to the sandbox's clients. It decides on the destination the client
//! names, never on what the sandbox resolved: names are looked up by the host, every address
//! they give must be public or listed, and only those vetted addresses are dialled. A tunnel
//! must then start with a TLS `ClientHello` whose server name is the host the tunnel was
//! opened for.
//!
//! - `crate::policy::address`: host names and IP addresses in every spelling, and
//!   non-public addresses;
//! - [`decide`]: the decision as pure functions;
//! - [`request`]: the proxy request head;
//! - [`sni`]: the `ClientHello`'s server name;
//! - [`resolve`]: how names are looked up (the host's resolver, or one DNS server);
//! - [`gate`]: one connection, judged and relayed;
//! - [`server`]: a gate on a Unix socket, on the gate's own runtime;
//! - [`handover`]: a client socket handed over by the relay inside the sandbox;
//! - [`splice`]: an open tunnel relayed by the kernel.
//!
//! What it cannot see: a TLS session whose inner `Host` differs from its server name (domain
//! fronting through a CDN that serves both) reaches whatever the listed name's servers
//! forward it to. Only terminating TLS would close that, which the gate does not do.

// The gate's users are the backends: with the feature on its own, nothing calls it.
#![cfg_attr(not(any(feature = "local", feature = "docker")), allow(dead_code))]

pub(crate) mod decide;
pub(crate) mod gate;
pub(crate) mod handover;
pub(crate) mod request;
pub(crate) mod resolve;
pub(crate) mod server;
pub(crate) mod sni;
pub(crate) mod splice;

#[cfg(test)]
mod tests;
