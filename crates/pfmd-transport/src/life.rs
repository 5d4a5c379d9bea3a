//! A connection's life, shared by the threads that serve it: whether pfmd
//! is stopping it, and whether it ended before that. A connection that ends
//! while pfmd is not stopping (an unmount, an abort, the kernel closing a
//! CUSE channel) is reported once, through `on_lost`: the daemon then stops
//! with an error, so its unit restarts it.

use std::sync::atomic::{AtomicBool, Ordering};

pub struct Life {
    stopping: AtomicBool,
    lost: AtomicBool,
    on_lost: Box<dyn Fn() + Send + Sync>,
}

impl Life {
    pub fn new(on_lost: impl Fn() + Send + Sync + 'static) -> Life {
        Life {
            stopping: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            on_lost: Box::new(on_lost),
        }
    }

    /// pfmd is stopping the connection: its end is expected from now on.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// The flag a blocking reader checks between reads.
    pub fn stopping_flag(&self) -> &AtomicBool {
        &self.stopping
    }

    /// Whether the connection ended before pfmd stopped it.
    pub fn was_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The `transport`'s connection ended, `why`. Unless pfmd is stopping,
    /// the first thread to notice reports it; the others see the same end.
    pub fn ended(&self, transport: &str, why: &str) {
        if self.is_stopping() || self.lost.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::error!("{transport} connection lost: {why}");
        (self.on_lost)();
    }
}
