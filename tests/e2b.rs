//! `e2b://` against the protocol stub (`tests/support/e2b_stub`): the transports end to
//! end over TLS, the faults the stub provokes, and the typed error each one ends in.

#![cfg(all(feature = "e2b", feature = "local", feature = "contract"))]

#[path = "support/e2b_stub/mod.rs"]
mod e2b_stub;
#[path = "support/start_race.rs"]
mod start_race;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandboxio::backends::e2b::E2bBackend;
use sandboxio::{Code, Command, ErrorCode, ExitStatus, NetworkPolicy, Sandbox};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_lite::future::block_on(f)
}

async fn sandbox(backend: E2bBackend) -> Sandbox {
    Sandbox::builder_with(backend)
        .network(NetworkPolicy::deny_all())
        .create()
        .await
        .expect("a sandbox on the stub")
}

#[test]
fn run_exit_codes_stdin_and_env_over_tls() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let sandbox = Sandbox::builder_with(stub.backend())
            .network(NetworkPolicy::deny_all())
            .metadata("team", "t1")
            .env("PLAIN", "p")
            .create()
            .await
            .unwrap();
        let out = sandbox.run(Command::new("echo").arg("hi there")).await.unwrap();
        assert_eq!((out.status, out.stdout.as_slice()), (ExitStatus::Code(0), &b"hi there\n"[..]));
        let out = sandbox.run(Command::shell("echo err >&2; exit 3")).await.unwrap();
        assert_eq!((out.status, out.stderr.as_slice()), (ExitStatus::Code(3), &b"err\n"[..]));
        let out = sandbox.run(Command::new("cat").stdin(b"piped".to_vec())).await.unwrap();
        assert_eq!(out.stdout, b"piped");
        let out = sandbox.run(Command::shell("echo $FOO $PLAIN").env("FOO", "bar")).await.unwrap();
        assert_eq!(out.stdout, b"bar p\n");
        let out = sandbox.run(Command::shell("kill -9 $$")).await.unwrap();
        assert_eq!(out.status, ExitStatus::Signal(9));
        let out = sandbox.run(Command::shell("exit 137")).await.unwrap();
        assert_eq!(out.status, ExitStatus::Code(137), "envd's child leads no group: the status is exact");
        sandbox.close().await.unwrap();
    });
    let sent = stub.state.creates.lock().unwrap()[0].clone();
    assert_eq!(sent["allow_internet_access"], false);
    assert_eq!(sent["timeout"], 120, "an owned sandbox's TTL is the owner bound: {sent}");
    assert_eq!(sent["templateID"], "code-interpreter-v1");
    assert_eq!(sent["metadata"], serde_json::json!({"team": "t1"}));
    assert_eq!(sent["envVars"], serde_json::json!({"PLAIN": "p"}));
}

#[test]
fn a_detached_sandbox_is_sent_its_whole_ttl() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let sandbox = Sandbox::builder_with(stub.backend())
            .network(NetworkPolicy::allow_all())
            .ttl(Duration::from_mins(30))
            .detached(true)
            .template("base")
            .create()
            .await
            .unwrap();
        sandbox.kill().await.unwrap();
    });
    let sent = stub.state.creates.lock().unwrap()[0].clone();
    assert_eq!((sent["timeout"].as_u64(), sent["templateID"].as_str()), (Some(1800), Some("base")));
    assert_eq!(sent["allow_internet_access"], true);
}

#[test]
fn a_refused_key_is_auth_and_a_missing_one_names_the_variable() {
    let stub = e2b_stub::Stub::start();
    let wrong = E2bBackend::for_stub(e2b_stub::DOMAIN, stub.addr, &stub.ca_pem, "e2b_ffff").unwrap();
    let err = block_on(Sandbox::builder_with(wrong).network(NetworkPolicy::deny_all()).create()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Auth, "{err}");
    assert!(std::error::Error::source(&err).is_some(), "the reply is kept as the source");
    let none = E2bBackend::for_stub(e2b_stub::DOMAIN, stub.addr, &stub.ca_pem, "").unwrap();
    let err = block_on(Sandbox::builder_with(none).network(NetworkPolicy::deny_all()).create()).unwrap_err();
    assert!(matches!(&err, sandboxio::Error::Auth { env_var: Some(v), .. } if v == "E2B_API_KEY"), "{err}");
}

#[test]
fn the_concurrency_cap_is_rate_limited_with_its_retry_after() {
    let stub = e2b_stub::Stub::start();
    stub.state.faults.max_sandboxes.store(1, Ordering::SeqCst);
    block_on(async {
        let first = sandbox(stub.backend()).await;
        let err = Sandbox::builder_with(stub.backend())
            .network(NetworkPolicy::deny_all())
            .create()
            .await
            .unwrap_err();
        assert!(
            matches!(&err, sandboxio::Error::RateLimited { retry_after: Some(d), .. } if *d == Duration::from_secs(2)),
            "{err:?}"
        );
        first.close().await.unwrap();
    });
}

#[test]
fn a_one_time_504_on_an_idempotent_call_is_retried() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let owner = sandbox(stub.backend()).await;
        stub.state.faults.fail_next_with_504.store(true, Ordering::SeqCst);
        let attached =
            Sandbox::connect_with(stub.backend(), owner.id()).await.expect("connect retried past the 504");
        assert_eq!(attached.run(Command::new("true")).await.unwrap().status, ExitStatus::Code(0));
        owner.close().await.unwrap();
    });
}

#[test]
fn a_create_answered_504_is_not_retried() {
    let stub = e2b_stub::Stub::start();
    stub.state.faults.fail_next_with_504.store(true, Ordering::SeqCst);
    let err = block_on(Sandbox::builder_with(stub.backend()).network(NetworkPolicy::deny_all()).create())
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Provider, "{err}");
    assert_eq!(
        stub.state.creates.lock().unwrap().len(),
        0,
        "the 504 came before the create reached the stub"
    );
    assert_eq!(stub.state.sandboxes.lock().unwrap().len(), 0, "no second try made a sandbox");
}

#[test]
fn an_expired_sandbox_is_gone_on_every_plane() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        assert!(stub.expire(sandbox.id()));
        let deadline = Instant::now() + Duration::from_secs(5);
        while stub.state.sandbox(sandbox.id()).is_some() && Instant::now() < deadline {
            futures_timer::Delay::new(Duration::from_millis(50)).await;
        }
        let run = sandbox.run(Command::new("true")).await.unwrap_err();
        assert_eq!(run.code(), ErrorCode::SandboxGone, "envd's 502: {run}");
        let read = sandbox.fs().read("/etc/hostname").await.unwrap_err();
        assert_eq!(read.code(), ErrorCode::SandboxGone, "{read}");
        let code = sandbox.run_code("1").await.unwrap_err();
        assert_eq!(code.code(), ErrorCode::SandboxGone, "the interpreter's 502: {code}");
        let connect = Sandbox::connect_with(stub.backend(), sandbox.id()).await.unwrap_err();
        assert_eq!(connect.code(), ErrorCode::Connect, "the API's 404 on connect: {connect}");
    });
}

#[test]
fn a_stream_cut_without_its_end_frame_is_a_typed_error() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        stub.state.faults.cut_next_stream.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let err = sandbox.run(Command::new("sleep").arg("30")).await.unwrap_err();
        assert_eq!(
            err.code(),
            ErrorCode::Provider,
            "envd still answers: the cut is reported, not a gone sandbox: {err}"
        );
        assert!(err.to_string().contains("cut") || format!("{err:?}").contains("MissingEnd"), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "no hang: {:?}", started.elapsed());
        sandbox.close().await.unwrap();
    });
}

#[test]
fn a_quiet_command_is_kept_alive_by_keepalives_and_a_silent_stream_is_dead() {
    let stub = e2b_stub::Stub::start();
    // A keepalive asked every second: a stream quiet for two is dead.
    let backend = stub.backend().with_stream_keepalive(Duration::from_secs(1));
    block_on(async {
        let sandbox = sandbox(backend).await;
        // Quiet for five keepalive periods: envd's keepalives hold the stream open.
        let started = Instant::now();
        let quiet = sandbox.run(Command::new("sh").args(["-c", "sleep 5; echo done"])).await;
        let quiet = quiet.expect("a command quiet for 5 s with a keepalive every second");
        assert_eq!((quiet.status, quiet.stdout_lossy().trim()), (ExitStatus::Code(0), "done"));
        assert!(started.elapsed() >= Duration::from_secs(5), "{:?}", started.elapsed());
        // The same command on a stream that sends nothing is taken for dead at twice the
        // period, not waited on.
        stub.state.faults.silent_streams.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let silent = sandbox.run(Command::new("sh").args(["-c", "sleep 30; echo done"])).await.unwrap_err();
        let took = started.elapsed();
        stub.state.faults.silent_streams.store(false, Ordering::SeqCst);
        assert_eq!(silent.code(), ErrorCode::Provider, "{silent}");
        assert!(silent.to_string().contains("silent"), "{silent}");
        assert!(took < Duration::from_secs(10), "the idle limit ended it after {took:?}");
        sandbox.close().await.unwrap();
    });
}

/// The stub's `/files` download answers byte ranges as envd's (Go's `http.ServeContent`).
#[test]
fn a_files_download_serves_byte_ranges() {
    let stub = e2b_stub::Stub::start();
    let sandbox = block_on(sandbox(stub.backend()));
    block_on(sandbox.fs().write("ranges.bin", b"0123456789".to_vec())).unwrap();
    let id = sandbox.id().to_owned();
    let token = stub.state.sandbox(&id).unwrap().token.clone();
    let host = format!("49983-{id}.{}", e2b_stub::DOMAIN);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let got: Vec<(Option<&str>, u16, String, String)> = runtime.block_on(async {
        let client = raw_client(&stub, &host);
        let url = format!("https://{host}:{}/files", stub.addr.port());
        let mut got = Vec::new();
        for range in [
            None,
            Some("bytes=2-4"),
            Some("bytes=7-"),
            Some("bytes=-3"),
            Some("bytes=8-20"),
            Some("bytes=10-"),
            Some("bytes=x-1"),
        ] {
            let mut request =
                client.get(&url).query(&[("path", "ranges.bin")]).header("x-access-token", &token);
            if let Some(range) = range {
                request = request.header("range", range);
            }
            let reply = request.send().await.unwrap();
            let status = reply.status().as_u16();
            let content_range = reply
                .headers()
                .get("content-range")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            got.push((range, status, content_range, reply.text().await.unwrap()));
        }
        got
    });
    let want = [
        (None, 200, "", "0123456789"),
        (Some("bytes=2-4"), 206, "bytes 2-4/10", "234"),
        (Some("bytes=7-"), 206, "bytes 7-9/10", "789"),
        (Some("bytes=-3"), 206, "bytes 7-9/10", "789"),
        (Some("bytes=8-20"), 206, "bytes 8-9/10", "89"),
        (Some("bytes=10-"), 416, "bytes */10", ""),
        (Some("bytes=x-1"), 416, "bytes */10", ""),
    ];
    let got: Vec<_> = got.iter().map(|(r, s, c, b)| (*r, *s, c.as_str(), b.as_str())).collect();
    assert_eq!(got, want);
    block_on(sandbox.close()).unwrap();
}

#[test]
fn files_round_trip_as_bytes() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        let bytes: Vec<u8> = (0..=255).collect();
        sandbox.fs().write("d/bin.dat", bytes.clone()).await.unwrap();
        assert_eq!(sandbox.fs().read("d/bin.dat").await.unwrap(), bytes);
        let listed = sandbox.fs().list("d").await.unwrap();
        assert_eq!(listed.iter().map(|e| (e.name.as_str(), e.size)).collect::<Vec<_>>(), [("bin.dat", 256)]);
        let missing = sandbox.fs().read("d/nope").await.unwrap_err();
        assert_eq!(missing.code(), ErrorCode::NotFound, "{missing}");
        sandbox.fs().mkdir("d").await.expect("an existing directory is not an error");
        sandbox.fs().remove("d", true).await.unwrap();
        assert_eq!(sandbox.fs().read("d/bin.dat").await.unwrap_err().code(), ErrorCode::NotFound);
        sandbox.close().await.unwrap();
    });
}

#[test]
fn code_cells_keep_state_in_contexts_and_return_rich_results() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        let context = sandbox.create_context("python").await.unwrap();
        sandbox.run_code(Code::new("x = 41").in_context(&context)).await.unwrap();
        let out = sandbox.run_code(Code::new("print(x + 1)").in_context(&context)).await.unwrap();
        assert_eq!(out.stdout, b"42\n");
        let out = sandbox.run_code(Code::new("1/0")).await.unwrap();
        assert_eq!(out.error.as_ref().map(|e| e.name.as_str()), Some("ZeroDivisionError"), "{out:?}");
        assert!(!out.success());
        let html = "class H:\n    def _repr_html_(self): return '<b>hi</b>'\nH()";
        let out = sandbox.run_code(Code::new(html)).await.unwrap();
        assert!(
            out.results.iter().any(|b| b.get("text/html").map(Vec::as_slice) == Some(&b"<b>hi</b>"[..])),
            "{:?}",
            out.results
        );
        sandbox.close().await.unwrap();
    });
}

#[test]
fn sweep_kills_what_carries_the_metadata() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let tagged = Sandbox::builder_with(stub.backend())
            .network(NetworkPolicy::deny_all())
            .metadata("sweep me", "a=b&c")
            .detached(true)
            .create()
            .await
            .unwrap();
        let other = sandbox(stub.backend()).await;
        let filter = BTreeMap::from([("sweep me".to_owned(), "a=b&c".to_owned())]);
        let killed = stub.backend().sweep(&filter).await.unwrap();
        assert_eq!(killed, [tagged.id().to_owned()]);
        assert!(stub.state.sandbox(other.id()).is_some());
        other.close().await.unwrap();
    });
}

#[test]
fn an_unreachable_domain_is_a_connect_error_within_the_bound() {
    // A port nothing listens on: the connection is refused at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let stub = e2b_stub::Stub::start();
    let backend = E2bBackend::for_stub(e2b_stub::DOMAIN, addr, &stub.ca_pem, e2b_stub::API_KEY).unwrap();
    let started = Instant::now();
    let err =
        block_on(Sandbox::builder_with(backend).network(NetworkPolicy::deny_all()).create()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Connect, "{err}");
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
}

#[test]
fn limits_and_allowlists_are_refused_before_anything_is_created() {
    let stub = e2b_stub::Stub::start();
    let limits = block_on(
        Sandbox::builder_with(stub.backend())
            .network(NetworkPolicy::deny_all())
            .limits(sandboxio::ResourceLimits::new().memory_mib(256))
            .create(),
    )
    .unwrap_err();
    assert_eq!(limits.code(), ErrorCode::Configuration, "{limits}");
    assert!(limits.to_string().contains("template"), "{limits}");
    let allow = NetworkPolicy::allowlist(["example.com"]).unwrap();
    let err = block_on(Sandbox::builder_with(stub.backend()).network(allow).create()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported, "{err}");
    assert!(stub.state.creates.lock().unwrap().is_empty());
}

#[test]
fn a_5xx_storm_ends_in_a_typed_error_within_the_retry_bound() {
    let stub = e2b_stub::Stub::start();
    block_on(async {
        let owner = sandbox(stub.backend()).await;
        stub.state.faults.storm_503.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let err = Sandbox::connect_with(stub.backend(), owner.id()).await.unwrap_err();
        // Three retries after the first try: 250 + 500 + 1000 ms of backoff.
        assert_eq!(err.code(), ErrorCode::Provider, "{err}");
        assert!(std::error::Error::source(&err).is_some_and(|s| s.to_string().contains("503")), "{err:?}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(1750) && took < Duration::from_secs(10), "{took:?}");
        stub.state.faults.storm_503.store(false, Ordering::SeqCst);
        owner.close().await.unwrap();
    });
}

#[test]
fn neither_the_key_nor_the_access_token_shows_in_debug_output() {
    let stub = e2b_stub::Stub::start();
    let backend = stub.backend();
    let shown = format!("{backend:?}");
    assert!(!shown.contains(e2b_stub::API_KEY), "{shown}");
    block_on(async {
        let sandbox = sandbox(backend).await;
        let token = stub.state.sandbox(sandbox.id()).unwrap().token.clone();
        let shown = format!("{sandbox:?}");
        assert!(!shown.contains(&token) && !shown.contains(e2b_stub::API_KEY), "{shown}");
        let err = sandbox.run(Command::new("true").cwd("/no/such/dir")).await.unwrap_err();
        let shown = format!("{err:?} {err}");
        assert!(!shown.contains(&token) && !shown.contains(e2b_stub::API_KEY), "{shown}");
        sandbox.close().await.unwrap();
    });
}

#[test]
fn an_owned_sandbox_has_its_ttl_renewed_while_its_handle_lives() {
    let stub = e2b_stub::Stub::start();
    // The real lease (`OWNER_TTL`) renewed every second instead of every `KEEPALIVE_EVERY`
    // (30 s): the same renewal path, without holding the test binary for half a minute.
    let backend =
        stub.backend().with_owner_lease(sandboxio::backends::e2b::OWNER_TTL, Duration::from_secs(1));
    block_on(async {
        let sandbox = sandbox(backend).await;
        let held = stub.state.sandbox(sandbox.id()).unwrap();
        let first_end = *held.end_at.lock().unwrap();
        futures_timer::Delay::new(Duration::from_secs(3)).await;
        let renewed = *held.end_at.lock().unwrap();
        assert!(renewed > first_end, "the keepalive moved the TTL on");
        let ahead = renewed.saturating_duration_since(Instant::now());
        assert!(ahead <= sandboxio::backends::e2b::OWNER_TTL, "never further than OWNER_TTL: {ahead:?}");
        sandbox.close().await.unwrap();
    });
}

/// The adapter's added cost per exec round trip over one raw HTTPS request of the same
/// shape (a `Process.Start` of the same wrapped `true`, read to its end frame) against the
/// stub on loopback. A measurement, not a check: run it with
/// `cargo test --features e2b,local,contract --test e2b -- --ignored --nocapture measure`.
/// A plain HTTPS client of the stub's `host` (no adapter in the way).
fn raw_client(stub: &e2b_stub::Stub, host: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .http1_only()
        .no_proxy()
        .add_root_certificate(reqwest::Certificate::from_pem(&stub.ca_pem).unwrap())
        .resolve(host, stub.addr)
        .build()
        .unwrap()
}

#[test]
#[ignore = "a measurement: prints figures, asserts nothing about speed"]
fn measure_exec_round_trip_against_a_raw_request() {
    const ROUNDS: usize = 30;
    let stub = e2b_stub::Stub::start();
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let sandbox = block_on(sandbox(stub.backend()));
    let id = sandbox.id().to_owned();
    let token = stub.state.sandbox(&id).unwrap().token.clone();
    let adapter: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            block_on(sandbox.run(Command::new("true"))).unwrap();
            t.elapsed()
        })
        .collect();
    let host = format!("49983-{id}.{}", e2b_stub::DOMAIN);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let raw: Vec<Duration> = runtime.block_on(async {
        let client = raw_client(&stub, &host);
        let body = serde_json::json!({"process": {"cmd": "/bin/sh", "args": ["-c", "exec setsid \"$@\"", "sandboxio", "true"], "envs": {}}, "stdin": false, "tag": "raw"}).to_string();
        let mut envelope = vec![0u8];
        envelope.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
        envelope.extend_from_slice(body.as_bytes());
        let url = format!("https://{host}:{}/process.Process/Start", stub.addr.port());
        let mut times = Vec::new();
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let reply = client
                .post(&url)
                .header("content-type", "application/connect+json")
                .header("connect-protocol-version", "1")
                .header("x-access-token", &token)
                .body(envelope.clone())
                .send()
                .await
                .unwrap();
            let bytes = reply.bytes().await.unwrap();
            assert!(bytes.len() > 5);
            times.push(t.elapsed());
        }
        times
    });
    let (a, r) = (median(adapter), median(raw));
    println!(
        "exec round trip on loopback, median of {ROUNDS}: adapter run(true) {a:?}, raw Process.Start {r:?}, added {:?}",
        a.saturating_sub(r)
    );
    block_on(sandbox.close()).unwrap();
}

#[test]
fn a_provider_allowlist_goes_to_e2bs_own_filter_and_says_what_it_checks() {
    let stub = e2b_stub::Stub::start();
    let policy = NetworkPolicy::provider_allowlist(["pypi.org", "*.pythonhosted.org"]).unwrap();
    block_on(async {
        let sandbox = Sandbox::builder_with(stub.backend()).network(policy.clone()).create().await.unwrap();
        assert_eq!(sandbox.network_policy(), Some(&policy));
        let report = sandbox.network_enforcement().expect("e2b:// reports a provider allowlist");
        assert_eq!(
            report.mechanisms,
            [
                sandboxio::policy::EgressMechanism::ProviderNameFilter,
                sandboxio::policy::EgressMechanism::Cidr
            ]
        );
        assert!(report.dns_from_inside && report.domain_fronting_possible, "{report}");
        sandbox.close().await.unwrap();
    });
    let sent = stub.state.creates.lock().unwrap()[0].clone();
    assert_eq!(sent["allow_internet_access"], true, "{sent}");
    assert_eq!(
        sent["network"],
        serde_json::json!({"allowOut": ["pypi.org", "*.pythonhosted.org"], "denyOut": ["0.0.0.0/0"]}),
        "{sent}"
    );
    // sandboxio's own allowlist is not handed to E2B's filter: refused before any request.
    let err = block_on(
        Sandbox::builder_with(stub.backend())
            .network(NetworkPolicy::allowlist(["pypi.org"]).unwrap())
            .create(),
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityNotSupported);
    assert_eq!(stub.state.creates.lock().unwrap().len(), 1, "the refused policy reached E2B");
}

/// The lease the owner-death test gives its owner process: created with a TTL of 3 s,
/// renewed every second (production: `OWNER_TTL`, 2 min, renewed every 30 s).
const TEST_LEASE: Duration = Duration::from_secs(3);
const TEST_RENEW_EVERY: Duration = Duration::from_secs(1);

/// The owner process of `owner_death_an_owned_sandbox_ends_within_its_lease_after_its_owner_is_killed`,
/// which runs this test binary again with the stub's address and CA in the environment.
/// Run alone it does nothing.
#[test]
#[ignore = "the owner process of the owner-death test, run by it as a child"]
fn owner_death_child() {
    let (Ok(addr), Ok(ca)) =
        (std::env::var("SANDBOXIO_E2B_OWNER_STUB"), std::env::var("SANDBOXIO_E2B_OWNER_CA"))
    else {
        return;
    };
    let ca = std::fs::read(ca).unwrap();
    let backend = E2bBackend::for_stub(e2b_stub::DOMAIN, addr.parse().unwrap(), &ca, e2b_stub::API_KEY)
        .unwrap()
        .with_owner_lease(TEST_LEASE, TEST_RENEW_EVERY);
    let sandbox = block_on(
        Sandbox::builder_with(backend)
            .network(NetworkPolicy::deny_all())
            .ttl(Duration::from_mins(10))
            .create(),
    )
    .unwrap();
    println!("owned-sandbox {}", sandbox.id());
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    // Hold the handle until the parent kills this process.
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn owner_death_an_owned_sandbox_ends_within_its_lease_after_its_owner_is_killed() {
    use std::io::BufRead as _;
    let stub = e2b_stub::Stub::start();
    let ca = std::env::temp_dir().join(format!("sandboxio-e2b-owner-{}.pem", std::process::id()));
    std::fs::write(&ca, &stub.ca_pem).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "owner_death_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env("SANDBOXIO_E2B_OWNER_STUB", stub.addr.to_string())
        .env("SANDBOXIO_E2B_OWNER_CA", &ca)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the owner process");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may print `test owner_death_child ... ` on the same line first.
            if let Some((_, id)) = line.split_once("owned-sandbox ") {
                let _ = tx.send(id.trim().to_owned());
            }
        }
    });
    let id = rx.recv_timeout(Duration::from_secs(20));
    let _ = std::fs::remove_file(&ca);
    let id = id.unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("the owner process made no sandbox within 20 s");
    });
    let sent = stub.state.creates.lock().unwrap()[0].clone();
    assert_eq!(
        sent["timeout"], 3,
        "an owned sandbox is created with the lease, not the caller's TTL: {sent}"
    );
    // While its owner lives, the sandbox outlives three leases.
    std::thread::sleep(3 * TEST_LEASE);
    let alive = stub.state.sandbox(&id).is_some();
    // SIGKILL: the owner runs no Drop and no teardown; only the lease can end the sandbox.
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_at = Instant::now();
    assert!(alive, "the sandbox ended while its owner lived");
    while stub.state.sandbox(&id).is_some() && killed_at.elapsed() < TEST_LEASE + Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = killed_at.elapsed();
    println!(
        "the sandbox ended {took:?} after its owner's SIGKILL (lease {TEST_LEASE:?}, renewed every {TEST_RENEW_EVERY:?})"
    );
    assert!(stub.state.sandbox(&id).is_none(), "the sandbox outlived its dead owner by {took:?}");
    // No renewal is sent after the kill (one already on the wire may still land), so the
    // sandbox ends within one lease, plus the stub's 100 ms expiry tick and that slack.
    assert!(took <= TEST_LEASE + Duration::from_secs(1), "ended {took:?} after its owner died");
}

impl start_race::RaceStub for e2b_stub::Stub {
    fn start() -> Self {
        e2b_stub::Stub::start()
    }

    fn builder(&self) -> sandboxio::SandboxBuilder {
        Sandbox::builder_with(self.backend())
    }

    fn slow_next_start(&self) {
        let delay = u64::try_from(start_race::START_DELAY.as_millis()).unwrap();
        self.state.faults.delay_next_start_ms.store(delay, Ordering::SeqCst);
    }

    fn starts_taken(&self) -> usize {
        self.state.starts.load(Ordering::SeqCst)
    }

    fn running(&self, id: &str, comm: &str) -> usize {
        let processes = self.local_id(id).map(|l| self.state.local.running_processes(&l)).unwrap_or_default();
        start_race::named(&processes, comm)
    }

    fn slow_next_create_reply(&self) {
        let delay = u64::try_from(start_race::CREATE_DELAY.as_millis()).unwrap();
        self.state.faults.delay_next_create_reply_ms.store(delay, Ordering::SeqCst);
    }

    fn creates_taken(&self) -> usize {
        self.state.creates.lock().unwrap().len()
    }

    fn made(&self) -> usize {
        self.state.next_id.load(Ordering::SeqCst)
    }

    fn live(&self) -> usize {
        self.state.sandboxes.lock().unwrap().len()
    }
}

/// See [`start_race::dropped_at_start`].
#[test]
fn a_run_dropped_while_its_start_is_on_the_way_leaves_nothing_running() {
    start_race::dropped_at_start::<e2b_stub::Stub>(start_race::run_sleep, "sleep", "a run");
}

/// See [`start_race::dropped_at_start`].
#[test]
fn a_stream_dropped_while_its_start_is_on_the_way_leaves_nothing_running() {
    start_race::dropped_at_start::<e2b_stub::Stub>(start_race::stream_sleep, "sleep", "a stream");
}

/// See [`start_race::dropped_at_create`].
#[test]
fn a_create_dropped_while_its_reply_is_on_the_way_leaves_no_sandbox() {
    start_race::dropped_at_create::<e2b_stub::Stub>();
}
