//! One host thread for every live `local://` sandbox of the process: it reads each sandbox's
//! sandboxd stream and bwrap's stderr, and fires each sandbox's TTL.
//!
//! Before issue #28 every sandbox held three threads of its own (the session's reader, a
//! stderr reader and a TTL sleeper): 99 threads with 32 sandboxes open, each with its stack.
//! Here one `epoll` set holds every descriptor, and the thread's wait ends at the earliest
//! timer. The thread starts with the first sandbox and lives as long as the process.
//!
//! A handler runs on this thread and must not block: a read handler is called when its
//! descriptor is readable and reads once (this thread is the descriptor's only reader, so
//! that read returns at once, with bytes or end-of-file); a timer's job hands blocking work
//! to a thread of its own.

use std::collections::{BinaryHeap, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use rustix::event::epoll;

/// What a read handler wants after a call.
pub(super) enum Watch {
    /// Call again when the descriptor is readable again.
    Keep,
    /// Done: the descriptor is removed from the set and closed.
    Done,
}

type ReadHandler = Box<dyn FnMut(&OwnedFd, &mut [u8]) -> Watch + Send>;
type Job = Box<dyn FnOnce() + Send>;

/// The key of the wake-up eventfd in the epoll set; sources get keys from 1.
const WAKE: u64 = 0;

/// The longest single wait (a far timer is looked at again after this): `epoll_wait` takes
/// at most `i32::MAX` milliseconds.
const LONGEST_WAIT: Duration = Duration::from_hours(1);

/// How many events one wait takes at most.
const EVENTS: usize = 64;

/// The scratch buffer handlers read into, in bytes (64 KiB, shared: a sandbox costs no
/// buffer of its own while idle).
const SCRATCH: usize = 64 * 1024;

struct Reactor {
    epoll: OwnedFd,
    /// Written to end a wait early (a timer earlier than the one waited for).
    wake: OwnedFd,
    next_key: AtomicU64,
    sources: Mutex<HashMap<u64, Source>>,
    timers: Mutex<Timers>,
}

struct Source {
    fd: Arc<OwnedFd>,
    /// `None` while the reactor thread runs it.
    handler: Option<ReadHandler>,
}

#[derive(Default)]
struct Timers {
    /// Deadlines and keys, earliest first; a key whose job is gone was cancelled.
    queue: BinaryHeap<std::cmp::Reverse<(Instant, u64)>>,
    jobs: HashMap<u64, Job>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The process's reactor, started on first use.
fn reactor() -> std::io::Result<&'static Reactor> {
    static REACTOR: OnceLock<std::result::Result<&'static Reactor, std::io::ErrorKind>> = OnceLock::new();
    let made = REACTOR.get_or_init(|| {
        let start = || -> std::io::Result<&'static Reactor> {
            let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
            let wake = rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
            )?;
            epoll::add(&epoll, &wake, epoll::EventData::new_u64(WAKE), epoll::EventFlags::IN)?;
            let reactor: &'static Reactor = Box::leak(Box::new(Reactor {
                epoll,
                wake,
                next_key: AtomicU64::new(WAKE + 1),
                sources: Mutex::new(HashMap::new()),
                timers: Mutex::new(Timers::default()),
            }));
            std::thread::Builder::new().name("sandboxio-local-io".into()).spawn(move || reactor.run())?;
            Ok(reactor)
        };
        start().map_err(|e| e.kind())
    });
    made.map_err(std::io::Error::from)
}

/// Calls `handler` on the reactor thread each time `fd` is readable (or at its end or error),
/// with a scratch buffer to read into, until it returns [`Watch::Done`]; then `fd` is closed.
///
/// # Errors
///
/// The reactor could not start or take the descriptor.
pub(super) fn watch(
    fd: OwnedFd,
    handler: impl FnMut(&OwnedFd, &mut [u8]) -> Watch + Send + 'static,
) -> std::io::Result<()> {
    let reactor = reactor()?;
    let key = reactor.next_key.fetch_add(1, Ordering::Relaxed);
    let fd = Arc::new(fd);
    // In the map before the set: an event may come at once.
    lock(&reactor.sources).insert(key, Source { fd: Arc::clone(&fd), handler: Some(Box::new(handler)) });
    if let Err(e) = epoll::add(&reactor.epoll, &*fd, epoll::EventData::new_u64(key), epoll::EventFlags::IN) {
        lock(&reactor.sources).remove(&key);
        return Err(e.into());
    }
    Ok(())
}

/// A timer set with [`at`]; dropping it cancels the job if it has not run.
#[derive(Debug)]
pub(super) struct Timer {
    key: u64,
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Ok(reactor) = reactor() {
            let mut timers = lock(&reactor.timers);
            timers.jobs.remove(&self.key);
            // Cancelled entries stay in the queue until their deadline: keep them from piling
            // up when many sandboxes with long TTLs come and go.
            if timers.queue.len() > 2 * timers.jobs.len() + 64 {
                let Timers { queue, jobs } = &mut *timers;
                queue.retain(|std::cmp::Reverse((_, key))| jobs.contains_key(key));
            }
        }
    }
}

/// Runs `job` on the reactor thread at `deadline` (or at once if it has passed).
///
/// # Errors
///
/// The reactor could not start.
pub(super) fn at(deadline: Instant, job: impl FnOnce() + Send + 'static) -> std::io::Result<Timer> {
    let reactor = reactor()?;
    let key = reactor.next_key.fetch_add(1, Ordering::Relaxed);
    let earliest = {
        let mut timers = lock(&reactor.timers);
        let earlier = timers.queue.peek().is_none_or(|std::cmp::Reverse((first, _))| deadline < *first);
        timers.queue.push(std::cmp::Reverse((deadline, key)));
        timers.jobs.insert(key, Box::new(job));
        earlier
    };
    if earliest {
        // The thread may be waiting for a later deadline; EAGAIN means a wake-up is pending.
        let _ = rustix::io::write(&reactor.wake, &1u64.to_ne_bytes());
    }
    Ok(Timer { key })
}

impl Reactor {
    fn run(&self) {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(EVENTS);
        let mut scratch = vec![0u8; SCRATCH];
        loop {
            let timeout = self.fire_due();
            let timespec = timeout.and_then(|t| rustix::event::Timespec::try_from(t).ok());
            events.clear();
            match epoll::wait(&self.epoll, rustix::buffer::spare_capacity(&mut events), timespec.as_ref()) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    // Nothing can be read any more: say so rather than spin.
                    tracing::error!(error = %e, "the local:// reactor's epoll_wait failed; its thread stops");
                    return;
                }
            }
            for event in &events {
                match event.data.u64() {
                    WAKE => {
                        let mut buf = [0u8; 8];
                        let _ = rustix::io::read(&self.wake, &mut buf);
                    }
                    key => self.ready(key, &mut scratch),
                }
            }
        }
    }

    /// Runs the handler of source `key`, outside the lock (a handler may add sources).
    fn ready(&self, key: u64, scratch: &mut [u8]) {
        let taken = {
            let mut sources = lock(&self.sources);
            sources.get_mut(&key).and_then(|s| Some((Arc::clone(&s.fd), s.handler.take()?)))
        };
        let Some((fd, mut handler)) = taken else { return };
        // A handler that panics (a bug) ends its own source, not this thread: the thread
        // serves every sandbox of the process, and its end would leave each one's commands
        // waiting for frames no one reads any more. Dropping the handler ends its session.
        let watch = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&fd, scratch)))
            .unwrap_or_else(|_| {
                tracing::error!("a local:// reactor handler panicked; its sandbox's session ends");
                Watch::Done
            });
        match watch {
            Watch::Keep => {
                if let Some(source) = lock(&self.sources).get_mut(&key) {
                    source.handler = Some(handler);
                }
            }
            Watch::Done => {
                let _ = epoll::delete(&self.epoll, fd.as_fd());
                lock(&self.sources).remove(&key);
            }
        }
    }

    /// Runs the jobs whose deadline has passed; how long until the next one (`None`: no timer).
    fn fire_due(&self) -> Option<Duration> {
        loop {
            let job = {
                let mut timers = lock(&self.timers);
                let now = Instant::now();
                match timers.queue.peek() {
                    None => return None,
                    Some(std::cmp::Reverse((deadline, _))) if *deadline > now => {
                        // Rounded up to the millisecond epoll waits in, so it never wakes early
                        // and spins.
                        let left = *deadline - now + Duration::from_micros(999);
                        return Some(left.min(LONGEST_WAIT));
                    }
                    Some(_) => {}
                }
                let std::cmp::Reverse((_, key)) = timers.queue.pop()?;
                timers.jobs.remove(&key)
            };
            if let Some(job) = job
                && std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err()
            {
                tracing::error!("a local:// reactor timer panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn a_handler_or_timer_that_panics_ends_alone_and_the_thread_serves_the_others() {
        let (read, mut write) = std::io::pipe().unwrap();
        watch(OwnedFd::from(read), |_, _| panic!("a handler's bug")).unwrap();
        write.write_all(b"x").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let _t = at(Instant::now(), || panic!("a timer's bug")).unwrap();
        // On aefc7e8..ce3d8bd the panic ended the reactor's thread: nothing below was read.
        let (read, mut write_b) = std::io::pipe().unwrap();
        watch(OwnedFd::from(read), move |fd, buf| {
            let n = rustix::io::read(fd, &mut *buf).unwrap_or(0);
            let _ = tx.send(buf[..n].to_vec());
            if n == 0 { Watch::Done } else { Watch::Keep }
        })
        .unwrap();
        write_b.write_all(b"still served").unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), b"still served");
        // The panicking source was closed: its writer sees no reader.
        let closed = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            write.write_all(b"y").is_err()
        });
        assert!(closed, "the panicking handler's descriptor stayed open");
    }

    #[test]
    fn handlers_see_bytes_and_the_end_and_timers_fire_in_order() {
        let (read, mut write) = std::io::pipe().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        watch(OwnedFd::from(read), move |fd, buf| match rustix::io::read(fd, &mut *buf) {
            Ok(0) | Err(_) => {
                tx.send(None).unwrap();
                Watch::Done
            }
            Ok(n) => {
                tx.send(Some(buf[..n].to_vec())).unwrap();
                Watch::Keep
            }
        })
        .unwrap();
        write.write_all(b"abc").unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Some(b"abc".to_vec()));
        drop(write);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), None);

        let (tx, rx) = std::sync::mpsc::channel();
        let now = Instant::now();
        let late = tx.clone();
        let _b = at(now + Duration::from_millis(60), move || late.send("late").unwrap()).unwrap();
        let cancelled = tx.clone();
        let c = at(now + Duration::from_millis(30), move || cancelled.send("cancelled").unwrap()).unwrap();
        let _a = at(now + Duration::from_millis(10), move || tx.send("early").unwrap()).unwrap();
        drop(c);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "early");
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "late");
        assert!(now.elapsed() >= Duration::from_millis(60));
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "a cancelled timer does not fire");
    }
}
