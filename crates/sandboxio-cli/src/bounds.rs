//! The bounds the operator of `sandboxio mcp` sets and a client cannot widen: the widest
//! network policy, the longest TTL, how many live sandboxes one client may hold, and the
//! longest a command or a cell may run. Pure rules, tested on values alone.

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
    /// The longest a `run_command` may run, and its timeout when the call gives none.
    pub exec_timeout: Duration,
    /// The longest a `run_code` cell may run, and its timeout when the call gives none.
    pub cell_timeout: Duration,
}

/// `--exec-timeout`'s and `--cell-timeout`'s default, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;

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

    /// A command's timeout: `asked` seconds if within [`Bounds::exec_timeout`], the bound
    /// itself without one.
    ///
    /// # Errors
    ///
    /// `InvalidInput` naming the bound.
    pub fn exec_timeout(&self, asked: Option<u64>) -> sandboxio::Result<Duration> {
        within(asked, self.exec_timeout, "a command", "--exec-timeout")
    }

    /// A cell's timeout: `asked` seconds if within [`Bounds::cell_timeout`], the bound
    /// itself without one.
    ///
    /// # Errors
    ///
    /// `InvalidInput` naming the bound.
    pub fn cell_timeout(&self, asked: Option<u64>) -> sandboxio::Result<Duration> {
        within(asked, self.cell_timeout, "a cell", "--cell-timeout")
    }
}

/// `asked` seconds if at most `bound`, `bound` without one.
fn within(asked: Option<u64>, bound: Duration, what: &str, flag: &str) -> sandboxio::Result<Duration> {
    match asked {
        None => Ok(bound),
        Some(secs) if Duration::from_secs(secs) <= bound => Ok(Duration::from_secs(secs)),
        Some(secs) => Err(Error::invalid_input(format!(
            "a timeout of {secs} s is above the operator's bound for {what}, {} s ({flag}): ask for {} or less",
            bound.as_secs(),
            bound.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(network: NetworkPolicy) -> Bounds {
        Bounds {
            network,
            max_ttl: Duration::from_mins(10),
            max_sandboxes: 2,
            max_read: DEFAULT_MAX_READ,
            exec_timeout: Duration::from_mins(1),
            cell_timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn a_timeout_defaults_to_the_operators_bound_and_cannot_pass_it() {
        let b = bounds(NetworkPolicy::deny_all());
        assert_eq!(b.exec_timeout(None).unwrap(), Duration::from_mins(1));
        assert_eq!(b.exec_timeout(Some(0)).unwrap(), Duration::ZERO);
        assert_eq!(b.exec_timeout(Some(60)).unwrap(), Duration::from_mins(1));
        let over = b.exec_timeout(Some(61)).unwrap_err();
        assert_eq!(over.code(), sandboxio::ErrorCode::InvalidInput);
        assert!(
            over.to_string().contains("above the operator's bound for a command, 60 s (--exec-timeout)"),
            "{over}"
        );
        assert_eq!(b.cell_timeout(None).unwrap(), Duration::from_secs(30));
        assert!(b.cell_timeout(Some(31)).unwrap_err().to_string().contains("--cell-timeout"));
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
