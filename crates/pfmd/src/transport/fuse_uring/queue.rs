//! One io_uring serving one FUSE queue, on a thread pinned to the queue's
//! CPU: REGISTER every entry, then answer each completion (a request) with
//! COMMIT_AND_FETCH, which returns the reply and re-arms the entry in one
//! SQE. The only `unsafe` here is handing buffers to the kernel and reading
//! them back when it is done with them.
//!
//! The thread never waits for anything but its ring. An OPEN that must wait
//! for its own process's RELEASE keeps its entry (the kernel sees the
//! request in progress) and goes to the open waiter; the answer comes back
//! through the queue's [`Mailbox`], whose eventfd is polled by the ring, and
//! is committed from this thread. At most all entries but one wait so, so a
//! queue always has an entry for the RELEASE itself.

use super::FuseUringError;
use super::abi::*;
use super::fs::{Answer, Filesystem, opened_reply};
use super::ring;
use crate::device::{DeviceError, FileId};
use crate::transport::cuse::wire;
use crate::transport::open_waiter::{OpenReply, OpenWaiter};
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

/// Answers that other threads produced for entries of this queue.
pub struct Mailbox {
    event: EventFd,
    replies: Mutex<Vec<(usize, Vec<u8>)>>,
}

impl Mailbox {
    fn new() -> io::Result<Mailbox> {
        Ok(Mailbox {
            event: EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?,
            replies: Mutex::new(Vec::new()),
        })
    }

    /// Queues `reply` for entry `index` and wakes the ring.
    fn post(&self, index: usize, reply: Vec<u8>) {
        self.replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((index, reply));
        if let Err(e) = self.event.write(1) {
            tracing::error!("waking a FUSE ring queue: {e}");
        }
    }

    fn take(&self) -> Vec<(usize, Vec<u8>)> {
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
        self.mailbox.post(self.index, opened_reply(self.unique, id));
    }
    fn refused(self, error: &DeviceError) {
        self.mailbox
            .post(self.index, wire::reply_error(self.unique, error.errno()));
    }
}

/// One entry's buffers, shared with the kernel from REGISTER or
/// COMMIT_AND_FETCH until that command completes; reached only through raw
/// pointers, and only while the kernel does not hold them.
struct Entry {
    header: *mut FuseUringReqHeader,
    payload: *mut [u8],
    /// `iov[0]` → header, `iov[1]` → payload: what `sqe->addr` points at.
    iovecs: *mut [libc::iovec; 2],
}

impl Entry {
    fn new(payload_len: usize) -> Entry {
        let header = Box::into_raw(Box::new(FuseUringReqHeader::default()));
        let payload = Box::into_raw(vec![0u8; payload_len].into_boxed_slice());
        let iovecs = Box::into_raw(Box::new([
            libc::iovec {
                iov_base: header.cast(),
                iov_len: size_of::<FuseUringReqHeader>(),
            },
            libc::iovec {
                iov_base: payload.cast(),
                iov_len: payload_len,
            },
        ]));
        Entry {
            header,
            payload,
            iovecs,
        }
    }

    /// Frees the buffers.
    ///
    /// # Safety
    /// The kernel must not hold the entry: never registered, or its last
    /// command completed without re-arming it.
    unsafe fn free(self) {
        // SAFETY: the pointers came from Box::into_raw in `new` and are
        // freed once; the caller guarantees the kernel is done with them.
        unsafe {
            drop(Box::from_raw(self.header));
            drop(Box::from_raw(self.payload));
            drop(Box::from_raw(self.iovecs));
        }
    }
}

/// What one ring thread shares with the rest of the transport.
pub struct Shared {
    pub dev: Arc<File>,
    pub fs: Arc<Filesystem>,
    pub waiter: OpenWaiter<RingReply>,
}

/// Serves one ring until the connection ends. Reports on `ready` once its
/// entries are registered (or why they are not).
pub fn serve(shared: Shared, spec: QueueSpec, ready: Sender<Result<(), FuseUringError>>) {
    let fail = |what: &str, source: io::Error| FuseUringError::Queue {
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
            return;
        }
    }
    let mailbox = match Mailbox::new() {
        Ok(mailbox) => Arc::new(mailbox),
        Err(e) => {
            let _ = ready.send(Err(fail("eventfd", e)));
            return;
        }
    };
    let mut ring = match IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build((spec.entries + 1).next_power_of_two() as u32)
    {
        Ok(ring) => ring,
        Err(e) => {
            let _ = ready.send(Err(fail("io_uring_setup", e)));
            return;
        }
    };
    let fd = shared.dev.as_raw_fd();
    let entries: Vec<Entry> = (0..spec.entries)
        .map(|_| Entry::new(super::conn::RING_PAYLOAD))
        .collect();
    for (index, entry) in entries.iter().enumerate() {
        let sqe = ring::command(
            fd,
            FUSE_IO_URING_CMD_REGISTER,
            spec.qid,
            0,
            entry.iovecs as u64,
            index as u64,
        );
        // SAFETY: the SQE points at the entry's iovecs and through them its
        // buffers, which stay allocated until the kernel gives the entry
        // back (a completion with an error), or forever.
        unsafe { ring.submission().push(&sqe) }.expect("the ring has a slot per entry");
    }
    // REGISTER is issued within the submit; a refusal completes at once,
    // success only when a request arrives.
    let refused = ring
        .submit()
        .map_err(|e| fail("submitting REGISTER", e))
        .and_then(|_| match ring.completion().find(|c| c.result() < 0) {
            Some(c) => Err(fail(
                "FUSE_IO_URING_CMD_REGISTER",
                io::Error::from_raw_os_error(-c.result()),
            )),
            None => Ok(()),
        });
    if let Err(e) = refused {
        let _ = ready.send(Err(e));
        // Some entries may be registered: the kernel may still write them.
        std::mem::forget(entries);
        return;
    }
    let _ = ready.send(Ok(()));
    tracing::debug!(qid = spec.qid, cpu = spec.cpu, "FUSE ring queue registered");
    arm_wake(&mut ring, &mailbox);

    let mut queue = Queue {
        ring,
        fd,
        qid: spec.qid,
        entries,
        request: Vec::with_capacity(4096),
        deferred: 0,
    };
    // Entries the kernel holds or whose answer is on its way here.
    let mut live = queue.entries.len();
    while live > 0 {
        match queue.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => continue,
            Err(e) => {
                tracing::error!(qid = spec.qid, "io_uring_enter: {e}");
                std::mem::forget(queue.entries);
                return;
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
                for (index, reply) in mailbox.take() {
                    queue.deferred -= 1;
                    queue.commit(index, &reply);
                }
                arm_wake(&mut queue.ring, &mailbox);
                continue;
            }
            let index = tag as usize;
            if result < 0 {
                // ENOTCONN: unmounted; the kernel has let go of the entry.
                if result != -libc::ENOTCONN {
                    tracing::warn!(
                        qid = spec.qid,
                        "FUSE ring entry ended: {}",
                        io::Error::from_raw_os_error(-result)
                    );
                }
                live -= 1;
                continue;
            }
            queue.serve_entry(index, &shared, &mailbox);
        }
    }
    tracing::debug!(qid = spec.qid, "FUSE ring queue finished");
    for entry in queue.entries {
        // SAFETY: every command completed with an error and none was
        // re-armed (no answer was waiting either: `live` counted those):
        // the kernel holds no entry.
        unsafe { entry.free() };
    }
}

/// (Re)arms the one-shot poll on the mailbox's eventfd.
fn arm_wake(ring: &mut IoUring<squeue::Entry128, cqueue::Entry>, mailbox: &Mailbox) {
    let sqe: squeue::Entry128 = opcode::PollAdd::new(
        types::Fd(mailbox.event.as_fd().as_raw_fd()),
        libc::POLLIN as u32,
    )
    .build()
    .user_data(WAKE)
    .into();
    // SAFETY: a poll names no memory of ours; the eventfd lives in the
    // mailbox, which outlives the ring (the ring is dropped first).
    unsafe { ring.submission().push(&sqe) }.expect("the ring has a slot for the poll");
}

struct Queue {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    fd: i32,
    qid: u16,
    entries: Vec<Entry>,
    request: Vec<u8>,
    /// Entries whose answer the open waiter will post.
    deferred: usize,
}

impl Queue {
    /// Answers the request the kernel put in entry `index`.
    fn serve_entry(&mut self, index: usize, shared: &Shared, mailbox: &Arc<Mailbox>) {
        let entry = &self.entries[index];
        // SAFETY: the entry's command completed, so until we submit it
        // again the kernel neither reads nor writes its buffers, and
        // nothing else in this process refers to them.
        let (header, payload) = unsafe { (&*entry.header, &*entry.payload) };
        let commit_id = ring::commit_id(header);
        let reply = match ring::request_into(header, payload, &mut self.request) {
            Ok(()) => match shared.fs.answer(&self.request) {
                Answer::Reply(reply) => reply,
                // FORGET and INTERRUPT never come this way (the kernel
                // keeps them on the classic channel); the entry must
                // return anyway.
                Answer::Nothing => wire::reply_error(commit_id, Errno::ENOSYS),
                Answer::Later { unique, open } if self.deferred + 1 < self.entries.len() => {
                    self.deferred += 1;
                    let mailbox = Arc::clone(mailbox);
                    shared.waiter.wait(
                        open,
                        RingReply {
                            mailbox,
                            index,
                            unique,
                        },
                    );
                    return;
                }
                Answer::Later { unique, open } => wire::reply_error(unique, open.error().errno()),
            },
            Err(e) => {
                tracing::error!(qid = self.qid, "{e}");
                wire::reply_error(commit_id, Errno::EIO)
            }
        };
        self.commit(index, &reply);
    }

    /// Puts `reply` into entry `index` and hands the entry back to the
    /// kernel with COMMIT_AND_FETCH.
    fn commit(&mut self, index: usize, reply: &[u8]) {
        let entry = &self.entries[index];
        // SAFETY: the kernel does not hold the entry (its command
        // completed and it has not been re-armed since), and only this
        // thread touches its buffers.
        let (header, payload) = unsafe { (&mut *entry.header, &mut *entry.payload) };
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
            entry.iovecs as u64,
            index as u64,
        );
        // SAFETY: as for REGISTER; the kernel holds the entry again.
        unsafe { self.ring.submission().push(&sqe) }.expect("one SQE per entry at most");
    }
}
