//! How many stores one user may have in flight in the store helper, on one
//! link and over all, and what happens past that: the store **waits**, in
//! the order the user's stores came, and is made by the helper thread that
//! finishes one of that user's earlier stores. A threaded program whose
//! threads all read their counts at once thus sees its calls take a little
//! longer, never `EAGAIN`; a user whose stores are stuck on pages that never
//! arrive holds its own waiting stores (and no helper thread more), until
//! they have waited long enough to be answered `EAGAIN`
//! ([`Quota::take_waited`]). Past [`WAITING_BYTES_PER_USER`] (or
//! [`WAITING_BYTES_TOTAL`] over every user) a store is refused at once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes of stores (arrays and replies) one user may have waiting: room for
/// thousands of count arrays, and for four of the largest message.
pub const WAITING_BYTES_PER_USER: usize = 1024 * 1024;
/// Bytes of stores waiting over every user.
pub const WAITING_BYTES_TOTAL: usize = 64 * 1024 * 1024;
/// A user's waiting stores the watchdog looks at a round (a `/proc` read
/// each); a killed caller's store may wait more rounds behind as many.
pub const DYING_CHECKS_PER_USER: usize = 256;

/// A link as the quota sees it: which one, and how many stores of one user
/// may be in flight on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkQuota {
    pub id: usize,
    pub per_user: usize,
}

/// What to do with a store that came in.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission<T> {
    /// Make it now; it is counted in flight.
    Run(T),
    /// It waits: [`Quota::finish`] hands it out later.
    Waits,
    /// Past every bound: answer `EAGAIN`.
    Refused(T),
}

/// One store waiting.
struct Waiting<T> {
    seq: u64,
    link: LinkQuota,
    bytes: usize,
    tid: i32,
    since: Instant,
    item: T,
}

/// One user's stores.
struct UserStores<T> {
    in_flight: usize,
    /// In flight by link id.
    per_link: HashMap<usize, usize>,
    waiting: VecDeque<Waiting<T>>,
    waiting_bytes: usize,
    /// Where the watchdog's next look at `waiting` starts (a seq).
    checked_to: u64,
}

impl<T> Default for UserStores<T> {
    fn default() -> Self {
        UserStores {
            in_flight: 0,
            per_link: HashMap::new(),
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            checked_to: 0,
        }
    }
}

impl<T> UserStores<T> {
    fn fits(&self, link: LinkQuota, in_all: usize) -> bool {
        self.in_flight < in_all && self.per_link.get(&link.id).copied().unwrap_or(0) < link.per_user
    }

    fn enter(&mut self, link: LinkQuota) {
        self.in_flight += 1;
        *self.per_link.entry(link.id).or_default() += 1;
    }

    fn leave(&mut self, link: LinkQuota) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(count) = self.per_link.get_mut(&link.id) {
            *count -= 1;
            if *count == 0 {
                self.per_link.remove(&link.id);
            }
        }
    }

    fn idle(&self) -> bool {
        self.in_flight == 0 && self.waiting.is_empty()
    }

    /// `w`, out of this user's waiting stores, its bytes given back here
    /// and in `all_bytes`.
    fn take_out(&mut self, w: Waiting<T>, all_bytes: &mut usize) -> T {
        self.waiting_bytes -= w.bytes;
        *all_bytes -= w.bytes;
        w.item
    }
}

struct State<T> {
    users: HashMap<u32, UserStores<T>>,
    waiting_bytes: usize,
    next_seq: u64,
}

/// Every user's stores in the helper.
pub struct Quota<T> {
    state: Mutex<State<T>>,
    /// Stores one user may have in flight over all links.
    pub in_all: usize,
    per_user_bytes: usize,
    total_bytes: usize,
}

impl<T> Quota<T> {
    pub fn new(in_all: usize) -> Quota<T> {
        Quota::with_bytes(in_all, WAITING_BYTES_PER_USER, WAITING_BYTES_TOTAL)
    }

    fn with_bytes(in_all: usize, per_user_bytes: usize, total_bytes: usize) -> Quota<T> {
        Quota {
            state: Mutex::new(State {
                users: HashMap::new(),
                waiting_bytes: 0,
                next_seq: 0,
            }),
            in_all,
            per_user_bytes,
            total_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A store of `uid` for thread `tid`, `bytes` long, came in on `link`.
    /// It runs if the user has room on the link and in all and nothing of
    /// theirs waits (it would overtake); else it waits, if the bytes allow.
    pub fn admit(
        &self,
        uid: u32,
        link: LinkQuota,
        tid: i32,
        bytes: usize,
        item: T,
    ) -> Admission<T> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let user = state.users.entry(uid).or_default();
        if user.waiting.is_empty() && user.fits(link, self.in_all) {
            user.enter(link);
            return Admission::Run(item);
        }
        if user.waiting_bytes + bytes > self.per_user_bytes
            || state.waiting_bytes + bytes > self.total_bytes
        {
            if user.idle() {
                state.users.remove(&uid);
            }
            return Admission::Refused(item);
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        user.waiting_bytes += bytes;
        state.waiting_bytes += bytes;
        user.waiting.push_back(Waiting {
            seq,
            link,
            bytes,
            tid,
            since: Instant::now(),
            item,
        });
        Admission::Waits
    }

    /// A store of `uid` on `link` is made: the user's first waiting store
    /// that now has room, counted in flight, for the caller to make next.
    pub fn finish(&self, uid: u32, link: LinkQuota) -> Option<T> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let user = state.users.get_mut(&uid)?;
        user.leave(link);
        let next = user
            .waiting
            .iter()
            .position(|w| user.fits(w.link, self.in_all))
            .and_then(|at| user.waiting.remove(at));
        let item = next.map(|w| {
            user.enter(w.link);
            user.take_out(w, &mut state.waiting_bytes)
        });
        if user.idle() {
            state.users.remove(&uid);
        }
        item
    }

    /// Takes out the stores waiting over `age` whose thread `dying` says
    /// is being killed (read unlocked: it reads `/proc`). At most
    /// [`DYING_CHECKS_PER_USER`] of a user's stores are looked at a call,
    /// in turn from where the last call stopped: a user with thousands of
    /// stores waiting behind stuck ones would otherwise cost a `/proc` read
    /// each, every call, and delay every other user's answers.
    pub fn take_dying(&self, age: Duration, dying: impl Fn(i32) -> bool) -> Vec<T> {
        let mut old: Vec<(u32, u64, i32)> = Vec::new();
        for (uid, user) in self.lock().users.iter_mut() {
            let cursor = user.checked_to;
            let mut due: Vec<(u64, i32)> = user
                .waiting
                .iter()
                .filter(|w| w.since.elapsed() >= age)
                .map(|w| (w.seq, w.tid))
                .collect();
            // From the cursor on, then from the start.
            due.sort_by_key(|&(seq, _)| (seq < cursor, seq));
            due.truncate(DYING_CHECKS_PER_USER);
            if let Some(&(seq, _)) = due.last() {
                user.checked_to = seq + 1;
            }
            old.extend(due.into_iter().map(|(seq, tid)| (*uid, seq, tid)));
        }
        let dying: HashSet<(u32, u64)> = old
            .into_iter()
            .filter(|(_, _, tid)| dying(*tid))
            .map(|(uid, seq, _)| (uid, seq))
            .collect();
        if dying.is_empty() {
            return Vec::new();
        }
        let mut guard = self.lock();
        let state = &mut *guard;
        let mut taken = Vec::new();
        for (uid, user) in state.users.iter_mut() {
            let (gone, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut user.waiting)
                .into_iter()
                .partition(|w| dying.contains(&(*uid, w.seq)));
            user.waiting = kept;
            for w in gone {
                taken.push(user.take_out(w, &mut state.waiting_bytes));
            }
        }
        state.users.retain(|_, user| !user.idle());
        taken
    }

    /// Takes out the stores that have waited `over` or longer: their
    /// user's earlier stores are stuck, so they are answered `EAGAIN`
    /// rather than hang behind them (a program of the same user that
    /// has nothing to do with the stuck ones included).
    pub fn take_waited(&self, over: Duration) -> Vec<T> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let mut taken = Vec::new();
        for user in state.users.values_mut() {
            // In arrival order: the first that has not waited so long ends it.
            let waited = user
                .waiting
                .iter()
                .take_while(|w| w.since.elapsed() >= over)
                .count();
            let rest = user.waiting.split_off(waited);
            for w in std::mem::replace(&mut user.waiting, rest) {
                taken.push(user.take_out(w, &mut state.waiting_bytes));
            }
        }
        state.users.retain(|_, user| !user.idle());
        taken
    }

    /// `uid`'s stores in flight and waiting (a test reads it).
    #[cfg(test)]
    pub fn of(&self, uid: u32) -> (usize, usize) {
        self.lock()
            .users
            .get(&uid)
            .map_or((0, 0), |u| (u.in_flight, u.waiting.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: LinkQuota = LinkQuota { id: 1, per_user: 2 };
    const OTHER_LINK: LinkQuota = LinkQuota { id: 2, per_user: 2 };

    #[test]
    fn stores_past_a_link_wait_in_order_and_run_as_earlier_ones_finish() {
        let quota = Quota::new(8);
        assert_eq!(quota.admit(7, LINK, 1, 10, "a"), Admission::Run("a"));
        assert_eq!(quota.admit(7, LINK, 1, 10, "b"), Admission::Run("b"));
        assert_eq!(quota.admit(7, LINK, 1, 10, "c"), Admission::Waits);
        assert_eq!(quota.admit(7, LINK, 1, 10, "d"), Admission::Waits);
        // Another link of the same user, and another user, are not held.
        assert_eq!(quota.admit(7, OTHER_LINK, 1, 10, "x"), Admission::Waits);
        assert_eq!(quota.admit(8, LINK, 1, 10, "y"), Admission::Run("y"));
        assert_eq!(quota.of(7), (2, 3));
        assert_eq!(quota.finish(7, LINK), Some("c"));
        // The link is full again; the store on the other link has room.
        assert_eq!(quota.finish(7, LINK), Some("d"));
        assert_eq!(quota.of(7), (2, 1));
        assert_eq!(quota.finish(7, LINK), Some("x"));
        assert_eq!(quota.finish(7, LINK), None);
        assert_eq!(quota.finish(7, OTHER_LINK), None);
        assert_eq!(quota.of(7), (0, 0));
        assert_eq!(quota.finish(8, LINK), None);
        assert!(quota.lock().users.is_empty(), "nothing kept for idle users");
    }

    #[test]
    fn a_user_past_its_stores_in_all_waits_on_any_link() {
        let quota = Quota::new(2);
        assert_eq!(quota.admit(7, LINK, 1, 10, 1), Admission::Run(1));
        assert_eq!(quota.admit(7, OTHER_LINK, 1, 10, 2), Admission::Run(2));
        assert_eq!(quota.admit(7, OTHER_LINK, 1, 10, 3), Admission::Waits);
        assert_eq!(quota.finish(7, LINK), Some(3));
        assert_eq!(quota.of(7), (2, 0));
    }

    #[test]
    fn waiting_bytes_are_bounded_per_user_and_in_all() {
        let quota = Quota::with_bytes(1, 100, 150);
        assert_eq!(quota.admit(7, LINK, 1, 10, 0), Admission::Run(0));
        assert_eq!(quota.admit(7, LINK, 1, 60, 1), Admission::Waits);
        assert_eq!(quota.admit(7, LINK, 1, 60, 2), Admission::Refused(2));
        assert_eq!(quota.admit(7, LINK, 1, 40, 3), Admission::Waits);
        assert_eq!(quota.admit(8, LINK, 1, 10, 4), Admission::Run(4));
        assert_eq!(quota.admit(8, LINK, 1, 60, 5), Admission::Refused(5));
        assert_eq!(quota.admit(8, LINK, 1, 50, 6), Admission::Waits);
        assert_eq!(quota.finish(7, LINK), Some(1));
        assert_eq!(quota.admit(8, LINK, 1, 50, 7), Admission::Waits);
        assert_eq!(quota.of(8), (1, 2));
    }

    #[test]
    fn waiting_stores_of_dying_threads_are_taken_out_once_old() {
        let quota = Quota::new(1);
        assert_eq!(quota.admit(7, LINK, 1, 10, "run"), Admission::Run("run"));
        assert_eq!(quota.admit(7, LINK, 40, 10, "dies"), Admission::Waits);
        assert_eq!(quota.admit(7, LINK, 41, 10, "lives"), Admission::Waits);
        let dying = |tid: i32| tid == 40;
        assert!(quota.take_dying(Duration::from_secs(60), dying).is_empty());
        assert_eq!(quota.take_dying(Duration::ZERO, dying), vec!["dies"]);
        assert_eq!(quota.finish(7, LINK), Some("lives"));
        assert_eq!(quota.finish(7, LINK), None);
        assert!(quota.lock().users.is_empty());
    }

    /// A user with many stores waiting has a few looked at a round, in
    /// turn, so each is looked at within a few rounds.
    #[test]
    fn the_watchdog_looks_at_a_users_waiting_stores_in_turn() {
        let quota = Quota::new(1);
        assert!(matches!(quota.admit(7, LINK, 1, 1, 0), Admission::Run(0)));
        let n = DYING_CHECKS_PER_USER * 2 + 10;
        for tid in 0..n as i32 {
            assert_eq!(quota.admit(7, LINK, tid, 1, 0), Admission::Waits);
        }
        let looked = std::cell::RefCell::new(Vec::new());
        let round = || {
            looked.borrow_mut().clear();
            quota.take_dying(Duration::ZERO, |tid| {
                looked.borrow_mut().push(tid);
                tid == (n - 1) as i32
            })
        };
        assert!(round().is_empty());
        assert_eq!(
            *looked.borrow(),
            (0..DYING_CHECKS_PER_USER as i32).collect::<Vec<_>>()
        );
        assert!(round().is_empty());
        assert_eq!(looked.borrow()[0], DYING_CHECKS_PER_USER as i32);
        // The third round reaches the last one, then starts over.
        assert_eq!(round(), vec![0]);
        assert_eq!(looked.borrow().len(), DYING_CHECKS_PER_USER);
        assert_eq!(looked.borrow()[10], 0, "from the start again");
        assert_eq!(quota.of(7), (1, n - 1));
    }

    #[test]
    fn stores_that_waited_too_long_are_taken_out_first_come_first() {
        let quota = Quota::new(1);
        assert_eq!(quota.admit(7, LINK, 1, 1, "run"), Admission::Run("run"));
        assert_eq!(quota.admit(7, LINK, 1, 1, "old"), Admission::Waits);
        assert!(quota.take_waited(Duration::from_secs(60)).is_empty());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(quota.admit(7, LINK, 1, 1, "new"), Admission::Waits);
        assert_eq!(quota.take_waited(Duration::from_millis(10)), vec!["old"]);
        assert_eq!(quota.of(7), (1, 1));
        assert_eq!(quota.finish(7, LINK), Some("new"));
    }
}
