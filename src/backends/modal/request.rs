//! What the adapter sends: the client-identity headers of every control-plane call and the
//! `SandboxCreate` request built from a create spec. Pure functions with exact-output tests.

use std::collections::BTreeMap;
use std::time::Duration;

use super::config::{Credentials, MAX_TTL};
use super::proto::client::{
    ClientType, NetworkAccess, Resources, Sandbox, SandboxCreateRequest, SandboxTag,
    network_access::NetworkAccessType,
};
use crate::error::{Error, Result};
use crate::policy::{NetworkPolicy, ResourceLimits};

/// The client type the adapter presents (`x-modal-client-type`): Modal's Go SDK, whose
/// protocol paths (the command router for exec and files) are the ones this adapter follows.
/// `docs/adr/0008-modal-backend.md` says why.
pub(crate) const CLIENT_TYPE: ClientType = ClientType::LibmodalGo;
/// `x-modal-client-version`: the Python SDK version whose behaviour the client claims, the
/// value Modal's Go SDK sends.
pub(crate) const CLIENT_VERSION: &str = "1.0.0";
/// `x-modal-libmodal-version`: names this library and its version, not an SDK's.
pub(crate) const LIBRARY_VERSION: &str = concat!("sandboxio-rust/", env!("CARGO_PKG_VERSION"));

/// The command that keeps a sandbox alive between execs (its entrypoint).
pub(crate) const ENTRYPOINT: [&str; 2] = ["sleep", "infinity"];

/// The most tags Modal is sent from metadata, and the longest tag name and value.
pub(crate) const MAX_TAGS: usize = 64;
/// The longest tag name or value.
pub(crate) const MAX_TAG_LEN: usize = 256;

/// The metadata headers of every control-plane call, in order. The secret is the only
/// value that must never be logged: callers put it in a sensitive header value.
pub(crate) fn identity_headers(credentials: &Credentials) -> [(&'static str, String); 5] {
    [
        ("x-modal-client-type", (CLIENT_TYPE as i32).to_string()),
        ("x-modal-client-version", CLIENT_VERSION.to_owned()),
        ("x-modal-libmodal-version", LIBRARY_VERSION.to_owned()),
        ("x-modal-token-id", credentials.token_id.clone()),
        ("x-modal-token-secret", credentials.token_secret.expose_secret().to_owned()),
    ]
}

/// What a create sends besides the app and the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreatePlan<'a> {
    pub(crate) ttl: Duration,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) limits: ResourceLimits,
    pub(crate) network: &'a NetworkPolicy,
    pub(crate) metadata: &'a BTreeMap<String, String>,
}

/// Whole seconds, rounded up, at most [`MAX_TIMEOUT`](crate::exec::MAX_TIMEOUT)'s (`Duration::MAX`
/// overflowed the rounding).
fn whole_seconds(d: Duration) -> u64 {
    crate::duration::whole_seconds(d, 0)
}

/// The `SandboxCreate` request: the entrypoint [`ENTRYPOINT`], `timeout_secs` always set
/// (the TTL rounded up to a second), the idle timeout when there is one, CPU and memory
/// limits as both request and hard limit (a limit reserves what it allows), the network (see
/// [`network_access`]), and one tag per metadata pair.
///
/// # Errors
///
/// [`Error::Configuration`]: a TTL over [`MAX_TTL`], a memory limit over `u32::MAX` MiB,
/// more than [`MAX_TAGS`] metadata pairs or a key or value longer than [`MAX_TAG_LEN`] or
/// empty key, an allowlist (not offered by `modal://`; Modal's own allowlists are not
/// sandboxio's `NETWORK_ALLOWLIST`).
pub(crate) fn create_request(
    app_id: &str,
    image_id: &str,
    plan: &CreatePlan<'_>,
) -> Result<SandboxCreateRequest> {
    if plan.ttl > MAX_TTL {
        return Err(Error::configuration(format!(
            "modal:// sandboxes live at most 24 h (86400 s); the TTL asked for is {} s",
            whole_seconds(plan.ttl)
        )));
    }
    let timeout_secs = u32::try_from(whole_seconds(plan.ttl).max(1)).unwrap_or(u32::MAX);
    let idle_timeout_secs =
        plan.idle_timeout.map(|d| u32::try_from(whole_seconds(d).max(1)).unwrap_or(u32::MAX));
    let memory_mb = plan
        .limits
        .memory_mib
        .map(|m| {
            u32::try_from(m).map_err(|_| {
                Error::configuration(format!("modal:// memory limit {m} MiB is over {} MiB", u32::MAX))
            })
        })
        .transpose()?;
    let resources = (memory_mb.is_some() || plan.limits.cpu_millicores.is_some()).then(|| Resources {
        memory_mb: memory_mb.unwrap_or(0),
        memory_mb_max: memory_mb.unwrap_or(0),
        milli_cpu: plan.limits.cpu_millicores.unwrap_or(0),
        milli_cpu_max: plan.limits.cpu_millicores.unwrap_or(0),
    });
    let network_access = network_access(plan.network)?;
    if plan.metadata.len() > MAX_TAGS {
        return Err(Error::configuration(format!(
            "modal:// carries at most {MAX_TAGS} metadata pairs as tags; {} given",
            plan.metadata.len()
        )));
    }
    let mut tags = Vec::with_capacity(plan.metadata.len());
    for (k, v) in plan.metadata {
        if k.is_empty() || k.len() > MAX_TAG_LEN || v.len() > MAX_TAG_LEN {
            return Err(Error::configuration(format!(
                "modal:// metadata {k:?}: tag names must be 1 to {MAX_TAG_LEN} bytes and values at most {MAX_TAG_LEN}"
            )));
        }
        tags.push(SandboxTag { tag_name: k.clone(), tag_value: v.clone() });
    }
    Ok(SandboxCreateRequest {
        app_id: app_id.to_owned(),
        definition: Some(Sandbox {
            entrypoint_args: ENTRYPOINT.iter().map(|s| (*s).to_owned()).collect(),
            image_id: image_id.to_owned(),
            secret_ids: Vec::new(),
            resources,
            timeout_secs,
            workdir: None,
            network_access: Some(network_access),
            name: None,
            idle_timeout_secs,
        }),
        tags,
    })
}

/// The sandbox's `NetworkAccess`: `deny_all()` is `BLOCKED`, `allow_all()` is `OPEN`, and a
/// [`ProviderAllowlist`](crate::policy::ProviderAllowlist) is `ALLOWLIST` with its domains as
/// `allowed_domains` (Modal's domain allowlist: TLS on port 443 to a listed server name,
/// `*.suffix` wildcards as Modal writes them) and no `allowed_cidrs`. Modal's CIDR allowlist
/// is an address filter, but no sandboxio policy a `modal://` sandbox takes carries address
/// blocks: a provider allowlist holds names only, and `NetworkPolicy::allowlist` (whose
/// entries include names) needs `NETWORK_ALLOWLIST`, which Modal's name filter cannot give.
///
/// # Errors
///
/// [`Error::Configuration`] for `NetworkPolicy::allowlist`.
fn network_access(policy: &NetworkPolicy) -> Result<NetworkAccess> {
    let (access, domains) = match policy {
        NetworkPolicy::DenyAll => (NetworkAccessType::Blocked, Vec::new()),
        NetworkPolicy::AllowAll => (NetworkAccessType::Open, Vec::new()),
        NetworkPolicy::ProviderAllowlist(list) => (NetworkAccessType::Allowlist, list.domains().to_vec()),
        _ => {
            return Err(Error::configuration(
                "modal:// does not offer NETWORK_ALLOWLIST: Modal's domain allowlist decides on the TLS server name only; use deny_all(), allow_all() or NetworkPolicy::provider_allowlist(..)",
            ));
        }
    };
    Ok(NetworkAccess {
        network_access_type: access as i32,
        allowed_cidrs: Vec::new(),
        allowed_domains: domains,
    })
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::ErrorCode;
    use crate::secret::SecretString;

    fn plan<'a>(network: &'a NetworkPolicy, metadata: &'a BTreeMap<String, String>) -> CreatePlan<'a> {
        CreatePlan {
            ttl: Duration::from_millis(300_001),
            idle_timeout: None,
            limits: ResourceLimits::default(),
            network,
            metadata,
        }
    }

    #[test]
    fn headers_name_the_client_and_carry_the_token() {
        let c = Credentials { token_id: "ak-1".into(), token_secret: SecretString::new("as-2") };
        assert_eq!(
            identity_headers(&c),
            [
                ("x-modal-client-type", "9".to_owned()),
                ("x-modal-client-version", "1.0.0".to_owned()),
                ("x-modal-libmodal-version", format!("sandboxio-rust/{}", env!("CARGO_PKG_VERSION"))),
                ("x-modal-token-id", "ak-1".to_owned()),
                ("x-modal-token-secret", "as-2".to_owned()),
            ]
        );
    }

    #[test]
    fn a_deny_all_create_with_ttl_limits_and_tags() {
        let deny = NetworkPolicy::deny_all();
        let metadata: BTreeMap<String, String> =
            [("owner".into(), "ci".into()), ("run".into(), "42".into())].into();
        let mut p = plan(&deny, &metadata);
        p.idle_timeout = Some(Duration::from_mins(1));
        p.limits = ResourceLimits::new().memory_mib(512).cpu_millicores(1500);
        let r = create_request("ap-1", "im-2", &p).unwrap();
        assert_eq!(
            format!("{r:?}"),
            "SandboxCreateRequest { app_id: \"ap-1\", definition: Some(Sandbox { entrypoint_args: [\"sleep\", \"infinity\"], image_id: \"im-2\", secret_ids: [], resources: Some(Resources { memory_mb: 512, milli_cpu: 1500, memory_mb_max: 512, milli_cpu_max: 1500 }), timeout_secs: 301, workdir: None, network_access: Some(NetworkAccess { network_access_type: Blocked, allowed_cidrs: [], allowed_domains: [] }), name: None, idle_timeout_secs: Some(60) }), tags: [SandboxTag { tag_name: \"owner\", tag_value: \"ci\" }, SandboxTag { tag_name: \"run\", tag_value: \"42\" }] }"
        );
        // The wire bytes carry the field numbers of the upstream file: Sandbox is field 2,
        // timeout_secs field 7 (varint 301 = 0xad 0x02), network_access field 22
        // (tag 0xb2 0x01) holding BLOCKED = 2, idle_timeout_secs field 33 (tag 0x88 0x02).
        let def = r.definition.as_ref().unwrap().encode_to_vec();
        let has = |needle: &[u8]| def.windows(needle.len()).any(|w| w == needle);
        assert!(has(&[0x38, 0xad, 0x02]), "{def:02x?}");
        assert!(has(&[0xb2, 0x01, 0x02, 0x08, 0x02]), "{def:02x?}");
        assert!(has(&[0x88, 0x02, 60]), "{def:02x?}");
        assert_eq!(r.encode_to_vec()[..6], [0x0a, 0x04, b'a', b'p', b'-', b'1']);
    }

    #[test]
    fn allow_all_is_open_and_no_limits_send_no_resources() {
        let open = NetworkPolicy::allow_all();
        let none = BTreeMap::new();
        let r = create_request("ap", "im", &plan(&open, &none)).unwrap();
        let d = r.definition.unwrap();
        assert_eq!(d.network_access.unwrap().network_access_type, NetworkAccessType::Open as i32);
        assert_eq!((d.resources, d.idle_timeout_secs, r.tags.len()), (None, None, 0));
        let mut p = plan(&open, &none);
        p.ttl = Duration::from_millis(1);
        assert_eq!(create_request("ap", "im", &p).unwrap().definition.unwrap().timeout_secs, 1);
        p.ttl = MAX_TTL;
        assert_eq!(create_request("ap", "im", &p).unwrap().definition.unwrap().timeout_secs, 86_400);
    }

    #[test]
    fn a_provider_allowlist_is_modals_domain_allowlist_with_no_cidrs() {
        let list = NetworkPolicy::provider_allowlist(["PyPI.org", "*.pythonhosted.org"]).unwrap();
        let none = BTreeMap::new();
        let d = create_request("ap", "im", &plan(&list, &none)).unwrap().definition.unwrap();
        let access = d.network_access.unwrap();
        assert_eq!(
            format!("{access:?}"),
            "NetworkAccess { network_access_type: Allowlist, allowed_cidrs: [], allowed_domains: [\"pypi.org\", \"*.pythonhosted.org\"] }"
        );
        // On the wire: ALLOWLIST = 3 in field 1, each domain in field 3 (tag 0x1a).
        let bytes = access.encode_to_vec();
        assert_eq!(bytes[..4], [0x08, 0x03, 0x1a, 8]);
        assert_eq!(&bytes[4..12], b"pypi.org");
    }

    #[test]
    fn what_modal_cannot_take_is_a_configuration_error() {
        let open = NetworkPolicy::allow_all();
        let allow = NetworkPolicy::allowlist(["pypi.org"]).unwrap();
        let none = BTreeMap::new();
        let long: BTreeMap<String, String> = [("k".into(), "v".repeat(257))].into();
        let many: BTreeMap<String, String> = (0..65).map(|i| (format!("k{i}"), String::new())).collect();
        let mut over = plan(&open, &none);
        over.ttl = MAX_TTL + Duration::from_millis(1);
        for (p, message) in [
            (over, "modal:// sandboxes live at most 24 h (86400 s); the TTL asked for is 86401 s"),
            (
                plan(&allow, &none),
                "modal:// does not offer NETWORK_ALLOWLIST: Modal's domain allowlist decides on the TLS server name only; use deny_all(), allow_all() or NetworkPolicy::provider_allowlist(..)",
            ),
            (
                plan(&open, &long),
                "modal:// metadata \"k\": tag names must be 1 to 256 bytes and values at most 256",
            ),
            (plan(&open, &many), "modal:// carries at most 64 metadata pairs as tags; 65 given"),
        ] {
            let err = create_request("ap", "im", &p).unwrap_err();
            assert_eq!(err.code(), ErrorCode::Configuration);
            assert_eq!(err.to_string(), format!("[SBX-003] configuration error: {message}"));
        }
    }
}
