//! How the gate looks names up: the [`Resolve`] trait, the host's resolver, and one DNS
//! server asked directly ([`EgressResolver::dns_server`]).

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

use crate::policy::EgressResolver;

/// Looks names up for the gate: the host's resolver or one DNS server in production, a
/// table in tests.
pub(crate) trait Resolve: Send + Sync + 'static {
    /// The addresses of `name`, in preference order.
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;
}

/// The host's own resolver (`getaddrinfo` through tokio).
pub(crate) struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((name, 0)).await?.map(|a| a.ip()).collect()) })
    }
}

/// One DNS server, asked for `A` and `AAAA` over UDP with TCP after a truncated or lost
/// answer, without `/etc/hosts` or search domains.
struct DnsServer {
    resolver: TokioResolver,
}

impl Resolve for DnsServer {
    fn lookup<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move {
            // Fully qualified: asked as written, never with a search domain appended.
            let fqdn = format!("{}.", name.trim_end_matches('.'));
            let found = self.resolver.lookup_ip(fqdn.as_str()).await.map_err(io::Error::other)?;
            Ok(found.iter().collect())
        })
    }
}

/// The gate's resolver for `config`.
///
/// # Errors
///
/// When the DNS client cannot be set up.
pub(crate) fn resolver_for(config: &EgressResolver) -> io::Result<Arc<dyn Resolve>> {
    let Some(server) = config.server() else {
        return Ok(Arc::new(SystemResolver));
    };
    let mut name_server = NameServerConfig::udp_and_tcp(server.ip());
    for connection in &mut name_server.connections {
        connection.port = server.port();
    }
    let mut builder = TokioResolver::builder_with_config(
        ResolverConfig::from_parts(None, Vec::new(), vec![name_server]),
        TokioRuntimeProvider::default(),
    );
    let options = builder.options_mut();
    options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    options.use_hosts_file = ResolveHosts::Never;
    options.ndots = 0;
    options.try_tcp_on_error = true;
    let resolver = builder.build().map_err(io::Error::other)?;
    Ok(Arc::new(DnsServer { resolver }))
}
