//! Opens answered later. FUSE sends RELEASE after `close(2)` has returned,
//! so an open right after a close (by the same process, or the next one of
//! a script) can find the device still held. Such an open (and only such:
//! every holder had a descriptor closed since its last request,
//! [`Device::release_in_flight`]) is handed to one waiter thread that
//! answers it when the release arrives, or `EBUSY` after [`RELEASE_GRACE`];
//! every other refused open is an immediate `EBUSY`, and no thread that
//! serves requests ever waits.
//!
//! Both FUSE channels use it: the io_uring queues (whose reply goes back to
//! the queue's own thread) and the classic readers (which write the reply
//! to `/dev/fuse`). How a reply reaches the kernel is the channel's
//! [`OpenReply`]. Over CUSE the kernel sends RELEASE before `close(2)`
//! returns, so no open there needs to wait.

use crate::device::{Device, DeviceError, FileId};
use crate::policy::Caller;
use crossbeam_channel::{Receiver, SendError, Sender};
use nix::errno::Errno;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an open waits for a release in flight. Generous: a release
/// closes the open's perf events, which on a loaded machine can take a
/// while, and the wait costs no one else anything (it is the waiter
/// thread's, not a reader's or a ring queue's).
pub const RELEASE_GRACE: Duration = Duration::from_secs(1);
/// Opens waiting for a release at once, at most; past it, `EBUSY`.
pub const MAX_WAITING_OPENS: usize = 64;
/// The waiter retries at least this often, so a release that lands between
/// a retry and the wait is seen soon.
const RETRY_EVERY: Duration = Duration::from_millis(2);

/// How a channel answers an open it could not answer at once.
pub trait OpenReply: Send + 'static {
    fn opened(self, id: FileId);
    fn refused(self, error: &DeviceError);
}

/// An open refused with `EBUSY` while a release is in flight: worth
/// waiting for.
#[derive(Debug)]
pub struct PendingOpen {
    caller: Caller,
    flags: i32,
    error: DeviceError,
}

impl PendingOpen {
    /// The refusal it gets if it cannot wait.
    pub fn error(&self) -> &DeviceError {
        &self.error
    }
}

/// What an open attempt came to.
#[derive(Debug)]
pub enum Opened {
    Now(FileId),
    Refused(DeviceError),
    /// Answer through [`OpenWaiter::wait`] (or with [`PendingOpen::error`]).
    Wait(PendingOpen),
}

/// Opens the device for `caller`; an `EBUSY` that a release in flight will
/// lift comes back as [`Opened::Wait`].
pub fn try_open(device: &Device, caller: Caller, flags: i32) -> Opened {
    match device.open(&caller, flags) {
        Ok(id) => Opened::Now(id),
        Err(error) if error.errno() == Errno::EBUSY && device.release_in_flight(&caller, flags) => {
            Opened::Wait(PendingOpen {
                caller,
                flags,
                error,
            })
        }
        Err(error) => Opened::Refused(error),
    }
}

struct Waiting<R> {
    open: PendingOpen,
    reply: R,
    deadline: Instant,
}

/// The waiter thread's mailbox. The thread ends when every clone is gone.
pub struct OpenWaiter<R: OpenReply> {
    queue: Sender<Waiting<R>>,
}

impl<R: OpenReply> Clone for OpenWaiter<R> {
    fn clone(&self) -> Self {
        OpenWaiter {
            queue: self.queue.clone(),
        }
    }
}

impl<R: OpenReply> OpenWaiter<R> {
    /// Starts the waiter thread.
    pub fn start(device: Arc<Device>, name: &str) -> io::Result<OpenWaiter<R>> {
        let (queue, waiting) = crossbeam_channel::unbounded();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || serve(device, waiting))?;
        Ok(OpenWaiter { queue })
    }

    /// Hands `open` to the waiter thread, which answers through `reply`;
    /// answers `EBUSY` at once when too many already wait.
    pub fn wait(&self, open: PendingOpen, reply: R) {
        if self.queue.len() >= MAX_WAITING_OPENS {
            reply.refused(&open.error);
            return;
        }
        tracing::trace!(
            tid = open.caller.tid(),
            "open waits for a release in flight"
        );
        let waiting = Waiting {
            open,
            reply,
            deadline: Instant::now() + RELEASE_GRACE,
        };
        if let Err(SendError(waiting)) = self.queue.send(waiting) {
            waiting.reply.refused(&waiting.open.error);
        }
    }
}

/// The waiter thread: retries its opens whenever a release happens, answers
/// each when it succeeds, fails otherwise, or its deadline passes.
fn serve<R: OpenReply>(device: Arc<Device>, queue: Receiver<Waiting<R>>) {
    let mut waiting: Vec<Waiting<R>> = Vec::new();
    loop {
        if waiting.is_empty() {
            match queue.recv() {
                Ok(open) => waiting.push(open),
                Err(_) => return,
            }
        }
        waiting.extend(queue.try_iter());
        device.wait_for_release(RETRY_EVERY);
        let now = Instant::now();
        let mut still = Vec::with_capacity(waiting.len());
        for w in waiting.drain(..) {
            match device.open_again(&w.open.caller, w.open.flags) {
                Ok(id) => w.reply.opened(id),
                Err(e) if e.errno() == Errno::EBUSY && now < w.deadline => still.push(w),
                Err(e) => w.reply.refused(&e),
            }
        }
        waiting = still;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::mock::MockBackend;
    use crate::device::test_fixtures;
    use pfm_model::Implementation;
    use std::sync::mpsc;

    struct Answer(mpsc::Sender<Result<FileId, Errno>>);

    impl OpenReply for Answer {
        fn opened(self, id: FileId) {
            let _ = self.0.send(Ok(id));
        }
        fn refused(self, error: &DeviceError) {
            let _ = self.0.send(Err(error.errno()));
        }
    }

    fn me() -> Caller {
        Caller::from_tid(nix::unistd::gettid().as_raw())
    }

    #[test]
    fn a_close_then_open_is_answered_when_the_release_lands() {
        let device = Arc::new(test_fixtures::device(
            Implementation::Ev4,
            &MockBackend::default(),
            -1,
        ));
        let flags = libc::O_RDONLY;
        let Opened::Now(first) = try_open(&device, me(), flags) else {
            panic!("the first open succeeds")
        };
        // Before this process closed it, its second open is refused at once.
        assert!(matches!(
            try_open(&device, me(), flags),
            Opened::Refused(e) if e.errno() == Errno::EBUSY
        ));
        // Once this process closed it, its open may wait.
        device.flush(first, &me());
        let Opened::Wait(pending) = try_open(&device, me(), flags) else {
            panic!("a close-then-open waits")
        };
        let waiter = OpenWaiter::start(Arc::clone(&device), "test-waiter").unwrap();
        let (tx, rx) = mpsc::channel();
        waiter.wait(pending, Answer(tx));
        std::thread::sleep(Duration::from_millis(5));
        assert!(rx.try_recv().is_err(), "answered before the release");
        device.release(first);
        let answer = rx.recv_timeout(Duration::from_secs(2)).unwrap();
        assert!(answer.is_ok_and(|id| id != first), "{answer:?}");
    }

    #[test]
    fn a_release_that_never_comes_is_ebusy_after_the_grace() {
        let device = Arc::new(test_fixtures::device(
            Implementation::Ev4,
            &MockBackend::default(),
            -1,
        ));
        let Opened::Now(first) = try_open(&device, me(), 0) else {
            panic!()
        };
        device.flush(first, &me());
        let Opened::Wait(pending) = try_open(&device, me(), 0) else {
            panic!()
        };
        let waiter = OpenWaiter::start(Arc::clone(&device), "test-waiter").unwrap();
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        waiter.wait(pending, Answer(tx));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(2)).unwrap(),
            Err(Errno::EBUSY)
        );
        assert!(start.elapsed() >= RELEASE_GRACE);
    }
}
