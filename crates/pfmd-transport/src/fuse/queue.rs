//! One io_uring serving one FUSE queue, on a thread pinned to the queue's
//! CPU: REGISTER every entry, then answer each completion (a request) with
//! COMMIT_AND_FETCH, which returns the reply and re-arms the entry in one
//! SQE. The only `unsafe` here is handing buffers to the kernel and reading
//! them back when it is done with them.
//!
//! The thread never waits for anything but its ring. A request whose answer
//! waits keeps its entry (the kernel sees the request in progress): an OPEN
//! that must wait for its own process's RELEASE goes to the open waiter,
//! whose answer comes back through the queue's [`Mailbox`] (an eventfd the
//! ring polls); a pointer ioctl's store goes to the store helper over the
//! queue's own [`StoreLink`], sent and received by the ring itself (no
//! syscall of its own); a request that would wait for its open goes to the
//! open's worker ([`crate::later`]), whose answer comes back through the
//! mailbox too (a store it yields is then sent from here). Every answer is
//! committed from this thread. At most all entries but one wait so, so a
//! queue always has an entry for a RELEASE or a quick request, and one user
//! holds at most half of them ([`HELD_PER_USER`]), and [`Hold::limit`] of
//! opens waiting for a release; past any, a store or a worker
//! request is `EAGAIN` and an open `EBUSY`. Nothing that waits is ever
//! served here: it would hold the queue, and every caller on its CPU.

use super::FuseError;
use super::entries::Entries;
use super::ring;
use crate::abi::*;
use crate::device::{DeviceError, FileId};
use crate::handler::{Answer, Handler, opened_reply};
use crate::later::LaterReply;
use crate::open_waiter::{OpenReply, OpenWaiter};
use crate::store::{StoreJob, StoreLink};
use crate::wire;
use io_uring::{IoUring, cqueue, opcode, squeue, types};
use nix::errno::Errno;
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

/// `user_data` of the mailbox poll; entries are tagged with their index.
const WAKE: u64 = u64::MAX;
/// `user_data` of the store link's receive.
const STORED: u64 = u64::MAX - 1;
/// `user_data` of a store's send that failed, or'ed with its entry's index
/// (a send that succeeds posts no completion).
const SENT: u64 = 1 << 62;
/// Entries of one queue that one user's opens waiting for their release may
/// hold (a script's open after a close waits a moment; more are a loop).
pub const WAITING_PER_USER: usize = 4;
/// Entries of one queue that one user's waiting requests of every kind may
/// hold together (a worker's answer that turns into a store keeps its
/// entry): half the queue's, so one user leaves the other half to others.
/// Stores and requests waiting for their opens' workers have no tighter
/// bound, as a process's threads that share an open may all call at once
/// (the store helper makes a few of a user's stores at a time and the rest
/// wait their turn there, [`crate::store`]).
pub const HELD_PER_USER: usize = super::ENTRIES_PER_RING / 2;

/// What an entry whose answer waits waits for, and for whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hold {
    uid: u32,
    kind: WaitingFor,
}

impl Hold {
    fn of(uid: u32, kind: WaitingFor) -> Hold {
        Hold { uid, kind }
    }

    /// Entries one user may hold waiting so, below [`HELD_PER_USER`] in
    /// all: none for stores and requests waiting for their workers.
    fn limit(self) -> Option<usize> {
        match self.kind {
            WaitingFor::Release => Some(WAITING_PER_USER),
            WaitingFor::Store | WaitingFor::Worker => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitingFor {
    /// The store helper.
    Store,
    /// A release in flight (the open waiter).
    Release,
    /// Its open's worker ([`LaterServer`](crate::later::LaterServer)).
    Worker,
}

/// Which queue a ring serves, and how.
#[derive(Debug, Clone, Copy)]
pub struct QueueSpec {
    /// The queue: the kernel queues a request on the queue of the CPU its
    /// caller runs on.
    pub qid: u16,
    /// The CPU to pin to: the queue's own, unless it is offline or outside
    /// our affinity (then nobody calls from it, and the thread floats).
    pub cpu: Option<usize>,
    /// Entries registered: requests the kernel may hand this ring at once.
    pub entries: usize,
}

/// What another thread produced for an entry of this queue: its reply, or
/// a store to hand to the helper (a request a worker served).
enum Posted {
    Reply(Vec<u8>),
    Store(StoreJob),
}

/// Answers that other threads produced for entries of this queue.
pub struct Mailbox {
    event: EventFd,
    replies: Mutex<Vec<(usize, Posted)>>,
}

impl Mailbox {
    fn new() -> io::Result<Mailbox> {
        Ok(Mailbox {
            event: EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?,
            replies: Mutex::new(Vec::new()),
        })
    }

    /// Queues `reply` for entry `index` and wakes the ring.
    fn post(&self, index: usize, reply: Posted) {
        self.replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((index, reply));
        if let Err(e) = self.event.write(1) {
            tracing::error!("waking a FUSE ring queue: {e}");
        }
    }

    fn take(&self) -> Vec<(usize, Posted)> {
        // Reset the counter first: a post after it wakes the ring again.
        let _ = self.event.read();
        std::mem::take(&mut *self.replies.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// An open answered later through a ring queue's mailbox.
pub struct RingReply {
    mailbox: Arc<Mailbox>,
    index: usize,
    unique: u64,
}

impl OpenReply for RingReply {
    fn opened(self, id: FileId) {
        let reply = opened_reply(self.unique, id);
        self.mailbox.post(self.index, Posted::Reply(reply));
    }
    fn refused(self, error: &DeviceError) {
        let reply = wire::reply_error(self.unique, error.errno());
        self.mailbox.post(self.index, Posted::Reply(reply));
    }
}

/// A request its open's worker served, answered through the queue's
/// mailbox: the ring commits the reply, or sends the store.
struct RingLater {
    mailbox: Arc<Mailbox>,
    index: usize,
    unique: u64,
}

impl LaterReply for RingLater {
    fn deliver(self: Box<Self>, answer: Answer) {
        let posted = match answer {
            Answer::Reply(reply) | Answer::Last(reply) => Posted::Reply(reply),
            Answer::AfterStore(job) => Posted::Store(job),
            Answer::Later { request, .. } => Posted::Reply(request.unexpected()),
            // The entry must come back whatever the answer.
            Answer::Nothing | Answer::WaitForRelease { .. } => {
                Posted::Reply(wire::reply_error(self.unique, Errno::EIO))
            }
        };
        self.mailbox.post(self.index, posted);
    }
}

/// What one ring thread shares with the rest of the transport.
pub struct Shared {
    pub dev: Arc<File>,
    pub handler: Arc<Handler>,
    pub waiter: OpenWaiter<RingReply>,
    /// This queue's link to the store helper.
    pub stores: StoreLink,
}

/// Serves one ring until the connection ends. Reports on `ready` once its
/// entries are registered (or why they are not). True when it served until
/// the connection ended; false when it never registered.
pub fn serve(shared: Shared, spec: QueueSpec, ready: Sender<Result<(), FuseError>>) -> bool {
    let fail = |what: &str, source: io::Error| FuseError::Queue {
        qid: spec.qid,
        what: what.to_string(),
        source,
    };
    if let Some(cpu) = spec.cpu {
        let mut set = nix::sched::CpuSet::new();
        let pinned = set
            .set(cpu)
            .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
        if let Err(e) = pinned {
            let _ = ready.send(Err(fail(&format!("pinning to CPU {cpu}"), e.into())));
            return false;
        }
    }
    let mailbox = match Mailbox::new() {
        Ok(mailbox) => Arc::new(mailbox),
        Err(e) => {
            let _ = ready.send(Err(fail("eventfd", e)));
            return false;
        }
    };
    let mut ring = match IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build((spec.entries + 2).next_power_of_two() as u32)
    {
        Ok(ring) => ring,
        Err(e) => {
            let _ = ready.send(Err(fail("io_uring_setup", e)));
            return false;
        }
    };
    let fd = shared.dev.as_raw_fd();
    let mut entries = Entries::new(spec.entries, super::conn::RING_PAYLOAD);
    for index in 0..entries.len() {
        let sqe = ring::command(
            fd,
            FUSE_IO_URING_CMD_REGISTER,
            spec.qid,
            0,
            entries.lend(index),
            index as u64,
        );
        // SAFETY: the SQE points at the entry's iovecs and through them its
        // buffers, lent to the kernel until its command completes.
        unsafe { ring.submission().push(&sqe) }.expect("the ring has a slot per entry");
    }
    // REGISTER is issued within the submit; a refusal completes at once,
    // success only when a request arrives.
    let refused = match ring.submit() {
        Err(e) => Some(fail("submitting REGISTER", e)),
        Ok(_) => {
            let mut refused = None;
            for c in ring.completion() {
                if c.result() < 0 {
                    entries.returned(c.user_data() as usize);
                    refused.get_or_insert_with(|| {
                        fail(
                            "FUSE_IO_URING_CMD_REGISTER",
                            io::Error::from_raw_os_error(-c.result()),
                        )
                    });
                }
            }
            refused
        }
    };
    if let Some(e) = refused {
        let _ = ready.send(Err(e));
        // Entries the kernel kept stay allocated (`Entries`' Drop).
        return false;
    }
    let _ = ready.send(Ok(()));
    tracing::debug!(qid = spec.qid, cpu = spec.cpu, "FUSE ring queue registered");
    arm_poll(&mut ring, mailbox.event.as_fd().as_raw_fd(), WAKE);
    let link = shared.stores.fd().as_raw_fd();
    let mut queue = Queue {
        ring,
        fd,
        qid: spec.qid,
        entries,
        request: Vec::with_capacity(4096),
        waiting: vec![None; spec.entries],
        outgoing: vec![Vec::new(); spec.entries],
        results: StoreLink::result_buffer(),
        receiving: false,
    };
    queue.arm_receive(link);
    // Entries the kernel holds or whose answer is on its way here. Once
    // only waiting ones are left, the kernel has let go of the others
    // (the connection ended) and no answer is wanted any more.
    while queue.entries.lent() > 0 {
        match queue.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => continue,
            Err(e) => {
                tracing::error!(qid = spec.qid, "io_uring_enter: {e}");
                // The kernel may still hold the receive buffer; lent
                // entries stay allocated (`Entries`' Drop).
                std::mem::forget(std::mem::take(&mut queue.results));
                return true;
            }
        }
        let done: Vec<(u64, i32)> = queue
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (tag, result) in done {
            if tag == WAKE {
                if result < 0 {
                    tracing::warn!(
                        qid = spec.qid,
                        "FUSE ring mailbox poll: {}",
                        io::Error::from_raw_os_error(-result)
                    );
                }
                for (index, posted) in mailbox.take() {
                    match posted {
                        Posted::Reply(reply) => queue.commit_waiting(index, &reply),
                        Posted::Store(job) => queue.store_waiting(index, job, link),
                    }
                }
                arm_poll(&mut queue.ring, mailbox.event.as_fd().as_raw_fd(), WAKE);
                continue;
            }
            if tag == STORED {
                queue.receiving = false;
                let received = usize::try_from(result)
                    .map_err(|_| io::Error::from_raw_os_error(-result))
                    .and_then(|n| StoreLink::result_from(&queue.results[..n]));
                match received {
                    Ok(done) => {
                        let reply = done
                            .result
                            .unwrap_or_else(|errno| wire::reply_error(done.unique, errno));
                        queue.commit_waiting(done.tag as usize, &reply);
                        queue.arm_receive(link);
                    }
                    // The helper left: pfmd is stopping, or it died and its
                    // watcher ends the daemon (docs/device.md §8).
                    Err(e) => tracing::debug!(qid = spec.qid, "store helper link: {e}"),
                }
                continue;
            }
            if tag & SENT != 0 {
                let index = (tag & !SENT) as usize;
                let errno = match Errno::from_raw(-result) {
                    Errno::EAGAIN => Errno::EAGAIN,
                    e => {
                        tracing::error!(qid = spec.qid, "handing a store to the helper: {e}");
                        Errno::EIO
                    }
                };
                let unique = queue.outgoing_unique(index);
                queue.commit_waiting(index, &wire::reply_error(unique, errno));
                continue;
            }
            let index = tag as usize;
            queue.entries.returned(index);
            if result < 0 {
                // ENOTCONN: unmounted; the kernel has let go of the entry.
                if result != -libc::ENOTCONN {
                    tracing::warn!(
                        qid = spec.qid,
                        "FUSE ring entry ended: {}",
                        io::Error::from_raw_os_error(-result)
                    );
                }
                continue;
            }
            queue.serve_entry(index, &shared, &mailbox);
        }
    }
    tracing::debug!(qid = spec.qid, "FUSE ring queue finished");
    if queue.receiving && !queue.cancel_receive() {
        std::mem::forget(std::mem::take(&mut queue.results));
    }
    // Every entry is back (its command completed with an error, or with a
    // request whose answer still waits): `Entries`' Drop frees them.
    true
}

/// (Re)arms a one-shot poll for input on `fd` (the mailbox's eventfd, the
/// store link), completing with `tag`.
fn arm_poll(ring: &mut IoUring<squeue::Entry128, cqueue::Entry>, fd: i32, tag: u64) {
    let sqe: squeue::Entry128 = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
        .build()
        .user_data(tag)
        .into();
    // SAFETY: a poll names no memory of ours; the eventfd and the link
    // outlive the ring (the ring is dropped first).
    unsafe { ring.submission().push(&sqe) }.expect("the ring has a slot for each poll");
}

struct Queue {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    fd: i32,
    qid: u16,
    entries: Entries,
    request: Vec<u8>,
    /// For each entry whose answer waits (the open waiter's or the store
    /// helper's), the user it waits for.
    waiting: Vec<Option<Hold>>,
    /// Each entry's store message to the helper, kept while the ring sends
    /// it.
    outgoing: Vec<Vec<u8>>,
    /// Where the ring receives the helper's results, one at a time.
    results: Vec<u8>,
    /// Whether a receive into `results` is armed.
    receiving: bool,
}

impl Queue {
    fn waiting_count(&self) -> usize {
        self.waiting.iter().flatten().count()
    }

    /// Whether a request may keep its entry while its answer waits (and
    /// does, if so): one entry always stays for everything else, and one
    /// user holds at most [`HELD_PER_USER`] in all and [`Hold::limit`] of
    /// a kind.
    fn hold(&mut self, index: usize, hold: Hold) -> bool {
        let users = || self.waiting.iter().flatten().filter(|w| w.uid == hold.uid);
        let may = self.waiting_count() + 1 < self.entries.len()
            && users().count() < HELD_PER_USER
            && hold
                .limit()
                .is_none_or(|limit| users().filter(|w| w.kind == hold.kind).count() < limit);
        if may {
            self.waiting[index] = Some(hold);
        }
        may
    }

    /// Sends `message` (a store for entry `index`) to the helper on `link`
    /// from the ring: without waiting (a full link is `EAGAIN`), and with no
    /// completion unless it fails.
    fn send_store(&mut self, index: usize, message: Vec<u8>, link: i32) {
        self.outgoing[index] = message;
        let out = &self.outgoing[index];
        let sqe: squeue::Entry128 =
            opcode::Send::new(types::Fd(link), out.as_ptr(), out.len() as u32)
                .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                .build()
                .flags(squeue::Flags::SKIP_SUCCESS)
                .user_data(SENT | index as u64)
                .into();
        // SAFETY: the message stays in `outgoing[index]`, untouched, until
        // the entry's answer comes: a failed send's completion or the
        // helper's result, either of which comes after the send is done.
        unsafe { self.ring.submission().push(&sqe) }.expect("one SQE per entry at most");
    }

    /// The FUSE `unique` of the store message entry `index` sent.
    fn outgoing_unique(&self, index: usize) -> u64 {
        StoreJob::unique_of(&self.outgoing[index]).unwrap_or(0)
    }

    /// (Re)arms the receive of the helper's next result on `link`.
    fn arm_receive(&mut self, link: i32) {
        let sqe: squeue::Entry128 = opcode::Recv::new(
            types::Fd(link),
            self.results.as_mut_ptr(),
            self.results.len() as u32,
        )
        .build()
        .user_data(STORED)
        .into();
        // SAFETY: `results` is neither read nor moved until this receive
        // completes (`receiving`); the link outlives the ring.
        unsafe { self.ring.submission().push(&sqe) }.expect("the ring has a slot for it");
        self.receiving = true;
    }

    /// Cancels the armed receive and waits until the kernel is done with
    /// `results`; false if that could not be seen.
    fn cancel_receive(&mut self) -> bool {
        let sqe: squeue::Entry128 = opcode::AsyncCancel::new(STORED)
            .build()
            .user_data(WAKE)
            .into();
        // SAFETY: a cancel names no memory.
        if unsafe { self.ring.submission().push(&sqe) }.is_err() {
            return false;
        }
        while self.receiving {
            if self.ring.submit_and_wait(1).is_err() {
                return false;
            }
            if self.ring.completion().any(|c| c.user_data() == STORED) {
                self.receiving = false;
            }
        }
        true
    }

    /// Sends the store of entry `index`, which waited for its worker: it
    /// waits for the helper now (counted as a store from then on).
    fn store_waiting(&mut self, index: usize, job: StoreJob, link: i32) {
        let job = StoreJob {
            tag: index as u64,
            ..job
        };
        match StoreLink::message(&job) {
            Ok(message) if self.waiting.get(index).is_some_and(Option::is_some) => {
                self.waiting[index] = Some(Hold {
                    uid: job.uid,
                    kind: WaitingFor::Store,
                });
                self.send_store(index, message, link);
            }
            Ok(_) => tracing::error!(
                qid = self.qid,
                index,
                "a store for an entry that waits for none"
            ),
            Err(errno) => self.commit_waiting(index, &wire::reply_error(job.unique, errno)),
        }
    }

    /// Commits the answer that entry `index` waited for.
    fn commit_waiting(&mut self, index: usize, reply: &[u8]) {
        match self.waiting.get_mut(index).and_then(Option::take) {
            Some(_) => self.commit(index, reply),
            None => tracing::error!(
                qid = self.qid,
                index,
                "an answer for an entry that waits for none"
            ),
        }
    }

    /// Answers the request the kernel put in entry `index`.
    fn serve_entry(&mut self, index: usize, shared: &Shared, mailbox: &Arc<Mailbox>) {
        let Some((header, payload)) = self.entries.buffers(index) else {
            tracing::error!(
                qid = self.qid,
                index,
                "a request in an entry the kernel holds"
            );
            return;
        };
        let commit_id = ring::commit_id(header);
        let answer = match ring::request_into(header, payload, &mut self.request) {
            Ok(()) => shared.handler.answer(&self.request),
            Err(e) => {
                tracing::error!(qid = self.qid, "{e}");
                let reply = wire::reply_error(commit_id, Errno::EIO);
                self.commit(index, &reply);
                return;
            }
        };
        let reply = match answer {
            Answer::Reply(reply) | Answer::Last(reply) => reply,
            // FORGET and INTERRUPT never come this way (the kernel keeps
            // them on the classic channel); the entry must return anyway.
            Answer::Nothing => wire::reply_error(commit_id, Errno::ENOSYS),
            Answer::Later { uid, request } => {
                if !self.hold(index, Hold::of(uid, WaitingFor::Worker)) {
                    self.refuse_busy(index, uid, request.unique, Errno::EAGAIN);
                    return;
                }
                let reply = RingLater {
                    mailbox: Arc::clone(mailbox),
                    index,
                    unique: request.unique,
                };
                shared.handler.serve_later(request, Box::new(reply));
                return;
            }
            Answer::AfterStore(job) => {
                if !self.hold(index, Hold::of(job.uid, WaitingFor::Store)) {
                    self.refuse_busy(index, job.uid, job.unique, Errno::EAGAIN);
                    return;
                }
                self.store_waiting(index, job, shared.stores.fd().as_raw_fd());
                return;
            }
            Answer::WaitForRelease { unique, uid, open } => {
                if !self.hold(index, Hold::of(uid, WaitingFor::Release)) {
                    self.refuse_busy(index, uid, unique, open.error().errno());
                    return;
                }
                let reply = RingReply {
                    mailbox: Arc::clone(mailbox),
                    index,
                    unique,
                };
                shared.waiter.wait(open, reply);
                return;
            }
        };
        self.commit(index, &reply);
    }

    /// Answers entry `index` with `errno`: its request would wait, and this
    /// queue has no entry to spare for it (said in the log once).
    fn refuse_busy(&mut self, index: usize, uid: u32, unique: u64, errno: Errno) {
        tracing::debug!(
            qid = self.qid,
            uid,
            "a request that waits, refused: {errno}"
        );
        pfmd_device::logging::once(
            "fuse-ring-busy",
            "a request that waits found its CPU's FUSE queue holding all it may for its user \
             (or all but one entry): answered EAGAIN (EBUSY for an open); the caller may retry",
        );
        self.commit(index, &wire::reply_error(unique, errno));
    }

    /// Puts `reply` into entry `index` and hands the entry back to the
    /// kernel with COMMIT_AND_FETCH.
    fn commit(&mut self, index: usize, reply: &[u8]) {
        let Some((header, payload)) = self.entries.buffers_mut(index) else {
            tracing::error!(
                qid = self.qid,
                index,
                "a reply for an entry the kernel holds"
            );
            return;
        };
        let commit_id = ring::commit_id(header);
        if let Err(e) = ring::reply_into(reply, header, payload) {
            tracing::error!(qid = self.qid, "{e}");
            ring::reply_into(&wire::reply_error(commit_id, Errno::EIO), header, payload)
                .expect("a bare header fits");
        }
        let sqe = ring::command(
            self.fd,
            FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
            self.qid,
            commit_id,
            self.entries.lend(index),
            index as u64,
        );
        // SAFETY: as for REGISTER; the kernel holds the entry again.
        unsafe { self.ring.submission().push(&sqe) }.expect("one SQE per entry at most");
    }
}
