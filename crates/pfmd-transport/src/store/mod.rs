//! Stores into caller memory for the FUSE channels, off every serving
//! thread and out of the daemon's process.
//!
//! A FUSE file's ioctls are restricted, so the kernel cannot copy a pointer
//! ioctl's array (`*GETCNT`, `*READCNTRS`, `PCNTGETIPLHIS`) to the caller:
//! pfmd writes it with `process_vm_writev`. That call faults the caller's
//! page in on the writing thread, and a page of a file on the caller's own
//! FUSE filesystem faults in when that filesystem answers, or never (the
//! kernel's wait for a FUSE reply the server has read is uninterruptible).
//! So no serving thread writes: the channel hands the store to the **store
//! helper**, a child process (`pfmd` re-executed), and goes on serving; the
//! helper's answer comes back on the channel's [`StoreLink`] and the reply
//! goes out then.
//!
//! Why a process and not a thread: a thread stuck in such a fault cannot be
//! killed, and a process whose thread cannot die never exits; the daemon
//! must end on SIGTERM whatever a caller did. A stuck helper thread keeps
//! only the helper alive, and it leaves as soon as the page arrives (its
//! links are closed and it has `PR_SET_PDEATHSIG`).
//!
//! Bounds (docs/device.md §8): each link is served by helper threads, one
//! more started whenever the last idle one takes a store, so a stuck store
//! holds its own thread only (a thread that finds [`SPARE_THREADS`] idle
//! after its store leaves); a user has at most [`STORES_PER_USER_PER_CPU`]
//! stores in flight on each ring queue's link, and as many per CPU on the
//! classic readers' link, which serves every CPU, and [`USER_STORES_PER_CPU`]
//! per CPU of the system in all, 8 at least; the helper runs at most
//! [`HELPER_THREADS`] threads, or [`HELPER_THREADS_PER_CPU`] per CPU where
//! that is more, so one user's stuck stores hold a quarter of them at most.
//! Counted per link first, so a user with one caller per CPU is never held
//! for callers on other CPUs. A store past either bound waits for that
//! user's earlier ones ([`quota`]) and takes no thread; only past the bytes
//! a user may have waiting, or after [`WAIT_AT_MOST`], is it `EAGAIN`. A
//! store that faults is `EFAULT`, as a failed `copyout`.
//!
//! A caller killed while its store hangs would never end: its thread waits
//! for our reply uninterruptibly once we have read the request. So a
//! watchdog in the helper answers `EINTR` for a store held or waiting over
//! [`WATCH_EVERY`] whose thread has `SIGKILL` pending (or is gone), and the
//! store's own answer, if its page ever arrives, is dropped. A store that
//! waited [`WAIT_AT_MOST`] behind its user's stuck ones is `EAGAIN`.

mod overflow;
mod quota;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};
use quota::{Admission, LinkQuota, Quota};
use std::collections::HashMap;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The hidden first argument that makes `pfmd` the store helper.
pub const HELPER_ARG: &str = "--store-helper";
/// The descriptor the helper finds its control socket on.
const CONTROL_FD: RawFd = 3;
/// Stores one user may have in flight at once on one CPU's link (the
/// classic link: this many per CPU); past it, a store waits.
pub const STORES_PER_USER_PER_CPU: usize = 4;
/// Stores one user may have in flight in all, per CPU of the system (a
/// caller per CPU, with room to spare), and at least
/// [`USER_STORES_AT_LEAST`]; past it, a store waits.
pub const USER_STORES_PER_CPU: usize = 2;
pub const USER_STORES_AT_LEAST: usize = 8;

/// A user's stores in flight at once on a link serving `link_cpus` CPUs
/// (a ring queue's: 1; the classic readers': every configured CPU).
pub fn per_link_quota(link_cpus: usize) -> usize {
    STORES_PER_USER_PER_CPU * link_cpus
}

/// A user's stores in flight at once over every link, on a system of
/// `cpus` configured CPUs.
pub fn in_all_quota(cpus: usize) -> usize {
    USER_STORES_AT_LEAST.max(USER_STORES_PER_CPU * cpus)
}

/// A user's stores the helper makes at once through one link serving
/// `link_cpus` of the system's `cpus`; the user's further stores there
/// wait (tests/hostile.rs reads it).
pub fn made_at_once(link_cpus: usize, cpus: usize) -> usize {
    per_link_quota(link_cpus).min(in_all_quota(cpus))
}
/// Threads the helper runs at most (each a store in flight, or idle)...
pub const HELPER_THREADS: usize = 512;
/// ... or this many per CPU of the system, where that is more.
pub const HELPER_THREADS_PER_CPU: usize = 8;
/// The largest message on a link: a store of the largest array and a reply.
const MAX_MESSAGE: usize = 256 * 1024;
/// Descriptors one link request carries: the link and its reply files
/// (the kernel's SCM_MAX_FD).
const MAX_LINK_FDS: usize = 253;
/// Idle threads a link keeps (past it, a thread that finishes a store
/// leaves).
const SPARE_THREADS: usize = 2;
/// Helper threads need little stack: a message buffer lives on the heap.
const THREAD_STACK: usize = 64 * 1024;
/// How often the watchdog looks for stores of killed callers, and how long
/// a store is held before it counts (a store takes microseconds).
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a store waits behind its user's earlier ones before it is
/// answered `EAGAIN`: those are stuck (a store takes microseconds, and a
/// thousand threads' stores wait milliseconds), and the caller may be
/// another program of the same user.
const WAIT_AT_MOST: std::time::Duration = std::time::Duration::from_secs(2);

/// One store: `bytes` at `addr` in thread `tid` of user `uid`. `tag` and
/// `unique` say what to answer when it is done; `reply` is that answer on
/// success, carried through the helper so that neither side keeps state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreJob {
    pub tag: u64,
    pub unique: u64,
    pub uid: u32,
    pub tid: i32,
    pub addr: u64,
    pub bytes: Vec<u8>,
    pub reply: Vec<u8>,
}

/// A finished store: `Ok` with the reply to send, or the errno to answer
/// `unique` with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreDone {
    pub tag: u64,
    pub unique: u64,
    pub result: Result<Vec<u8>, Errno>,
}

const JOB_HEAD: usize = 8 + 8 + 4 + 4 + 8 + 4 + 4;
const DONE_HEAD: usize = 8 + 8 + 4;

impl StoreJob {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(JOB_HEAD + self.bytes.len() + self.reply.len());
        out.extend_from_slice(&self.tag.to_ne_bytes());
        out.extend_from_slice(&self.unique.to_ne_bytes());
        out.extend_from_slice(&self.uid.to_ne_bytes());
        out.extend_from_slice(&self.tid.to_ne_bytes());
        out.extend_from_slice(&self.addr.to_ne_bytes());
        out.extend_from_slice(&(self.bytes.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(self.reply.len() as u32).to_ne_bytes());
        out.extend_from_slice(&self.bytes);
        out.extend_from_slice(&self.reply);
        out
    }

    /// The FUSE `unique` a job's message carries.
    pub fn unique_of(message: &[u8]) -> Option<u64> {
        Reader(message.get(8..)?).u64()
    }

    fn decode(raw: &[u8]) -> Option<StoreJob> {
        let mut r = Reader(raw);
        let (tag, unique, uid, tid, addr) = (r.u64()?, r.u64()?, r.u32()?, r.u32()?, r.u64()?);
        let (len, reply_len) = (r.u32()? as usize, r.u32()? as usize);
        let bytes = r.take(len)?.to_vec();
        let reply = r.take(reply_len)?.to_vec();
        r.0.is_empty().then_some(StoreJob {
            tag,
            unique,
            uid,
            tid: tid as i32,
            addr,
            bytes,
            reply,
        })
    }
}

impl StoreDone {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DONE_HEAD + 64);
        out.extend_from_slice(&self.tag.to_ne_bytes());
        out.extend_from_slice(&self.unique.to_ne_bytes());
        match &self.result {
            Ok(reply) => {
                out.extend_from_slice(&0i32.to_ne_bytes());
                out.extend_from_slice(reply);
            }
            Err(errno) => out.extend_from_slice(&(*errno as i32).to_ne_bytes()),
        }
        out
    }

    fn decode(raw: &[u8]) -> Option<StoreDone> {
        let mut r = Reader(raw);
        let (tag, unique, errno) = (r.u64()?, r.u64()?, r.u32()? as i32);
        let result = match errno {
            0 => Ok(r.0.to_vec()),
            e => Err(Errno::from_raw(e)),
        };
        Some(StoreDone {
            tag,
            unique,
            result,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.take(8)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.take(4)?.try_into().ok()?))
    }
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)
}

/// The running helper process; dropping it closes its control socket, and
/// the helper exits once its links are closed too.
pub struct StoreHelper {
    control: OwnedFd,
    /// Until [`StoreHelper::watch`] takes it.
    child: Option<Child>,
}

impl StoreHelper {
    /// Starts the helper: this executable again, with [`HELPER_ARG`].
    pub fn spawn() -> io::Result<StoreHelper> {
        let (control, theirs) = seqpacket_pair()?;
        let theirs_fd = theirs.as_raw_fd();
        let mut command = Command::new("/proc/self/exe");
        command
            .arg0("pfmd")
            .arg(HELPER_ARG)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: between fork and exec the closure only calls dup2, which
        // is async-signal-safe; it touches no memory of the parent.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(theirs_fd, CONTROL_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn()?;
        drop(theirs);
        tracing::debug!(pid = child.id(), "store helper started");
        Ok(StoreHelper {
            control,
            child: Some(child),
        })
    }

    /// Runs `on_exit` on a thread of its own when the helper process ends
    /// (and reaps it): after pfmd stopped it, or because it died.
    pub fn watch(
        &mut self,
        on_exit: impl FnOnce(std::process::ExitStatus) + Send + 'static,
    ) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        std::thread::Builder::new()
            .name("pfm-store-watch".into())
            .spawn(move || {
                if let Ok(status) = child.wait() {
                    on_exit(status);
                }
            })
            .map(drop)
    }

    /// A new link to the helper, its threads pinned to `cpu` when given
    /// (where the link's serving thread runs: the hand-over then stays on
    /// that CPU). With `replies` (the classic channel's `/dev/fuse`
    /// clones), the helper writes each reply itself to the clone the job's
    /// tag names, and nothing comes back on the link: a hand-over fewer.
    pub fn link(&self, cpu: Option<usize>) -> io::Result<StoreLink> {
        Ok(StoreLink {
            sock: self.connect(cpu, &[])?,
        })
    }

    /// The classic readers' link: the helper writes each reply itself to
    /// the `/dev/fuse` clone the job's tag names, and stores go out through
    /// an [`overflow::Overflow`] (with its sender thread), as the readers
    /// are not bounded per user before the link.
    pub fn classic_link(&self, replies: &[BorrowedFd<'_>]) -> io::Result<ClassicLink> {
        let sock = self.connect(None, replies)?;
        Ok(ClassicLink {
            overflow: overflow::Overflow::start(sock)?,
        })
    }

    /// Hands the helper a new link (its threads pinned to `cpu` when given)
    /// with its reply files; our end of it.
    fn connect(&self, cpu: Option<usize>, replies: &[BorrowedFd<'_>]) -> io::Result<OwnedFd> {
        if replies.len() >= MAX_LINK_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a store link takes at most {} reply files",
                    MAX_LINK_FDS - 1
                ),
            ));
        }
        let (ours, theirs) = seqpacket_pair()?;
        let cpu = cpu.map_or(-1i64, |c| c as i64).to_ne_bytes();
        let fds: Vec<RawFd> = std::iter::once(theirs.as_raw_fd())
            .chain(replies.iter().map(AsRawFd::as_raw_fd))
            .collect();
        sendmsg::<()>(
            self.control.as_raw_fd(),
            &[IoSlice::new(&cpu)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, format!("store helper: {e}")))?;
        Ok(ours)
    }
}

impl Drop for StoreHelper {
    fn drop(&mut self) {
        // Closing the control socket tells the helper to leave once its
        // links are closed; a thread stuck in a caller's page keeps it
        // (and only it) until that page arrives. Reap it if it is gone.
        if let Some(child) = &mut self.child
            && let Ok(None) = child.try_wait()
        {
            tracing::debug!(pid = child.id(), "store helper left to exit on its own");
        }
    }
}

/// A ring queue's link to the helper: the ring sends stores
/// ([`StoreLink::message`]) and receives results ([`StoreLink::result_from`])
/// itself.
pub struct StoreLink {
    sock: OwnedFd,
}

/// The classic readers' link to the helper ([`StoreHelper::classic_link`]).
pub struct ClassicLink {
    overflow: Arc<overflow::Overflow>,
}

impl ClassicLink {
    /// Hands `job` to the helper without waiting: the errno to answer with
    /// when it cannot (`EAGAIN` past the user's share of the overflow, `EIO`
    /// when the helper is gone).
    pub fn submit(&self, job: &StoreJob) -> Result<(), Errno> {
        self.overflow.submit(job.uid, StoreLink::message(job)?)
    }
}

impl Drop for ClassicLink {
    fn drop(&mut self) {
        self.overflow.close();
    }
}

impl StoreLink {
    /// A finished store as the helper sent it on a link.
    pub fn result_from(message: &[u8]) -> io::Result<StoreDone> {
        match message {
            [] => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the store helper closed the link",
            )),
            _ => StoreDone::decode(message).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, "malformed store result")
            }),
        }
    }

    /// The message that hands `job` to the helper, for a channel that sends
    /// it itself (a ring); `EIO` when no link message can carry it.
    pub fn message(job: &StoreJob) -> Result<Vec<u8>, Errno> {
        let message = job.encode();
        if message.len() > MAX_MESSAGE {
            tracing::error!(bytes = message.len(), "a store larger than a link message");
            return Err(Errno::EIO);
        }
        Ok(message)
    }

    /// The buffer a finished store's message fits in.
    pub fn result_buffer() -> Vec<u8> {
        vec![0u8; MAX_MESSAGE]
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

// ---- the helper process -------------------------------------------------

/// What the helper's threads share.
struct Helper {
    threads: AtomicUsize,
    /// Threads started over the helper's life (a test reads it).
    started: AtomicUsize,
    max_threads: usize,
    /// Every user's stores in flight and waiting, over all links.
    quota: Quota<(Arc<Link>, StoreJob)>,
    /// Every link, for the watchdog.
    links: Mutex<Vec<Arc<Link>>>,
}

impl Helper {
    fn new() -> Helper {
        let cpus = configured_cpus();
        Helper {
            threads: AtomicUsize::new(0),
            started: AtomicUsize::new(0),
            max_threads: HELPER_THREADS.max(HELPER_THREADS_PER_CPU * cpus),
            quota: Quota::new(in_all_quota(cpus)),
            links: Mutex::new(Vec::new()),
        }
    }
}

/// A store being made: what its answer needs, and whose it is.
struct HeldStore {
    tag: u64,
    unique: u64,
    tid: i32,
    since: std::time::Instant,
}

/// A link's stores being made. Whoever takes a store out answers it: its
/// thread when the store is made, or the watchdog when its caller is being
/// killed; never both (a ring entry answered twice would answer the
/// request that took the entry since).
#[derive(Default)]
struct Held {
    stores: Mutex<HashMap<u64, HeldStore>>,
    next: std::sync::atomic::AtomicU64,
}

impl Held {
    fn start(&self, job: &StoreJob) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let store = HeldStore {
            tag: job.tag,
            unique: job.unique,
            tid: job.tid,
            since: std::time::Instant::now(),
        };
        self.lock().insert(id, store);
        id
    }

    /// True when the caller of store `id` is still to be answered.
    fn finish(&self, id: u64) -> bool {
        self.lock().remove(&id).is_some()
    }

    /// Takes out the stores held over `age` whose thread is dying.
    fn take_dying(&self, age: std::time::Duration) -> Vec<HeldStore> {
        let old: Vec<(u64, i32)> = self
            .lock()
            .iter()
            .filter(|(_, s)| s.since.elapsed() >= age)
            .map(|(id, s)| (*id, s.tid))
            .collect();
        // /proc is read unlocked: the stores' threads finish meanwhile.
        let dying: Vec<u64> = old
            .into_iter()
            .filter(|(_, tid)| thread_dying(*tid))
            .map(|(id, _)| id)
            .collect();
        let mut stores = self.lock();
        dying.iter().filter_map(|id| stores.remove(id)).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, HeldStore>> {
        self.stores.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `SIGKILL` is pending for thread `tid` (a kill, or its process exiting),
/// or the thread is gone. Any other failure to read `/proc` says no: an
/// answer before the store is made would let it land after the call
/// returned, in memory the caller may use for something else by then.
fn thread_dying(tid: i32) -> bool {
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    match procfs::process::Process::new(tid).and_then(|p| p.status()) {
        Ok(status) => (status.sigpnd | status.shdpnd) & SIGKILL_BIT != 0,
        Err(procfs::ProcError::NotFound(_)) => true,
        Err(_) => false,
    }
}

/// The watchdog: answers `EINTR` for the held and waiting stores of killed
/// callers, and `EAGAIN` for stores that waited [`WAIT_AT_MOST`].
fn watch_held_stores(helper: &Helper) {
    loop {
        std::thread::sleep(WATCH_EVERY);
        let links = helper
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (link, job) in helper.quota.take_waited(WAIT_AT_MOST) {
            tracing::debug!(
                uid = job.uid,
                "store helper: a store waited {WAIT_AT_MOST:?} behind its user's stuck ones; answered EAGAIN"
            );
            answer(&link, job.tag, job.unique, Err(Errno::EAGAIN));
        }
        for (link, job) in helper.quota.take_dying(WATCH_EVERY, thread_dying) {
            tracing::debug!(
                tid = job.tid,
                "store helper: a waiting store's caller is being killed; answered EINTR"
            );
            answer(&link, job.tag, job.unique, Err(Errno::EINTR));
        }
        for link in links {
            for store in link.held.take_dying(WATCH_EVERY) {
                tracing::debug!(
                    tid = store.tid,
                    "store helper: a held store's caller is being killed; answered EINTR"
                );
                answer(&link, store.tag, store.unique, Err(Errno::EINTR));
            }
        }
    }
}

/// `sysconf(_SC_NPROCESSORS_CONF)`: every CPU the system may bring online.
fn configured_cpus() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF)
        .ok()
        .flatten()
        .map_or(1, |n| n.max(1) as usize)
}

/// Numbers the helper's links.
static NEXT_LINK: AtomicUsize = AtomicUsize::new(0);

/// One link's state in the helper.
struct Link {
    sock: OwnedFd,
    cpu: Option<usize>,
    idle: AtomicUsize,
    /// Where replies go when the helper writes them itself (by tag).
    replies: Vec<OwnedFd>,
    /// Which link this is to the quota, and its stores per user.
    quota: LinkQuota,
    /// Stores being made on this link, for the watchdog (per link: a
    /// lock every store takes stays on the link's CPU).
    held: Held,
}

impl Link {
    fn new(sock: OwnedFd, cpu: Option<usize>, replies: Vec<OwnedFd>) -> Link {
        // A ring queue's link serves one CPU; the classic readers' link
        // serves them all (every CPU the system may bring online).
        let cpus = if replies.is_empty() {
            1
        } else {
            configured_cpus()
        };
        Link {
            sock,
            cpu,
            idle: AtomicUsize::new(0),
            replies,
            quota: LinkQuota {
                id: NEXT_LINK.fetch_add(1, Ordering::Relaxed),
                per_user: per_link_quota(cpus),
            },
            held: Held::default(),
        }
    }
}

/// The helper's life (`pfmd --store-helper`): take links from the control
/// socket until pfmd closes it, serve each with threads, then exit.
pub fn helper_main() -> std::process::ExitCode {
    // SAFETY: prctl(PR_SET_PDEATHSIG) and PR_SET_NAME only set this
    // process's attributes; the name is a NUL-terminated static string.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::prctl(libc::PR_SET_NAME, c"pfmd-stores".as_ptr());
    }
    // SAFETY: pfmd dup2'ed the control socket to CONTROL_FD before exec;
    // nothing else in this process owns that descriptor.
    let control = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    let helper = Arc::new(Helper::new());
    let watched = Arc::clone(&helper);
    if let Err(e) = std::thread::Builder::new()
        .name("pfm-store-watch".into())
        .stack_size(THREAD_STACK)
        .spawn(move || watch_held_stores(&watched))
    {
        tracing::error!("store helper: starting the watchdog: {e}");
    }
    loop {
        let mut cpu = [0u8; 8];
        let mut space = nix::cmsg_space!([RawFd; MAX_LINK_FDS]);
        let mut iov = [IoSliceMut::new(&mut cpu)];
        let received = match recvmsg::<()>(
            control.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(message) if message.bytes == 0 => break,
            Ok(message) => message.cmsgs().ok().and_then(|mut c| {
                c.find_map(|m| match m {
                    ControlMessageOwned::ScmRights(fds) => Some(fds),
                    _ => None,
                })
            }),
            Err(Errno::EINTR) => continue,
            Err(e) => {
                tracing::error!("store helper: control socket: {e}");
                break;
            }
        };
        let mut fds = received.unwrap_or_default().into_iter().map(|fd| {
            // SAFETY: the descriptor arrived with SCM_RIGHTS just now and
            // is owned by nothing else.
            unsafe { OwnedFd::from_raw_fd(fd) }
        });
        let Some(sock) = fds.next() else {
            tracing::error!("store helper: a link request without a socket");
            continue;
        };
        let cpu = i64::from_ne_bytes(cpu);
        let link = Arc::new(Link::new(sock, usize::try_from(cpu).ok(), fds.collect()));
        helper
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&link));
        start_thread(&helper, &link);
    }
    // pfmd closed the control socket: it is stopping. Threads blocked on
    // their links end when pfmd's ends close; a thread stuck in a store
    // ends the process when the page arrives (exit_group from here).
    std::process::ExitCode::SUCCESS
}

/// Starts a thread for `link`, counted idle from now: a store sent before
/// it runs waits for it in the link's queue, and must not start another.
fn start_thread(helper: &Arc<Helper>, link: &Arc<Link>) {
    if helper.threads.fetch_add(1, Ordering::SeqCst) >= helper.max_threads {
        helper.threads.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!(
            "store helper: {} threads busy; not starting another",
            helper.max_threads
        );
        return;
    }
    helper.started.fetch_add(1, Ordering::SeqCst);
    link.idle.fetch_add(1, Ordering::SeqCst);
    let (helper_for_thread, link_for_thread) = (Arc::clone(helper), Arc::clone(link));
    let started = std::thread::Builder::new()
        .name("pfm-store".into())
        .stack_size(THREAD_STACK)
        .spawn(move || serve_link(&helper_for_thread, &link_for_thread));
    if let Err(e) = started {
        helper.threads.fetch_sub(1, Ordering::SeqCst);
        link.idle.fetch_sub(1, Ordering::SeqCst);
        tracing::error!("store helper: starting a thread: {e}");
    }
}

/// Counts the calling thread idle on `link`, unless the link has its
/// spares already: `false` then, and the thread leaves. Threads started
/// while stores were stuck thus leave once those finish; two idle threads
/// stay, so that a store taken by one never has to start another (a thread
/// start costs more than the store).
fn count_idle(link: &Link) -> bool {
    if link.idle.load(Ordering::SeqCst) >= SPARE_THREADS {
        return false;
    }
    link.idle.fetch_add(1, Ordering::SeqCst);
    true
}

fn serve_link(helper: &Arc<Helper>, link: &Arc<Link>) {
    if let Some(cpu) = link.cpu {
        let mut set = nix::sched::CpuSet::new();
        if set.set(cpu).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
    let mut buf = vec![0u8; MAX_MESSAGE];
    // Whether this thread is counted in `link.idle` already: from its
    // start (start_thread counts it), and again as soon as its store is
    // made, before its result goes out. The result lets the caller send
    // its next store at once; were the thread counted only back at its
    // recv, that store would find no idle thread and start one for nothing
    // (which leaves again after).
    let mut counted_idle = true;
    loop {
        if !counted_idle && !count_idle(link) {
            break;
        }
        counted_idle = false;
        let received = nix::sys::socket::recv(link.sock.as_raw_fd(), &mut buf, MsgFlags::empty());
        // The last idle thread takes a store: start another, so a store
        // that never finishes holds this thread only.
        if link.idle.fetch_sub(1, Ordering::SeqCst) == 1 {
            start_thread(helper, link);
        }
        let n = match received {
            Ok(0) => break,
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        };
        let Some(job) = StoreJob::decode(&buf[..n]) else {
            tracing::error!("store helper: malformed store request");
            continue;
        };
        // Only the store can hang (a caller's page); what is left is a
        // write that nobody holds up. A store made lets that user's next
        // waiting one go, made here too (on its own link's behalf).
        let mut next = match helper.quota.admit(
            job.uid,
            link.quota,
            job.tid,
            job.bytes.len() + job.reply.len(),
            (Arc::clone(link), job),
        ) {
            Admission::Run(store) => Some(store),
            Admission::Waits => None,
            Admission::Refused((_, job)) => {
                if !answer(link, job.tag, job.unique, Err(Errno::EAGAIN)) {
                    break;
                }
                None
            }
        };
        let mut leaving = false;
        let mut link_gone = false;
        while let Some((on, job)) = next.take() {
            let held = on.held.start(&job);
            let result = store_to_caller(job.tid, job.addr, &job.bytes).map(|()| job.reply);
            next = helper.quota.finish(job.uid, on.quota);
            if next.is_none() {
                leaving = !count_idle(link);
                counted_idle = !leaving;
            }
            // Answered already when the watchdog found the caller killed.
            if on.held.finish(held)
                && !answer(&on, job.tag, job.unique, result)
                && Arc::ptr_eq(&on, link)
            {
                link_gone = true;
            }
        }
        if link_gone {
            if counted_idle {
                link.idle.fetch_sub(1, Ordering::SeqCst);
            }
            break;
        }
        if leaving {
            break;
        }
    }
    helper.threads.fetch_sub(1, Ordering::SeqCst);
}

/// Answers a store: the reply written to `/dev/fuse` (classic) or the
/// result sent back on the link (a ring); false when the link is gone.
fn answer(link: &Link, tag: u64, unique: u64, result: Result<Vec<u8>, Errno>) -> bool {
    if !link.replies.is_empty() {
        reply_directly(&link.replies, tag, unique, result);
        return true;
    }
    let done = StoreDone {
        tag,
        unique,
        result,
    };
    nix::sys::socket::send(
        link.sock.as_raw_fd(),
        &done.encode(),
        MsgFlags::MSG_NOSIGNAL,
    )
    .is_ok()
}

/// Writes a finished store's reply (or its errno) to the `/dev/fuse` clone
/// `tag` names, the one its request was read from.
fn reply_directly(replies: &[OwnedFd], tag: u64, unique: u64, result: Result<Vec<u8>, Errno>) {
    let Some(file) = usize::try_from(tag).ok().and_then(|t| replies.get(t)) else {
        tracing::error!(tag, "store helper: a store for no reply file");
        return;
    };
    let reply = result.unwrap_or_else(|errno| crate::wire::reply_error(unique, errno));
    match nix::unistd::write(file, &reply) {
        // ENOENT: the caller was interrupted and the kernel answered it.
        Ok(_) | Err(Errno::ENOENT | Errno::ENODEV) => {}
        Err(e) => tracing::error!("store helper: writing a FUSE reply: {e}"),
    }
}

/// Writes `bytes` at `addr` in thread `tid`, the only address a caller
/// ever passes us. A failed or short write is `EFAULT`, like `copyout`.
pub fn store_to_caller(tid: i32, addr: u64, bytes: &[u8]) -> Result<(), Errno> {
    use nix::sys::uio::{RemoteIoVec, process_vm_writev};
    if bytes.is_empty() {
        return Ok(());
    }
    let remote = [RemoteIoVec {
        base: usize::try_from(addr).map_err(|_| Errno::EFAULT)?,
        len: bytes.len(),
    }];
    match process_vm_writev(
        nix::unistd::Pid::from_raw(tid),
        &[IoSlice::new(bytes)],
        &remote,
    ) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) | Err(_) => Err(Errno::EFAULT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_and_results_round_trip() {
        let job = StoreJob {
            tag: 3,
            unique: 99,
            uid: 65534,
            tid: 1234,
            addr: 0x7fff_0000_1000,
            bytes: vec![1, 2, 3],
            reply: vec![9; 32],
        };
        assert_eq!(StoreJob::decode(&job.encode()), Some(job.clone()));
        let mut cut = job.encode();
        cut.pop();
        assert_eq!(StoreJob::decode(&cut), None);
        for result in [Ok(vec![5; 32]), Err(Errno::EFAULT), Ok(vec![])] {
            let done = StoreDone {
                tag: 3,
                unique: 99,
                result,
            };
            assert_eq!(StoreDone::decode(&done.encode()), Some(done));
        }
    }

    #[test]
    fn writes_own_memory_and_faults_on_bad_addresses() {
        let tid = nix::unistd::gettid().as_raw();
        let mut target = [0u8; 8];
        store_to_caller(tid, target.as_mut_ptr() as u64, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        assert_eq!(std::hint::black_box(target), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(store_to_caller(tid, 0, &[1]), Err(Errno::EFAULT));
    }

    /// A store of four 1s into `target`, from this thread as user `uid`.
    fn four_ones_into(target: &mut [u8; 4], uid: u32) -> StoreJob {
        StoreJob {
            tag: 0,
            unique: 1,
            uid,
            tid: nix::unistd::gettid().as_raw(),
            addr: target.as_mut_ptr() as u64,
            bytes: vec![1; 4],
            reply: vec![],
        }
    }

    /// A ring queue's link allows a user [`STORES_PER_USER_PER_CPU`]
    /// stores in flight; the classic readers' link, which serves every
    /// CPU, as many per CPU of the system. Over all links a user has at
    /// most two per CPU of the system in flight: its stuck stores hold a
    /// quarter of the helper's threads at most, which grow with the CPUs.
    #[test]
    fn quotas_per_link_and_in_all() {
        let (_ours, theirs) = seqpacket_pair().unwrap();
        // The policy in figures: 4 a user on a ring queue's link; on the
        // classic link 4 per CPU; in all 2 per CPU, 8 at least.
        assert_eq!((per_link_quota(1), per_link_quota(2)), (4, 8));
        assert_eq!(
            (in_all_quota(1), in_all_quota(4), in_all_quota(64)),
            (8, 8, 128)
        );
        assert_eq!((made_at_once(1, 2), made_at_once(2, 2)), (4, 8));
        assert_eq!((made_at_once(1, 64), made_at_once(64, 64)), (4, 128));
        // Links and the helper take theirs from the CPUs they serve.
        let cpus = configured_cpus();
        let ring = Link::new(theirs, Some(0), Vec::new());
        assert_eq!(ring.quota.per_user, per_link_quota(1));
        let (_ours, theirs) = seqpacket_pair().unwrap();
        let (_reply, reply_file) = seqpacket_pair().unwrap();
        let classic = Link::new(theirs, None, vec![reply_file]);
        assert_eq!(classic.quota.per_user, per_link_quota(cpus));
        assert_ne!(ring.quota.id, classic.quota.id);
        let helper = Helper::new();
        assert_eq!(helper.quota.in_all, in_all_quota(cpus));
        assert!(helper.max_threads >= 4 * helper.quota.in_all);
    }

    /// A store past a user's quota waits, taking no thread, until one of
    /// that user's stores finishes, which hands it out with its own link
    /// (tests/hostile.rs runs the whole path against stalled pages).
    #[test]
    fn a_store_past_the_quota_waits_taking_no_thread() {
        let helper = Arc::new(Helper::new());
        let (ours, theirs) = seqpacket_pair().unwrap();
        let link = Arc::new(Link::new(theirs, Some(0), Vec::new()));
        let mut target = [0u8; 4];
        let job = four_ones_into(&mut target, 7);
        // The user's quota on the link is taken, as by stores in flight.
        for _ in 0..link.quota.per_user {
            let in_flight = (Arc::clone(&link), job.clone());
            assert!(matches!(
                helper.quota.admit(7, link.quota, 0, 0, in_flight),
                Admission::Run(_)
            ));
        }
        start_thread(&helper, &link);
        nix::sys::socket::send(ours.as_raw_fd(), &job.encode(), MsgFlags::empty()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while helper.quota.of(7) != (link.quota.per_user, 1) {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                helper.quota.of(7)
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(std::hint::black_box(target), [0; 4]);
        let threads = helper.threads.load(Ordering::SeqCst);
        // One of the stores in flight finishes: the waiting one is handed
        // out, as to the thread that made it.
        let Some((on, waiting)) = helper.quota.finish(7, link.quota) else {
            panic!("the waiting store was not handed out");
        };
        assert!(Arc::ptr_eq(&on, &link));
        assert_eq!(waiting, job);
        assert_eq!(
            helper.threads.load(Ordering::SeqCst),
            threads,
            "no thread waited"
        );
        drop(ours);
    }

    /// Stores one after another (each sent once the last one's result is
    /// back, as one caller's ioctls come) are served by the link's two
    /// threads: a thread counts itself idle before its result lets the
    /// next store come, so no store finds the link without an idle thread
    /// and starts one for nothing (each start touched a new 256 KiB buffer,
    /// and the helper's RSS grew with its malloc arenas).
    #[test]
    fn one_store_after_another_starts_no_thread() {
        let helper = Arc::new(Helper::new());
        let (ours, theirs) = seqpacket_pair().unwrap();
        let link = Arc::new(Link::new(theirs, None, Vec::new()));
        start_thread(&helper, &link);
        let mut target = [0u8; 8];
        let mut result = StoreLink::result_buffer();
        for unique in 0..20_000u64 {
            let job = StoreJob {
                tag: 0,
                unique,
                uid: 7,
                tid: nix::unistd::gettid().as_raw(),
                addr: target.as_mut_ptr() as u64,
                bytes: unique.to_ne_bytes().to_vec(),
                reply: vec![],
            };
            nix::sys::socket::send(ours.as_raw_fd(), &job.encode(), MsgFlags::empty()).unwrap();
            let n =
                nix::sys::socket::recv(ours.as_raw_fd(), &mut result, MsgFlags::empty()).unwrap();
            let done = StoreLink::result_from(&result[..n]).unwrap();
            assert_eq!((done.unique, done.result), (unique, Ok(vec![])));
        }
        assert_eq!(std::hint::black_box(target), 19_999u64.to_ne_bytes());
        // The first thread and the spare it starts when it takes the first
        // store, however the threads are scheduled.
        assert_eq!(helper.started.load(Ordering::SeqCst), 2);
        drop(ours);
    }
}
