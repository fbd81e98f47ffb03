//! Code contexts on `docker://` (sandboxd's runner): an interrupt keeps a context, a timeout
//! interrupts and keeps it when the cell stops, and a context whose interpreter is gone is
//! lost for good, never silently replaced. Needs an engine and `sandboxio/python:2`
//! (`scripts/build-images python`); without them each test says so and returns, unless
//! `SANDBOXIO_REQUIRE_DOCKER=1` (CI), where that is a failure.
#![cfg(feature = "docker")]
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use sandboxio::{Code, ErrorCode, NetworkPolicy, Sandbox, exec::CodeContext};

use crate::support;

const IMAGE: &str = "sandboxio/python:2";

/// A deny-all sandbox on the python image, or `None` (the test returns) without an engine
/// or the image; a failure under `SANDBOXIO_REQUIRE_DOCKER=1`.
fn python_sandbox(test: &str) -> Option<Sandbox> {
    if !support::docker_image_ready(test, IMAGE, "python") {
        return None;
    }
    let builder = Sandbox::builder(&format!("docker://?image={IMAGE}")).unwrap();
    Some(block_on(builder.network(NetworkPolicy::deny_all()).create()).unwrap())
}

/// A context holding `counter = 41`.
async fn context_with_state(sandbox: &Sandbox) -> CodeContext {
    let ctx = sandbox.create_context("python").await.unwrap();
    let set = sandbox.run_code(Code::new("counter = 41").in_context(&ctx)).await.unwrap();
    assert!(set.success(), "{set:?}");
    ctx
}

/// Reads the counter back (`42` printed when the state survived).
async fn read_state(sandbox: &Sandbox, ctx: &CodeContext) -> sandboxio::Result<sandboxio::CodeResult> {
    sandbox.run_code(Code::new("counter += 1\nprint(counter)").in_context(ctx)).await
}

#[test]
fn code__an_interrupted_cell_raises_keyboard_interrupt_and_the_context_keeps_its_state() {
    let Some(sandbox) = python_sandbox("code__an_interrupted_cell") else { return };
    block_on(async {
        let ctx = context_with_state(&sandbox).await;
        let started = Instant::now();
        let long =
            sandbox.run_code(Code::new("import time\nprint('started')\ntime.sleep(3600)").in_context(&ctx));
        let interrupt = async {
            futures_timer::Delay::new(Duration::from_millis(1500)).await;
            sandbox.interrupt(&ctx).await
        };
        let (out, interrupted) = futures_lite::future::zip(long, interrupt).await;
        interrupted.unwrap();
        let out = out.unwrap();
        // Positive control: the cell really ran until the interrupt.
        assert_eq!(out.stdout_lossy(), "started\n", "{out:?}");
        assert!(started.elapsed() >= Duration::from_millis(1500), "the cell ended before the interrupt");
        assert_eq!(out.error.as_ref().map(|e| e.name.as_str()), Some("KeyboardInterrupt"), "{out:?}");
        assert!(!out.success());
        let after = read_state(&sandbox, &ctx).await.unwrap();
        assert_eq!(after.stdout_lossy(), "42\n", "the context lost its state: {after:?}");
        // With no cell running, an interrupt does nothing.
        sandbox.interrupt(&ctx).await.unwrap();
        let after = read_state(&sandbox, &ctx).await.unwrap();
        assert_eq!(after.stdout_lossy(), "43\n", "{after:?}");
    });
    let _ = block_on(sandbox.kill());
}

#[test]
fn code__a_streamed_cell_is_interrupted_after_its_first_chunk_and_the_context_keeps_its_state() {
    let Some(sandbox) = python_sandbox("code__a_streamed_cell_is_interrupted") else { return };
    block_on(async {
        let ctx = context_with_state(&sandbox).await;
        let cell = Code::new("import time\nprint('started')\ntime.sleep(3600)").in_context(&ctx);
        let mut stream = sandbox.run_code_stream(cell).unwrap();
        // The interrupt goes out once the cell has said it started: ordered, not timed. The
        // line may come in more than one chunk (`python3 -u` writes the text, then the newline).
        let mut said = Vec::new();
        while !said.ends_with(b"\n") {
            said.extend_from_slice(&stream.next_chunk().await.unwrap().unwrap().data);
        }
        assert_eq!(said, b"started\n");
        sandbox.interrupt(&ctx).await.unwrap();
        while let Some(chunk) = stream.next_chunk().await {
            chunk.unwrap();
        }
        let result = stream.wait().await.unwrap();
        assert_eq!(result.error.as_ref().map(|e| e.name.as_str()), Some("KeyboardInterrupt"), "{result:?}");
        assert!(result.streamed && result.stdout.is_empty(), "{result:?}");
        drop(stream);
        let after = read_state(&sandbox, &ctx).await.unwrap();
        assert_eq!(after.stdout_lossy(), "42\n", "the context lost its state: {after:?}");
    });
    let _ = block_on(sandbox.kill());
}

#[test]
fn code__a_cell_past_its_timeout_is_interrupted_and_the_context_survives() {
    let Some(sandbox) = python_sandbox("code__a_cell_past_its_timeout") else { return };
    block_on(async {
        let ctx = context_with_state(&sandbox).await;
        let cell = Code::new("import time\nprint('started')\ntime.sleep(3600)").in_context(&ctx);
        let err = sandbox.run_code(cell.timeout(Duration::from_secs(1))).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::ExecutionTimeout, "{err}");
        let sandboxio::Error::ExecutionTimeout { partial, .. } = &err else { unreachable!() };
        assert_eq!(partial.stdout_lossy(), "started\n", "what the cell printed is kept: {partial:?}");
        let after = read_state(&sandbox, &ctx).await.unwrap();
        assert_eq!(after.stdout_lossy(), "42\n", "the context lost its state: {after:?}");
    });
    let _ = block_on(sandbox.kill());
}

#[test]
fn code__a_context_whose_interpreter_died_is_lost_never_replaced() {
    let Some(sandbox) = python_sandbox("code__a_context_whose_interpreter_died") else { return };
    block_on(async {
        let ctx = context_with_state(&sandbox).await;
        let killed = sandbox.run_code(Code::new("import os\nos.kill(os.getpid(), 9)").in_context(&ctx)).await;
        let err = killed.unwrap_err();
        assert_eq!(err.code(), ErrorCode::ContextLost, "{err}");
        // Every later cell says so: no fresh interpreter in its place.
        let later = read_state(&sandbox, &ctx).await.unwrap_err();
        assert_eq!(later.code(), ErrorCode::ContextLost, "{later}");
        assert_eq!(sandbox.interrupt(&ctx).await.unwrap_err().code(), ErrorCode::ContextLost);
        // Positive control: a new context works.
        let fresh = context_with_state(&sandbox).await;
        assert_eq!(read_state(&sandbox, &fresh).await.unwrap().stdout_lossy(), "42\n");
    });
    let _ = block_on(sandbox.kill());
}

#[test]
fn code__a_cell_that_ignores_the_interrupt_past_its_timeout_loses_its_context() {
    let Some(sandbox) = python_sandbox("code__a_cell_that_ignores_the_interrupt") else { return };
    block_on(async {
        let ctx = context_with_state(&sandbox).await;
        let stubborn = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(3600)";
        let cell = Code::new(stubborn).in_context(&ctx).timeout(Duration::from_secs(1));
        let started = Instant::now();
        let err = sandbox.run_code(cell).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::ExecutionTimeout, "{err}");
        assert!(started.elapsed() < Duration::from_secs(20), "the timeout took {:?}", started.elapsed());
        let later = read_state(&sandbox, &ctx).await.unwrap_err();
        assert_eq!(later.code(), ErrorCode::ContextLost, "{later}");
    });
    let _ = block_on(sandbox.kill());
}

#[test]
fn code__contexts_are_separate_and_a_cell_outside_any_context_sees_none() {
    let Some(sandbox) = python_sandbox("code__contexts_are_separate") else { return };
    block_on(async {
        let a = context_with_state(&sandbox).await;
        let b = sandbox.create_context("python").await.unwrap();
        let in_b = read_state(&sandbox, &b).await.unwrap();
        assert_eq!(in_b.error.map(|e| e.name), Some("NameError".to_owned()));
        let outside = sandbox.run_code("print(counter)").await.unwrap();
        assert_eq!(outside.error.map(|e| e.name), Some("NameError".to_owned()));
        assert_eq!(read_state(&sandbox, &a).await.unwrap().stdout_lossy(), "42\n");
        let other = sandbox.create_context("javascript").await.unwrap_err();
        assert_eq!(other.code(), ErrorCode::CapabilityNotSupported, "{other}");
    });
    let _ = block_on(sandbox.kill());
}

#[test]
fn code__a_cell_whose_run_code_was_dropped_loses_its_context_and_nothing_hangs() {
    let Some(sandbox) = python_sandbox("code__a_cell_whose_run_code_was_dropped") else { return };
    block_on(async {
        let ctx = context_with_state(&sandbox).await;
        let long = sandbox.run_code(Code::new("import time\ntime.sleep(3600)").in_context(&ctx));
        let dropped = futures_lite::future::or(async { Some(long.await) }, async {
            futures_timer::Delay::new(Duration::from_millis(800)).await;
            None
        })
        .await;
        assert!(dropped.is_none(), "the long cell ended by itself: {dropped:?}");
        let started = Instant::now();
        let later = read_state(&sandbox, &ctx).await.unwrap_err();
        assert_eq!(later.code(), ErrorCode::ContextLost, "{later}");
        assert!(started.elapsed() < Duration::from_secs(5), "the next cell waited {:?}", started.elapsed());
    });
    let _ = block_on(sandbox.kill());
}

#[test]
fn code__a_matplotlib_figure_is_a_png_and_a_dataframe_is_html() {
    let Some(sandbox) = python_sandbox("code__a_matplotlib_figure_is_a_png") else { return };
    block_on(async {
        let ctx = sandbox.create_context("python").await.unwrap();
        let plot = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nprint('plotted')";
        let out = sandbox.run_code(Code::new(plot).in_context(&ctx)).await.unwrap();
        assert!(out.success(), "{out:?}");
        assert_eq!(out.stdout_lossy(), "plotted\n");
        let png = out.results.iter().find_map(|b| b.get("image/png")).expect("a PNG result");
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG: {:?}", &png[..png.len().min(8)]);
        let frame = "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})";
        let out = sandbox.run_code(Code::new(frame).in_context(&ctx)).await.unwrap();
        let bundle = out.results.first().expect("the cell's value");
        let html = String::from_utf8_lossy(bundle.get("text/html").expect("an HTML form"));
        assert!(html.contains("<table") && html.contains("<td>x</td>"), "{html}");
        assert!(bundle.contains_key("text/plain"));
        // The figure was closed after its cell: a later cell returns no stale PNG.
        let later = sandbox.run_code(Code::new("1 + 1").in_context(&ctx)).await.unwrap();
        assert!(later.results.iter().all(|b| !b.contains_key("image/png")), "{later:?}");
    });
    let _ = block_on(sandbox.kill());
}
