//! Requests served off the serving threads. A request on an open whose
//! lock another request holds, or on an open that follows many PME threads
//! (a settings change then opens host events on each thread on each CPU,
//! tens of milliseconds), would hold the thread serving it, and a user who
//! kept as many such requests in flight as there are serving threads would
//! make every other caller wait (docs/device.md §8). The handler answers
//! such a request [`Answer::Later`]; the channel hands it here with how to
//! deliver its answer, and the open's own worker thread serves it, where
//! waiting costs no one else anything. One worker per open serves its
//! requests in order, as the open's lock would; a worker ends once its
//! open is released and its queue is empty, or idle for [`IDLE`].
//!
//! Opens are few (each holds CPUs no other open may hold, so there are at
//! most as many as CPUs), and so are workers; [`MAX_WORKERS`] bounds them
//! all the same (opens closed with requests still queued), past which one
//! shared worker serves the rest.

use crate::device::FileId;
use crate::handler::{Answer, Handler};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a worker with nothing to do lives on.
pub const IDLE: Duration = Duration::from_secs(2);
/// Workers at most; past it, one shared worker serves the rest.
pub const MAX_WORKERS: usize = 64;
/// The key of the shared worker.
const SHARED: FileId = FileId::MAX;

/// How a channel delivers an answer it could not give at once.
pub trait LaterReply: Send + 'static {
    fn deliver(self: Box<Self>, answer: Answer);
}

/// A request to serve later: the open it is for, its `unique`, and its
/// bytes in the classic framing.
#[derive(Debug)]
pub struct LaterRequest {
    pub fh: FileId,
    pub unique: u64,
    pub raw: Vec<u8>,
}

impl LaterRequest {
    /// `EIO`, for a channel given one where it cannot be (a worker's
    /// answer is never another [`Answer::Later`]).
    pub fn unexpected(&self) -> Vec<u8> {
        tracing::error!(file = self.fh, "a deferred request deferred again");
        crate::wire::reply_error(self.unique, nix::errno::Errno::EIO)
    }
}

struct Job {
    handler: Arc<Handler>,
    raw: Vec<u8>,
    reply: Box<dyn LaterReply>,
}

/// The per-open workers, shared by every channel of a transport.
#[derive(Clone, Default)]
pub struct LaterServer {
    workers: Arc<Mutex<HashMap<FileId, Sender<Job>>>>,
}

impl LaterServer {
    /// Serves `request` on its open's worker and delivers the answer
    /// through `reply`. Where no worker can be started, serves it on this
    /// thread (waiting as the request needs).
    pub fn serve(&self, handler: &Arc<Handler>, request: LaterRequest, reply: Box<dyn LaterReply>) {
        let job = Job {
            handler: Arc::clone(handler),
            raw: request.raw,
            reply,
        };
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let key = if workers.contains_key(&request.fh) || workers.len() < MAX_WORKERS {
            request.fh
        } else {
            SHARED
        };
        let job = match workers.get(&key) {
            Some(queue) => match queue.send(job) {
                Ok(()) => return,
                // Its worker died (a bug): a new one takes its place.
                Err(crossbeam_channel::SendError(job)) => job,
            },
            None => job,
        };
        let (queue, jobs) = crossbeam_channel::unbounded();
        let started = std::thread::Builder::new()
            .name(format!("pfmd-open-{key}"))
            .spawn({
                let server = self.clone();
                move || server.work(key, jobs)
            });
        match started {
            Ok(_) => {
                queue.send(job).expect("the worker holds the receiver");
                workers.insert(key, queue);
            }
            Err(e) => {
                drop(workers);
                tracing::warn!("starting a worker for open {key}: {e}; serving here");
                run(job);
            }
        }
    }

    /// Lets the worker of `fh` end once it has served what it was sent:
    /// the open is released, and no request for it comes any more.
    pub fn retire(&self, fh: FileId) {
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh);
    }

    /// Whether the open `fh` has a worker (for tests).
    #[cfg(test)]
    pub fn has_worker(&self, fh: FileId) -> bool {
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&fh)
    }

    /// One open's worker: its requests in order, until it has been idle
    /// for [`IDLE`]. It leaves under the map's lock once its queue is
    /// empty, so a job sent meanwhile starts a new one.
    fn work(&self, key: FileId, jobs: Receiver<Job>) {
        loop {
            match jobs.recv_timeout(IDLE) {
                Ok(job) => run(job),
                Err(RecvTimeoutError::Timeout) => {
                    let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
                    if jobs.is_empty() {
                        workers.remove(&key);
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

fn run(job: Job) {
    let answer = job.handler.answer_waiting(&job.raw);
    job.reply.deliver(answer);
}
