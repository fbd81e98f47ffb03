//! The two clients against the real service, end to end: opt-in (`#[ignore]`, so it shows as
//! ignored in every ordinary run). Run it with credentials in the environment or the profile
//! file:
//!
//! ```text
//! MODAL_TOKEN_ID=ak-... MODAL_TOKEN_SECRET=as-... \
//!     cargo test --features modal --lib backends::modal::live -- --ignored
//! ```
//!
//! Without credentials it fails with the authentication error naming the variable, never
//! passes. It creates one sandbox (app `sandboxio-live`, TTL 120 s, no network), runs
//! `echo` through the router, and terminates it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::client::Control;
use super::config::{DEFAULT_IMAGE, ModalConfig, read_profile_file};
use super::request::{CreatePlan, create_request};
use super::router::{Command, Fd, Router};
use crate::dsn::Dsn;
use crate::exec::ExitStatus;

#[tokio::test]
#[ignore = "live: needs MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or ~/.modal.toml) and the network; run with --ignored"]
async fn create_exec_terminate_on_the_real_service() {
    let config =
        ModalConfig::parse(&Dsn::parse("modal://?app=sandboxio-live").unwrap(), |k| std::env::var(k).ok())
            .unwrap();
    let settings = config.settings(&read_profile_file(&config).unwrap()).unwrap();
    let control = Control::new(&settings, None).unwrap();
    let app = control.app(&config.app, &settings.environment).await.unwrap();
    let version = match &settings.image_builder_version {
        Some(v) => v.clone(),
        None => control.builder_version(&settings.environment).await.unwrap(),
    };
    let image = control.image(&app, DEFAULT_IMAGE, &version).await.unwrap();
    let deny = crate::NetworkPolicy::deny_all();
    let metadata: BTreeMap<String, String> = [("sandboxio-live".to_owned(), "1".to_owned())].into();
    let plan = CreatePlan {
        ttl: Duration::from_mins(2),
        idle_timeout: None,
        limits: crate::ResourceLimits::default(),
        network: &deny,
        metadata: &metadata,
    };
    let id = control.create(create_request(&app, &image, &plan).unwrap()).await.unwrap();
    let outcome = async {
        let task = control.task_id(&id, super::errors::Call::Sandbox(&id)).await?;
        let (url, token) = control.router_access(&id, &task).await?;
        let router = Router::new(control.clone(), (&url, &token), &id, &task, None)?;
        let exec = router
            .start(&Command { argv: vec!["echo".into(), "hello".into()], ..Command::default() })
            .await?;
        let mut out = Vec::new();
        router.read(&exec, Fd::Stdout, 0, |b| out.extend_from_slice(b)).await?;
        let status = router.wait(&exec).await?;
        let listed =
            control.list(&app, &settings.environment, &[("sandboxio-live".into(), "1".into())]).await?;
        Ok::<_, crate::Error>((out, status, listed))
    }
    .await;
    control.terminate(&id).await.unwrap();
    control.terminate(&id).await.unwrap();
    let (out, status, listed) = outcome.unwrap();
    assert_eq!(out, b"hello\n");
    assert_eq!(status, ExitStatus::Code(0));
    assert!(listed.contains(&id), "{listed:?}");
    let ended = control.wait(&id, Duration::from_secs(10)).await.unwrap();
    assert!(ended.is_some(), "terminated sandboxes report a result");
}
