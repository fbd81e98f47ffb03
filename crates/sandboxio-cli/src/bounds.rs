//! The bounds the operator of `sandboxio mcp` sets and a client cannot widen: the widest
//! network policy, the longest TTL, and how many live sandboxes one client may hold. Pure
//! rules, tested on values alone.

use std::time::Duration;

use sandboxio::{Error, NetworkPolicy};

/// What a client's `create_sandbox` may ask for.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// The widest policy; also what a client gets when it asks for none.
    pub network: NetworkPolicy,
    /// The longest TTL a client may ask for, at creation or in `extend_sandbox`.
    pub max_ttl: Duration,
    /// How many live sandboxes one client may hold at once.
    pub max_sandboxes: usize,
    /// The largest file `read_file` returns, and the most of a `run_code` cell kept, in bytes.
    pub max_read: u64,
}

/// `--max-read`'s default, in bytes.
pub const DEFAULT_MAX_READ: u64 = 4 * 1024 * 1024;

impl Bounds {
    /// The client's policy if the operator's contains it: deny-all is within every policy;
    /// under allow-all anything goes; under an allowlist, an allowlist each of whose
    /// entries is one of the operator's and which keeps every deny entry of the operator's
    /// (entries are compared whole: a host the operator allows through a wider entry is
    /// refused, never widened).
    ///
    /// # Errors
    ///
    /// `InvalidInput` naming both policies.
    pub fn network(&self, asked: Option<NetworkPolicy>) -> sandboxio::Result<NetworkPolicy> {
        let Some(asked) = asked else { return Ok(self.network.clone()) };
        let contained = match (&self.network, &asked) {
            (_, NetworkPolicy::DenyAll) | (NetworkPolicy::AllowAll, _) => true,
            // Every entry asked is one of the operator's, and every deny entry of the
            // operator's is asked too: a deny carves a hole in the operator's allows, and a
            // client that kept the allows but left the deny out would open it.
            (NetworkPolicy::Allowlist(ours), NetworkPolicy::Allowlist(theirs)) => {
                theirs.iter().all(|entry| ours.contains(entry))
                    && ours.iter().filter(|entry| entry.is_deny()).all(|deny| theirs.contains(deny))
            }
            _ => false,
        };
        if contained {
            Ok(asked)
        } else {
            Err(Error::invalid_input(format!(
                "the network policy {asked:?} is wider than the operator allows ({:?})",
                self.network
            )))
        }
    }

    /// `asked` seconds if within [`Bounds::max_ttl`], else the refusal; without one, the
    /// library's default TTL capped at the bound.
    ///
    /// # Errors
    ///
    /// `InvalidInput` naming the bound.
    pub fn ttl(&self, asked: Option<u64>) -> sandboxio::Result<Duration> {
        match asked {
            None => Ok(sandboxio::builder::DEFAULT_TTL.min(self.max_ttl)),
            Some(secs) if Duration::from_secs(secs) <= self.max_ttl => Ok(Duration::from_secs(secs)),
            Some(secs) => Err(Error::invalid_input(format!(
                "a TTL of {secs} s is above the operator's bound, {} s",
                self.max_ttl.as_secs()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(network: NetworkPolicy) -> Bounds {
        Bounds { network, max_ttl: Duration::from_mins(10), max_sandboxes: 2, max_read: DEFAULT_MAX_READ }
    }

    #[test]
    fn a_client_policy_is_allowed_only_inside_the_operator_one() {
        let list = |hosts: &[&str]| NetworkPolicy::allowlist(hosts.iter().copied()).unwrap();
        let deny = bounds(NetworkPolicy::deny_all());
        assert_eq!(deny.network(None).unwrap(), NetworkPolicy::deny_all());
        assert_eq!(deny.network(Some(NetworkPolicy::deny_all())).unwrap(), NetworkPolicy::deny_all());
        assert!(deny.network(Some(NetworkPolicy::allow_all())).is_err());
        assert!(deny.network(Some(list(&["pypi.org"]))).is_err());

        let some = bounds(list(&["pypi.org", "github.com"]));
        assert_eq!(some.network(Some(list(&["pypi.org"]))).unwrap(), list(&["pypi.org"]));
        assert_eq!(some.network(Some(NetworkPolicy::deny_all())).unwrap(), NetworkPolicy::deny_all());
        let wider = some.network(Some(list(&["pypi.org", "example.com"]))).unwrap_err();
        assert_eq!(wider.code(), sandboxio::ErrorCode::InvalidInput);
        assert!(some.network(Some(NetworkPolicy::allow_all())).is_err());

        // The operator's deny entries cannot be left out (a client asking only the allows
        // would reach what the operator denied).
        let holed = bounds(list(&["*.example", "!secret.example"]));
        assert_eq!(
            holed.network(Some(list(&["*.example"]))).unwrap_err().code(),
            sandboxio::ErrorCode::InvalidInput
        );
        let kept = list(&["*.example", "!secret.example"]);
        assert_eq!(holed.network(Some(kept.clone())).unwrap(), kept);
        assert!(holed.network(Some(list(&["!secret.example"]))).is_ok(), "a deny alone is narrower");

        let open = bounds(NetworkPolicy::allow_all());
        assert_eq!(open.network(Some(list(&["a.example"]))).unwrap(), list(&["a.example"]));
    }

    #[test]
    fn a_ttl_is_capped() {
        let b = bounds(NetworkPolicy::deny_all());
        assert_eq!(b.ttl(Some(600)).unwrap(), Duration::from_mins(10));
        assert_eq!(b.ttl(Some(601)).unwrap_err().code(), sandboxio::ErrorCode::InvalidInput);
        assert_eq!(b.ttl(None).unwrap(), Duration::from_mins(10), "the default, 10 minutes, fits");
        let short = Bounds { max_ttl: Duration::from_mins(1), ..b };
        assert_eq!(short.ttl(None).unwrap(), Duration::from_mins(1));
    }
}
