//! Simulated time for the sustained replay: a [`ManualClock`] the gate reads, timers fired in time
//! order by [`drive`], which runs a future on one thread and moves the clock to the next timer
//! whenever nothing else can run. No real sleeps: the same input gives the same run.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use gate::clock::{Clock, ManualClock};

use super::config::START_MS;

/// Simulated time: a [`ManualClock`] the gate reads, and timers the driver ([`drive`]) fires in
/// time order, moving the clock to each, whenever nothing else can run.
#[derive(Clone)]
pub struct SimTime {
    clock: Arc<ManualClock>,
    timers: Arc<Mutex<BTreeMap<(i64, u64), Waker>>>,
    seq: Arc<AtomicU64>,
}

impl SimTime {
    /// Time at `START_MS`, no timers.
    pub fn new() -> Self {
        Self {
            clock: Arc::new(ManualClock::new(START_MS)),
            timers: Arc::default(),
            seq: Arc::default(),
        }
    }

    /// Now, epoch ms.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The clock the gate and the terminal read.
    pub fn clock(&self) -> Arc<ManualClock> {
        Arc::clone(&self.clock)
    }

    /// A future ready at `at_ms` (epoch ms).
    pub fn sleep_until(&self, at_ms: i64) -> SimSleep {
        SimSleep {
            time: self.clone(),
            at_ms,
            key: None,
        }
    }

    /// A future ready `ms` from now.
    pub fn sleep_ms(&self, ms: i64) -> SimSleep {
        self.sleep_until(self.now_ms() + ms.max(0))
    }

    /// Moves the clock to the earliest timer and wakes every timer due then; `false` when there
    /// is none.
    fn advance(&self) -> bool {
        let mut timers = self.timers.lock().unwrap_or_else(|e| e.into_inner());
        let Some((&(at, _), _)) = timers.iter().next() else {
            return false;
        };
        if at > self.clock.now_ms() {
            self.clock.set_ms(at);
        }
        let due: Vec<(i64, u64)> = timers.range(..(at + 1, 0)).map(|(k, _)| *k).collect();
        let wakers: Vec<Waker> = due.iter().filter_map(|k| timers.remove(k)).collect();
        drop(timers);
        for w in wakers {
            w.wake();
        }
        true
    }
}

impl Default for SimTime {
    fn default() -> Self {
        Self::new()
    }
}

/// A sleep on simulated time ([`SimTime::sleep_until`]).
pub struct SimSleep {
    time: SimTime,
    at_ms: i64,
    key: Option<(i64, u64)>,
}

impl Future for SimSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.time.now_ms() >= self.at_ms {
            if let Some(k) = self.key.take() {
                self.time
                    .timers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&k);
            }
            return Poll::Ready(());
        }
        let key = match self.key {
            Some(k) => k,
            None => {
                let k = (self.at_ms, self.time.seq.fetch_add(1, Ordering::Relaxed));
                self.key = Some(k);
                k
            }
        };
        self.time
            .timers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for SimSleep {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.time
                .timers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&k);
        }
    }
}

/// A waker that raises a flag.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Runs `fut` to completion on simulated time: polls it while it was woken, else fires the
/// earliest timer. One thread, no real sleeps: the same input gives the same run.
///
/// # Errors
/// When `fut` waits with no timer left (nothing could ever wake it).
pub fn drive<F: Future>(time: &SimTime, fut: F) -> Result<F::Output, String> {
    let flag = Arc::new(Flag(AtomicBool::new(true)));
    let waker = Waker::from(Arc::clone(&flag));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if flag.0.swap(false, Ordering::SeqCst) {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return Ok(v);
            }
            continue;
        }
        if !time.advance() {
            return Err(format!(
                "stalled at +{} ms: waiting with no timer left",
                time.now_ms() - START_MS
            ));
        }
    }
}
