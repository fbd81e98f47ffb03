//! `sandboxio::backend::run_blocking`: a blocking call awaited from any executor, cancelled
//! by dropping its future.
#![allow(non_snake_case, reason = "test names read as clauses: `area__requirement`")]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use futures_lite::future;
use sandboxio::ErrorCode;
use sandboxio::backend::run_blocking;

/// Polls `fut` once with a no-op waker, then drops it: cancellation while in flight.
fn poll_once_then_drop<F: std::future::Future>(fut: F) {
    let mut fut = std::pin::pin!(fut);
    assert!(future::block_on(future::poll_once(fut.as_mut())).is_none(), "expected the call in flight");
}

#[test]
fn run_blocking__returns_what_the_work_returns_under_each_executor() {
    let work = || run_blocking("test", |_| Ok(6 * 7));
    assert_eq!(future::block_on(work()).unwrap(), 42);
    assert_eq!(smol::block_on(work()).unwrap(), 42);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert_eq!(rt.block_on(work()).unwrap(), 42);
    let err = future::block_on(run_blocking::<(), _>("test", |_| Err(sandboxio::Error::not_found("/x"))));
    assert_eq!(err.unwrap_err().code(), ErrorCode::NotFound);
}

#[test]
fn run_blocking__does_not_block_the_executor_thread() {
    // One thread drives both futures: the timer must fire while the blocking call sleeps.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let started = Instant::now();
    let (timer_at, blocked) = rt.block_on(async {
        let slow = run_blocking("test", |_| {
            std::thread::sleep(Duration::from_millis(600));
            Ok(())
        });
        let timer = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            started.elapsed()
        };
        tokio::join!(timer, slow)
    });
    blocked.unwrap();
    assert!(timer_at < Duration::from_millis(400), "expected the timer at ~50 ms, observed {timer_at:?}");
}

#[test]
fn run_blocking__a_future_dropped_unpolled_runs_nothing() {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    drop(run_blocking("test", move |_| {
        flag.store(true, Ordering::SeqCst);
        Ok(())
    }));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!ran.load(Ordering::SeqCst), "expected no work from an unpolled future");
}

#[test]
fn run_blocking__dropping_the_future_cancels_the_work_and_runs_its_hooks() {
    let (hook_tx, hook_rx) = mpsc::channel();
    let (seen_tx, seen_rx) = mpsc::channel();
    poll_once_then_drop(run_blocking("test", move |cancel| {
        cancel.on_cancel(move || hook_tx.send("hook ran").unwrap());
        // The provider call: blocks until the caller gives up (at most 10 s).
        let started = Instant::now();
        let cancelled = cancel.wait(Duration::from_secs(10));
        seen_tx.send((cancelled, cancel.is_cancelled(), started.elapsed())).unwrap();
        Ok(())
    }));
    assert_eq!(hook_rx.recv_timeout(Duration::from_secs(5)).unwrap(), "hook ran");
    let (woke, is_cancelled, after) = seen_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(woke && is_cancelled, "expected the work to see the cancellation");
    assert!(after < Duration::from_secs(5), "expected wait() to return at the drop, observed {after:?}");
}

/// Runs `after` in a blocking call's work once its future was polled and dropped.
fn after_the_drop(after: impl FnOnce(&sandboxio::backend::CancelToken) + Send + 'static) {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    poll_once_then_drop(run_blocking("test", move |cancel| {
        go_rx.recv().unwrap();
        after(cancel);
        Ok(())
    }));
    go_tx.send(()).unwrap();
}

#[test]
fn run_blocking__a_hook_registered_after_the_drop_runs_at_once() {
    let (ran_tx, ran_rx) = mpsc::channel();
    after_the_drop(move |cancel| {
        let on_this_thread = std::thread::current().id();
        cancel.on_cancel(move || ran_tx.send(std::thread::current().id() == on_this_thread).unwrap());
    });
    assert!(ran_rx.recv_timeout(Duration::from_secs(5)).unwrap(), "expected the hook inline on the worker");
}

#[test]
fn run_blocking__hooks_never_run_once_the_work_returned() {
    let hooks = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hooks);
    let fut = run_blocking("test", move |cancel| {
        cancel.on_cancel(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        Ok("done")
    });
    assert_eq!(future::block_on(fut).unwrap(), "done");
    // Also when the result is never taken: the work finished before the drop.
    let counter = Arc::clone(&hooks);
    let (done_tx, done_rx) = mpsc::channel();
    let fut = run_blocking("test", move |cancel| {
        let c = Arc::clone(&counter);
        cancel.on_cancel(move || {
            c.fetch_add(1, Ordering::SeqCst);
        });
        done_tx.send(()).unwrap();
        Ok(())
    });
    let mut fut = Box::pin(fut);
    assert!(future::block_on(future::poll_once(fut.as_mut())).is_none());
    done_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    // The work has returned (it sent before returning); let its result land, then drop.
    std::thread::sleep(Duration::from_millis(200));
    drop(fut);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(hooks.load(Ordering::SeqCst), 0, "expected no hook after the work returned");
}

#[test]
fn run_blocking__a_panic_is_a_provider_error_naming_the_backend() {
    let err = future::block_on(run_blocking::<(), _>("fly", |_| panic!("the SDK panicked"))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Provider);
    assert!(err.to_string().contains("fly"), "expected the backend named, observed {err}");
}

#[test]
fn run_blocking__a_panicking_cancel_hook_does_not_stop_the_later_hooks() {
    let (ran_tx, ran_rx) = mpsc::channel();
    let (registered_tx, registered_rx) = mpsc::channel();
    let mut fut = Box::pin(run_blocking("test", move |cancel| {
        for n in 0..3 {
            let tx = ran_tx.clone();
            cancel.on_cancel(move || {
                assert_ne!(n, 1, "hook 1 panics (this message is expected in the test output)");
                tx.send(n).unwrap();
            });
        }
        registered_tx.send(()).unwrap();
        let _ = cancel.wait(Duration::from_secs(10));
        Ok(())
    }));
    assert!(future::block_on(future::poll_once(fut.as_mut())).is_none(), "expected the call in flight");
    // All three registered before the drop: they run together, on the cancel thread.
    registered_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    drop(fut);
    let mut ran: Vec<i32> = (0..2).filter_map(|_| ran_rx.recv_timeout(Duration::from_secs(5)).ok()).collect();
    ran.sort_unstable();
    assert_eq!(ran, vec![0, 2], "expected the hooks before and after the panicking one to run");
}

#[test]
fn run_blocking__a_panicking_hook_registered_after_the_drop_does_not_unwind_into_the_work() {
    let (after_tx, after_rx) = mpsc::channel();
    after_the_drop(move |cancel| {
        cancel.on_cancel(|| panic!("the kill request failed (this message is expected in the test output)"));
        after_tx.send("the work went on").unwrap();
    });
    assert_eq!(after_rx.recv_timeout(Duration::from_secs(5)).unwrap(), "the work went on");
}

// ---- blocking_chunks: a blocking iterator of output chunks as a stream

use sandboxio::backend::{BlockingChunks, blocking_chunks};
use sandboxio::exec::{OutputChunk, StreamKind};

#[expect(clippy::unnecessary_wraps, reason = "an iterator item, as a provider SDK yields it")]
fn chunk(text: &str) -> sandboxio::Result<OutputChunk> {
    Ok(OutputChunk { stream: StreamKind::Stdout, data: text.as_bytes().to_vec() })
}

/// Every item until the end, as text (errors by code).
async fn drain(mut chunks: BlockingChunks) -> Vec<String> {
    let mut seen = Vec::new();
    while let Some(item) = std::future::poll_fn(|cx| chunks.poll_chunk(cx)).await {
        seen.push(match item {
            Ok(c) => String::from_utf8(c.data).unwrap(),
            Err(e) => e.code().to_string(),
        });
    }
    seen
}

#[test]
fn blocking_chunks__yields_the_chunks_in_order_then_none_under_each_executor() {
    let open = || {
        blocking_chunks("test", |_| {
            Ok(["a", "", "b", "c"].into_iter().map(|s| {
                std::thread::sleep(Duration::from_millis(5));
                chunk(s)
            }))
        })
    };
    let expected = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
    assert_eq!(future::block_on(drain(open())), expected, "futures-lite (the empty chunk skipped)");
    assert_eq!(smol::block_on(drain(open())), expected, "smol");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert_eq!(rt.block_on(drain(open())), expected, "tokio");
}

#[test]
fn blocking_chunks__an_error_opening_or_iterating_is_yielded_then_the_stream_ends() {
    let failed_open =
        blocking_chunks("test", |_| Err::<std::iter::Empty<_>, _>(sandboxio::Error::not_found("/x")));
    assert_eq!(future::block_on(drain(failed_open)), vec!["SBX-010".to_owned()]);
    let mid = blocking_chunks("test", |_| {
        Ok(vec![chunk("a"), Err(sandboxio::Error::sandbox_gone("s1", "killed"))].into_iter())
    });
    assert_eq!(future::block_on(drain(mid)), vec!["a".to_owned(), "SBX-007".to_owned()]);
    let panicked = blocking_chunks("test", |_| {
        Ok([0]
            .into_iter()
            .map(|_| -> sandboxio::Result<OutputChunk> { panic!("the SDK panicked (expected)") }))
    });
    assert_eq!(future::block_on(drain(panicked)), vec!["SBX-015".to_owned()]);
}

#[test]
fn blocking_chunks__the_iterator_runs_at_most_two_chunks_ahead_of_the_reader() {
    let produced = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&produced);
    let mut chunks = blocking_chunks("test", move |_| {
        Ok((0..100).map(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            chunk("x")
        }))
    });
    let first = future::block_on(std::future::poll_fn(|cx| chunks.poll_chunk(cx)));
    assert!(matches!(first, Some(Ok(_))), "expected a first chunk");
    std::thread::sleep(Duration::from_millis(300));
    // One taken, one queued, one made and waiting to be queued.
    let ahead = produced.load(Ordering::SeqCst);
    assert!(ahead <= 3, "expected the iterator held back by the reader, observed {ahead} chunks made");
}

#[test]
fn blocking_chunks__dropping_the_stream_runs_the_hooks_and_stops_the_iterator() {
    let (hook_tx, hook_rx) = mpsc::channel();
    let (stopped_tx, stopped_rx) = mpsc::channel();
    let made = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&made);
    let mut chunks = blocking_chunks("test", move |cancel| {
        // The "process": gives a chunk every 20 ms until killed by the hook.
        let (kill_tx, kill_rx) = mpsc::channel::<()>();
        cancel.on_cancel(move || {
            let _ = kill_tx.send(());
            hook_tx.send("killed").unwrap();
        });
        Ok(std::iter::from_fn(move || {
            if kill_rx.recv_timeout(Duration::from_millis(20)).is_ok() {
                stopped_tx.send(()).unwrap();
                return None;
            }
            counter.fetch_add(1, Ordering::SeqCst);
            Some(chunk("tick"))
        }))
    });
    let first = future::block_on(std::future::poll_fn(|cx| chunks.poll_chunk(cx)));
    assert!(matches!(first, Some(Ok(_))), "expected a first chunk");
    drop(chunks);
    assert_eq!(hook_rx.recv_timeout(Duration::from_secs(5)).unwrap(), "killed");
    // Either the kill ended the iterator, or its next send found the reader gone.
    let _ = stopped_rx.recv_timeout(Duration::from_millis(500));
    let at_stop = made.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(made.load(Ordering::SeqCst), at_stop, "expected the iterator not advanced after the drop");
}
