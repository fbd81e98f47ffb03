//! `modal://` against the protocol stub (`tests/support/modal_stub`): what the adapter sends,
//! the faults the stub provokes (throttling, a lost create reply, a cut output stream,
//! expiry mid-stream, malformed replies) and the typed error each one ends in, within a
//! bound; and that neither the token secret nor the router's token shows anywhere.

#![cfg(all(feature = "modal", feature = "local", feature = "contract"))]

#[path = "support/modal_stub/mod.rs"]
mod modal_stub;
#[path = "support/start_race.rs"]
mod start_race;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandboxio::backends::modal::ModalBackend;
use sandboxio::{Command, ErrorCode, ExitStatus, NetworkPolicy, Sandbox};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_lite::future::block_on(f)
}

async fn sandbox(backend: ModalBackend) -> Sandbox {
    Sandbox::builder_with(backend)
        .network(NetworkPolicy::deny_all())
        .create()
        .await
        .expect("a sandbox on the stub")
}

#[test]
fn create_sends_the_ttl_the_idle_bound_the_network_and_tags_and_commands_run_over_tls() {
    let stub = modal_stub::Stub::start();
    block_on(async {
        let sandbox = Sandbox::builder_with(stub.backend_for("modal://?app=evals&image=python:3.12-slim"))
            .network(NetworkPolicy::deny_all())
            .metadata("team", "t1")
            .env("PLAIN", "p")
            .ttl(Duration::from_millis(90_500))
            .create()
            .await
            .unwrap();
        let out = sandbox.run(Command::shell("echo $PLAIN $FOO; pwd").env("FOO", "bar")).await.unwrap();
        assert_eq!(out.stdout, b"p bar\n/workspace\n");
        let out = sandbox.run(Command::new("cat").stdin(b"piped".to_vec())).await.unwrap();
        assert_eq!(out.stdout, b"piped");
        let out = sandbox.run(Command::shell("kill -9 $$")).await.unwrap();
        assert_eq!(out.status, ExitStatus::Signal(9));
        let out = sandbox.run(Command::shell("exit 137")).await.unwrap();
        assert_eq!(out.status, ExitStatus::Code(137));
        sandbox.close().await.unwrap();
    });
    let creates = stub.state.creates.lock().unwrap();
    assert_eq!(creates.len(), 1);
    let (key, sent) = &creates[0];
    assert_eq!(key.len(), 32, "a 128-bit idempotency key in hex: {key}");
    assert_eq!(sent.app_id, "ap-evals");
    let d = sent.definition.as_ref().unwrap();
    assert_eq!(d.timeout_secs, 91, "the TTL rounded up to a whole second, always sent");
    assert_eq!(d.idle_timeout_secs, Some(120), "an owned sandbox's idle timeout is the owner bound");
    assert_eq!(d.entrypoint_args, ["sleep", "infinity"]);
    let network = d.network_access.as_ref().unwrap();
    assert_eq!(
        network.network_access_type,
        modal_stub::proto::client::network_access::NetworkAccessType::Blocked as i32
    );
    assert_eq!(sent.tags.len(), 1);
    assert_eq!((sent.tags[0].tag_name.as_str(), sent.tags[0].tag_value.as_str()), ("team", "t1"));
    assert!(
        !format!("{sent:?}").contains("PLAIN"),
        "the environment goes to each exec, never the definition"
    );
}

#[test]
fn a_provider_allowlist_goes_to_modals_domain_allowlist_and_says_what_it_checks() {
    use modal_stub::proto::client::network_access::NetworkAccessType;
    let stub = modal_stub::Stub::start();
    let policy = NetworkPolicy::provider_allowlist(["pypi.org", "*.pythonhosted.org"]).unwrap();
    block_on(async {
        let sandbox = Sandbox::builder_with(stub.backend()).network(policy.clone()).create().await.unwrap();
        assert_eq!(sandbox.network_policy(), Some(&policy));
        let report = sandbox.network_enforcement().expect("modal:// reports a provider allowlist");
        assert_eq!(report.mechanisms, [sandboxio::policy::EgressMechanism::ProviderNameFilter], "{report}");
        assert!(report.dns_from_inside && report.domain_fronting_possible, "{report}");
        sandbox.close().await.unwrap();
        // sandboxio's own allowlist is refused before anything reaches Modal.
        let err = Sandbox::builder_with(stub.backend())
            .network(NetworkPolicy::allowlist(["pypi.org"]).unwrap())
            .create()
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::CapabilityNotSupported, "{err}");
    });
    let creates = stub.state.creates.lock().unwrap();
    assert_eq!(creates.len(), 1, "the refused allowlist sent nothing");
    let access = creates[0].1.definition.as_ref().unwrap().network_access.clone().unwrap();
    assert_eq!(access.network_access_type(), NetworkAccessType::Allowlist);
    assert_eq!(access.allowed_domains, ["pypi.org", "*.pythonhosted.org"]);
    assert!(access.allowed_cidrs.is_empty(), "a name list sends no address blocks: {access:?}");
}

#[test]
fn throttling_is_rate_limited_with_the_servers_retry_after_and_its_status() {
    let stub = modal_stub::Stub::start();
    stub.state.faults.throttle_creates.store(1, Ordering::SeqCst);
    stub.state.faults.throttle_after_ms.store(1500, Ordering::SeqCst);
    block_on(async {
        let started = Instant::now();
        let err = Sandbox::builder_with(stub.backend())
            .network(NetworkPolicy::deny_all())
            .create()
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        assert_eq!(err.code(), ErrorCode::RateLimited, "{err}");
        let sandboxio::Error::RateLimited { retry_after, .. } = &err else { unreachable!() };
        assert_eq!(*retry_after, Some(Duration::from_millis(1500)));
        let source = std::error::Error::source(&err).expect("the status is the source");
        assert!(source.to_string().contains("rate limit"), "{source}");
        // Not retried (throttling is not transient), so nothing was made.
        assert_eq!(stub.made(), 0);
        // The next try goes through.
        sandbox(stub.backend()).await.close().await.unwrap();
    });
}

#[test]
fn a_lost_create_reply_is_retried_under_the_same_key_and_makes_one_sandbox() {
    let stub = modal_stub::Stub::start();
    stub.state.faults.lose_next_create_reply.store(true, Ordering::SeqCst);
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        assert_eq!(sandbox.run(Command::new("true")).await.unwrap().status, ExitStatus::Code(0));
        sandbox.close().await.unwrap();
    });
    let creates = stub.state.creates.lock().unwrap();
    assert_eq!(creates.len(), 2, "the first reply was lost, so the call was made again");
    assert_eq!(creates[0].0, creates[1].0, "under the same idempotency key");
    assert_eq!(stub.made(), 1, "and the stub made one sandbox");
}

#[test]
fn a_cut_output_stream_is_read_again_from_its_byte_offset() {
    let stub = modal_stub::Stub::start();
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        stub.state.faults.cut_next_read.store(true, Ordering::SeqCst);
        let out = sandbox
            .run(Command::shell("echo one; sleep 0.3; echo two; sleep 0.3; echo three"))
            .await
            .unwrap();
        assert_eq!(out.stdout, b"one\ntwo\nthree\n", "nothing lost, nothing twice");
        assert!(!stub.state.faults.cut_next_read.load(Ordering::SeqCst), "the cut happened");
        assert!(
            stub.state.read_offsets.lock().unwrap().contains(&4),
            "the stream was opened again at the offset reached (after \"one\\n\")"
        );
        sandbox.close().await.unwrap();
    });
}

#[test]
fn expiry_mid_stream_ends_the_stream_in_sandbox_gone_within_a_bound() {
    let stub = modal_stub::Stub::start();
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        let mut stream = sandbox.stream(Command::shell("while true; do echo tick; sleep 0.1; done")).unwrap();
        let first = stream.next_chunk().await.unwrap().unwrap();
        assert!(first.data.starts_with(b"tick"));
        assert!(stub.expire(sandbox.id()));
        let started = Instant::now();
        let ending = loop {
            match stream.next_chunk().await {
                Some(Ok(_)) => assert!(started.elapsed() < Duration::from_secs(10), "still streaming"),
                Some(Err(e)) => break e,
                None => panic!("the stream ended without an error"),
            }
        };
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        assert_eq!(ending.code(), ErrorCode::SandboxGone, "{ending}");
        let after = sandbox.run(Command::new("true")).await.unwrap_err();
        assert_eq!(after.code(), ErrorCode::SandboxGone, "{after}");
        let _ = sandbox.close().await;
    });
}

#[test]
fn malformed_replies_are_typed_errors_within_a_bound() {
    let stub = modal_stub::Stub::start();
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        stub.state.faults.malformed_wait.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let err = sandbox.run(Command::new("true")).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Provider, "{err}");
        assert!(err.to_string().contains("without an exit status"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
        stub.state.faults.malformed_wait.store(false, Ordering::SeqCst);
        sandbox.close().await.unwrap();

        stub.state.faults.malformed_create.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let err = Sandbox::builder_with(stub.backend())
            .network(NetworkPolicy::deny_all())
            .create()
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::Provider, "{err}");
        assert!(err.to_string().contains("without a sandbox id"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    });
}

#[test]
fn a_refused_token_is_auth_and_a_missing_one_names_its_variable() {
    let stub = modal_stub::Stub::start();
    block_on(async {
        let wrong = ModalBackend::for_stub(
            "modal://",
            &stub.url,
            &stub.ca_pem,
            modal_stub::DOMAIN,
            modal_stub::TOKEN_ID,
            "nope",
        )
        .unwrap();
        let err = Sandbox::builder_with(wrong).network(NetworkPolicy::deny_all()).create().await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Auth, "{err}");
        assert!(std::error::Error::source(&err).is_some(), "the status is kept");
        let missing =
            ModalBackend::for_stub("modal://", &stub.url, &stub.ca_pem, modal_stub::DOMAIN, "", "").unwrap();
        let err =
            Sandbox::builder_with(missing).network(NetworkPolicy::deny_all()).create().await.unwrap_err();
        assert!(
            matches!(&err, sandboxio::Error::Auth { env_var: Some(v), .. } if v == "MODAL_TOKEN_ID"),
            "{err}"
        );
    });
}

#[test]
fn neither_the_token_secret_nor_the_router_token_shows_anywhere() {
    let stub = modal_stub::Stub::start();
    let sink = sandboxio::audit::RecordingSink::new();
    let backend = stub
        .backend()
        .with_audit(sandboxio::audit::AuditConfig::new().with_sink(std::sync::Arc::clone(&sink)));
    let shown = format!("{backend:?}");
    assert!(!shown.contains(modal_stub::TOKEN_SECRET), "{shown}");
    block_on(async {
        let sandbox = sandbox(backend).await;
        let token = stub.state.sandbox(sandbox.id()).unwrap().router_token();
        let secrets = [modal_stub::TOKEN_SECRET, token.as_str()];
        let mut seen = vec![format!("{sandbox:?}")];
        let err = sandbox.run(Command::new("true").cwd("/no/such/dir")).await.unwrap_err();
        seen.push(format!("{err:?} {err}"));
        let out = sandbox.run(Command::new("env")).await.unwrap();
        seen.push(out.stdout_lossy().into_owned());
        seen.push(stub.state.sandbox(sandbox.id()).unwrap().config.clone());
        sandbox.close().await.unwrap();
        seen.push(format!("{:?}", sink.records()));
        for text in &seen {
            for secret in secrets {
                assert!(!text.contains(secret), "a secret leaked: {text}");
            }
        }
    });
}

impl start_race::RaceStub for modal_stub::Stub {
    fn start() -> Self {
        modal_stub::Stub::start()
    }

    fn builder(&self) -> sandboxio::SandboxBuilder {
        Sandbox::builder_with(self.backend())
    }

    fn slow_next_start(&self) {
        let delay = u64::try_from(start_race::START_DELAY.as_millis()).unwrap();
        self.state.faults.delay_next_exec_start_ms.store(delay, Ordering::SeqCst);
    }

    fn starts_taken(&self) -> usize {
        self.state.exec_starts.load(Ordering::SeqCst)
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
        modal_stub::Stub::made(self)
    }

    fn live(&self) -> usize {
        self.state.sandboxes.lock().unwrap().values().filter(|s| s.finished().is_none()).count()
    }
}

/// See [`start_race::dropped_at_start`].
#[test]
fn a_run_dropped_while_its_start_is_on_the_way_leaves_nothing_running() {
    start_race::dropped_at_start::<modal_stub::Stub>(start_race::run_sleep, "sleep", "a run");
}

/// See [`start_race::dropped_at_start`].
#[test]
fn a_stream_dropped_while_its_start_is_on_the_way_leaves_nothing_running() {
    start_race::dropped_at_start::<modal_stub::Stub>(start_race::stream_sleep, "sleep", "a stream");
}

/// See [`start_race::dropped_at_start`].
#[test]
fn a_write_dropped_while_its_start_is_on_the_way_leaves_nothing_running() {
    start_race::dropped_at_start::<modal_stub::Stub>(start_race::write_file, "cat", "a write");
}

/// See [`start_race::dropped_at_create`].
#[test]
fn a_create_dropped_while_its_reply_is_on_the_way_leaves_no_sandbox() {
    start_race::dropped_at_create::<modal_stub::Stub>();
}

/// Waits until every router token issued so far with a lifetime of `secs` has ended (the
/// stub's tokens end on a whole second, at most `secs + 1` after they were issued).
fn outlive_tokens(secs: u64) {
    std::thread::sleep(Duration::from_secs(secs + 2));
}

#[test]
fn an_expired_router_token_is_fetched_again_and_every_router_call_goes_on() {
    // Modal's router tokens are JWTs that expire; its clients fetch a new one from
    // TaskGetCommandRouterAccess when the router answers UNAUTHENTICATED (issue #31 item 1).
    let stub = modal_stub::Stub::start();
    stub.state.faults.router_token_secs.store(1, Ordering::SeqCst);
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        assert_eq!(sandbox.run(Command::new("echo").arg("a")).await.unwrap().stdout, b"a\n");
        let before = stub.state.router_accesses.load(Ordering::SeqCst);
        outlive_tokens(1);
        // Start, output read, wait, and stdin write each meet an ended token.
        let out = sandbox.run(Command::new("echo").arg("b")).await.expect("a command after the token ended");
        assert_eq!(out.stdout, b"b\n");
        outlive_tokens(1);
        let out =
            sandbox.run(Command::new("cat").stdin(b"piped".to_vec())).await.expect("stdin after it ended");
        assert_eq!(out.stdout, b"piped");
        outlive_tokens(1);
        let mut stream = sandbox.stream(Command::new("cat")).unwrap();
        outlive_tokens(1);
        stream.write_stdin(b"late").await.expect("stdin written with an ended token");
        stream.close_stdin().await.unwrap();
        let result = stream.wait().await.expect("the exit read with an ended token");
        assert_eq!(result.status, ExitStatus::Code(0));
        outlive_tokens(1);
        sandbox.fs().write("f.txt", b"file").await.expect("a file write after the token ended");
        assert_eq!(sandbox.fs().read("f.txt").await.unwrap(), b"file");
        let after = stub.state.router_accesses.load(Ordering::SeqCst);
        assert!(after > before, "new tokens were fetched ({before} then {after})");
        sandbox.close().await.unwrap();
    });
}

#[test]
fn calls_refused_together_fetch_one_new_token() {
    let stub = modal_stub::Stub::start();
    stub.state.faults.router_token_secs.store(1, Ordering::SeqCst);
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        // The tokens fetched from now on last an hour: one refresh serves every call.
        stub.state.faults.router_token_secs.store(3600, Ordering::SeqCst);
        outlive_tokens(1);
        let before = stub.state.router_accesses.load(Ordering::SeqCst);
        let shared = &sandbox;
        std::thread::scope(|s| {
            for i in 0..8 {
                s.spawn(move || {
                    let out = block_on(shared.run(Command::new("echo").arg(i.to_string())));
                    assert_eq!(
                        out.expect("a command after the token ended").stdout,
                        format!("{i}\n").as_bytes()
                    );
                });
            }
        });
        let fetched = stub.state.router_accesses.load(Ordering::SeqCst) - before;
        assert_eq!(fetched, 1, "eight calls refused at once fetched {fetched} tokens");
        sandbox.close().await.unwrap();
    });
}

#[test]
fn a_router_that_refuses_every_token_is_an_auth_error_naming_the_router() {
    let stub = modal_stub::Stub::start();
    stub.state.faults.router_token_secs.store(1, Ordering::SeqCst);
    // (Short tokens, so the refused one is not "fresh" and a new one is fetched.)
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        stub.state.faults.refuse_router_tokens.store(true, Ordering::SeqCst);
        let before = stub.state.router_accesses.load(Ordering::SeqCst);
        let err = sandbox.run(Command::new("true")).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Auth, "{err}");
        assert!(err.to_string().contains("command router"), "{err}");
        assert!(err.to_string().contains("the Modal token itself was accepted"), "{err}");
        assert!(stub.state.router_accesses.load(Ordering::SeqCst) > before, "a new token was tried first");
        stub.state.faults.refuse_router_tokens.store(false, Ordering::SeqCst);
        sandbox.close().await.unwrap();
    });
}

#[test]
fn an_output_stream_cut_after_every_piece_is_read_whole_while_it_moves_on() {
    // More cuts than REOPENS (10), each after a piece: the read makes progress between them,
    // so each cut starts a fresh budget (issue #31 item 3).
    let stub = modal_stub::Stub::start();
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        stub.state.faults.cut_reads_after_a_piece.store(15, Ordering::SeqCst);
        let out = sandbox
            .run(Command::new("seq").arg("1").arg("40"))
            .await
            .expect("a stream cut 15 times, with progress between the cuts");
        let expected = (1..=40).map(|i| i.to_string()).collect::<Vec<_>>().join("\n") + "\n";
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
        assert_eq!(stub.state.faults.cut_reads_after_a_piece.load(Ordering::SeqCst), 0, "every cut happened");
        sandbox.close().await.unwrap();
    });
}

#[test]
fn a_stdin_write_refused_on_the_way_is_sent_again_at_its_offset() {
    let stub = modal_stub::Stub::start();
    block_on(async {
        let sandbox = sandbox(stub.backend()).await;
        stub.state.faults.refuse_stdin_writes.store(2, Ordering::SeqCst);
        let out = sandbox
            .run(Command::new("cat").stdin(b"piped".to_vec()))
            .await
            .expect("stdin written after two transient refusals");
        assert_eq!(out.stdout, b"piped");
        assert_eq!(stub.state.faults.refuse_stdin_writes.load(Ordering::SeqCst), 0);
        sandbox.close().await.unwrap();
    });
}
