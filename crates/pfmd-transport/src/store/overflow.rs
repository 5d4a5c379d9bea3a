//! The classic link's overflow, on pfmd's side. Every classic reader hands
//! its stores to the helper over one socket, without waiting: a reader must
//! never wait for the helper. When the socket is full (the helper takes
//! stores off it more slowly than callers make them: hundreds of threads in
//! pointer ioctls at once), a store goes here instead, and the link's own
//! sender thread sends it when the socket has room. Users take turns, one
//! store each, so one user's flood delays another's store by a store per
//! user, not by the flood; past [`WAITING_BYTES_PER_USER`] of a user's
//! stores here (or [`WAITING_BYTES_TOTAL`] over every user) a store is
//! `EAGAIN`, for that user only.

use super::quota::{WAITING_BYTES_PER_USER, WAITING_BYTES_TOTAL};
use nix::errno::Errno;
use nix::sys::socket::MsgFlags;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};

#[derive(Default)]
struct State {
    /// Each user's stores, in order.
    stores: HashMap<u32, VecDeque<Vec<u8>>>,
    /// Users with stores here, in turn.
    turns: VecDeque<u32>,
    /// Bytes here or being sent, by user and in all.
    user_bytes: HashMap<u32, usize>,
    bytes: usize,
    closed: bool,
}

impl State {
    fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// The next user's first store.
    fn take(&mut self) -> Option<(u32, Vec<u8>)> {
        let uid = self.turns.pop_front()?;
        let queue = self.stores.get_mut(&uid)?;
        let message = queue.pop_front()?;
        if queue.is_empty() {
            self.stores.remove(&uid);
        } else {
            self.turns.push_back(uid);
        }
        Some((uid, message))
    }

    fn sent(&mut self, uid: u32, len: usize) {
        self.bytes -= len;
        if let Some(bytes) = self.user_bytes.get_mut(&uid) {
            *bytes -= len;
            if *bytes == 0 {
                self.user_bytes.remove(&uid);
            }
        }
    }
}

pub struct Overflow {
    sock: OwnedFd,
    state: Mutex<State>,
    ready: Condvar,
    per_user_bytes: usize,
    total_bytes: usize,
}

impl Overflow {
    /// The overflow of the link `sock`, and its sender thread.
    pub fn start(sock: OwnedFd) -> std::io::Result<Arc<Overflow>> {
        let overflow = Arc::new(Overflow::new(
            sock,
            WAITING_BYTES_PER_USER,
            WAITING_BYTES_TOTAL,
        ));
        let sender = Arc::clone(&overflow);
        std::thread::Builder::new()
            .name("pfm-store-send".into())
            .spawn(move || sender.send_in_turn())?;
        Ok(overflow)
    }

    fn new(sock: OwnedFd, per_user_bytes: usize, total_bytes: usize) -> Overflow {
        Overflow {
            sock,
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            per_user_bytes,
            total_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `message` (a store of `uid`) now if the socket takes it and
    /// nothing waits here, else keeps it for the sender thread; `EAGAIN`
    /// past the bytes `uid` may have here, `EIO` when the helper is gone.
    pub fn submit(&self, uid: u32, message: Vec<u8>) -> Result<(), Errno> {
        let mut guard = self.lock();
        let state = &mut *guard;
        if state.is_empty() {
            match send(&self.sock, &message, MsgFlags::MSG_DONTWAIT) {
                Ok(()) => return Ok(()),
                Err(Errno::EAGAIN) => {}
                Err(e) => {
                    tracing::error!("handing a store to the store helper: {e}");
                    return Err(Errno::EIO);
                }
            }
        }
        let len = message.len();
        let user_bytes = state.user_bytes.get(&uid).copied().unwrap_or(0);
        if user_bytes + len > self.per_user_bytes || state.bytes + len > self.total_bytes {
            return Err(Errno::EAGAIN);
        }
        *state.user_bytes.entry(uid).or_default() += len;
        state.bytes += len;
        let queue = state.stores.entry(uid).or_default();
        if queue.is_empty() {
            state.turns.push_back(uid);
        }
        queue.push_back(message);
        self.ready.notify_one();
        Ok(())
    }

    /// The sender thread: sends what waits here, users in turn, waiting for
    /// room on the socket, until the link is dropped or the helper is gone.
    fn send_in_turn(&self) {
        loop {
            let (uid, message) = {
                let mut state = self.lock();
                loop {
                    if state.closed {
                        return;
                    }
                    if let Some(next) = state.take() {
                        break next;
                    }
                    state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
                }
            };
            let sent = send(&self.sock, &message, MsgFlags::empty());
            self.lock().sent(uid, message.len());
            if let Err(e) = sent {
                // The helper left: pfmd is stopping, or its watcher ends the
                // daemon (docs/device.md §8).
                tracing::debug!("store helper link: {e}");
                return;
            }
        }
    }

    /// Stops the sender thread (the link is being dropped).
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Bytes waiting here (a test reads it).
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

fn send(sock: &OwnedFd, message: &[u8], flags: MsgFlags) -> Result<(), Errno> {
    loop {
        match nix::sys::socket::send(sock.as_raw_fd(), message, flags | MsgFlags::MSG_NOSIGNAL) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        super::super::seqpacket_pair().unwrap()
    }

    fn recv(sock: &OwnedFd) -> Vec<u8> {
        let mut buf = vec![0u8; 64];
        let n = nix::sys::socket::recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty()).unwrap();
        buf.truncate(n);
        buf
    }

    /// Fills the socket: sends until the kernel says it is full.
    fn fill(sock: &OwnedFd) -> usize {
        let mut sent = 0;
        while send(sock, &[0xff], MsgFlags::MSG_DONTWAIT).is_ok() {
            sent += 1;
        }
        sent
    }

    #[test]
    fn a_full_link_keeps_stores_and_sends_users_in_turn() {
        let (ours, theirs) = pair();
        let overflow = Overflow::new(ours, 100, 1000);
        overflow.submit(7, vec![1]).unwrap();
        assert_eq!(recv(&theirs), vec![1], "an empty overflow sends at once");
        let filled = fill(&overflow.sock);
        // User 7 floods; user 8 comes after.
        for i in 0..5 {
            overflow.submit(7, vec![70 + i]).unwrap();
        }
        overflow.submit(8, vec![80]).unwrap();
        overflow.submit(8, vec![81]).unwrap();
        assert_eq!(overflow.bytes(), 7);
        let sender = Arc::new(overflow);
        let thread = {
            let sender = Arc::clone(&sender);
            std::thread::spawn(move || sender.send_in_turn())
        };
        let mut got = Vec::new();
        for _ in 0..filled + 7 {
            let m = recv(&theirs);
            if m != [0xff] {
                got.push(m[0]);
            }
        }
        assert_eq!(got, vec![70, 80, 71, 81, 72, 73, 74], "users take turns");
        sender.close();
        thread.join().unwrap();
        assert_eq!(sender.bytes(), 0);
    }

    #[test]
    fn a_user_past_its_bytes_gets_eagain_alone() {
        let (ours, _theirs) = pair();
        let overflow = Overflow::new(ours, 10, 15);
        fill(&overflow.sock);
        overflow.submit(7, vec![0; 8]).unwrap();
        assert_eq!(overflow.submit(7, vec![0; 3]), Err(Errno::EAGAIN));
        overflow.submit(8, vec![0; 5]).unwrap();
        assert_eq!(overflow.submit(9, vec![0; 5]), Err(Errno::EAGAIN), "in all");
        overflow.submit(7, vec![0; 2]).unwrap();
    }
}
