//! Logging set-up and the helpers that keep the log readable: notices that
//! matter once are logged once.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// Logs `message` at WARN the first time `key` is seen, and never again.
pub fn once(key: &'static str, message: &str) {
    static SEEN: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let first = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key);
    if first {
        tracing::warn!("{message}");
    }
}

/// How long a user's refusals are tallied before their summary is written.
const REFUSAL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
/// How often the summary thread looks for tallies that are due.
const SUMMARY_TICK: std::time::Duration = std::time::Duration::from_secs(1);
/// Users whose refusals are tallied at once; past it, the oldest summary is
/// written out early.
const REFUSAL_USERS: usize = 256;
/// Distinct unavailable-event notices remembered; past it, further ones go
/// only to the summaries (a model has far fewer events and reasons).
const UNAVAILABLE_NOTICES: usize = 1024;

#[derive(Default)]
struct RefusalTally {
    since: Option<std::time::Instant>,
    by_errno: std::collections::BTreeMap<&'static str, u64>,
}

type Tallies = std::collections::HashMap<u32, RefusalTally>;

fn tallies() -> std::sync::MutexGuard<'static, Tallies> {
    static TALLIES: OnceLock<Mutex<Tallies>> = OnceLock::new();
    TALLIES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Counts a refused request of `uid` (`errno` by name). Each user's
/// refusals are logged as one INFO line [`REFUSAL_INTERVAL`] after the
/// first (by [`start_refusal_summaries`]'s thread, or by the next refusal),
/// so no loop of bad requests grows the log faster than that; each refusal
/// itself is logged at DEBUG where it happens.
pub fn refused(uid: u32, errno: &'static str) {
    let now = std::time::Instant::now();
    let mut tallies = tallies();
    if tallies.len() >= REFUSAL_USERS && !tallies.contains_key(&uid) {
        let oldest = tallies
            .iter()
            .min_by_key(|(_, t)| t.since)
            .map(|(uid, _)| *uid);
        if let Some(oldest) = oldest.and_then(|u| tallies.remove_entry(&u)) {
            summarize(oldest.0, &oldest.1, now);
        }
    }
    let tally = tallies.entry(uid).or_default();
    tally.since.get_or_insert(now);
    *tally.by_errno.entry(errno).or_default() += 1;
    // Once stopping, a request still in flight is summed up at once: no
    // later summary would come.
    let age = if STOPPING.load(std::sync::atomic::Ordering::Relaxed) {
        std::time::Duration::ZERO
    } else {
        REFUSAL_INTERVAL
    };
    summarize_due(&mut tallies, now, age);
}

/// Set by [`summarize_refusals_now`]: the daemon is stopping.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Logs at WARN, the first time a caller selects it, that an event cannot
/// be counted here and why (`why` names the event): an administrator
/// looking into a program's `EOPNOTSUPP` finds it at the default level,
/// where the summaries give only counts. Once per event and reason for the
/// daemon's life (a host fact, the same for every caller; `pfmstat -l`
/// alone meets every unavailable event), so the lines are as many as the
/// model's events at most.
pub fn unavailable_selected(uid: u32, why: &str) {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if seen.len() < UNAVAILABLE_NOTICES && seen.insert(why.to_owned()) {
        tracing::warn!(
            uid,
            "a selected event cannot be counted on this host (EOPNOTSUPP): {why}"
        );
    }
}

/// Starts the thread that writes each user's summary when it is due, so
/// that the last refusals of a burst are logged too.
pub fn start_refusal_summaries() -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("refusal-log".into())
        .spawn(|| {
            loop {
                std::thread::sleep(SUMMARY_TICK);
                summarize_due(&mut tallies(), std::time::Instant::now(), REFUSAL_INTERVAL);
            }
        })
        .map(drop)
}

/// Writes every summary still tallied, and from then on each refusal at
/// once: at stop, however the daemon stops.
pub fn summarize_refusals_now() {
    let mut tallies = tallies();
    STOPPING.store(true, std::sync::atomic::Ordering::Relaxed);
    summarize_due(
        &mut tallies,
        std::time::Instant::now(),
        std::time::Duration::ZERO,
    );
}

/// Calls [`summarize_refusals_now`] when dropped: held by the daemon's
/// main function, so that an error return writes the summaries too.
#[derive(Debug)]
pub struct RefusalSummariesAtExit;

impl Drop for RefusalSummariesAtExit {
    fn drop(&mut self) {
        summarize_refusals_now();
    }
}

/// Writes out and forgets the tallies begun at least `age` before `now`.
fn summarize_due(tallies: &mut Tallies, now: std::time::Instant, age: std::time::Duration) {
    tallies.retain(|uid, tally| {
        let due = tally
            .since
            .is_some_and(|since| now.duration_since(since) >= age);
        if due {
            summarize(*uid, tally, now);
        }
        !due
    });
}

fn summarize(uid: u32, tally: &RefusalTally, now: std::time::Instant) {
    let total: u64 = tally.by_errno.values().sum();
    let by: Vec<String> = tally
        .by_errno
        .iter()
        .map(|(errno, n)| format!("{errno} {n}"))
        .collect();
    let secs = tally.since.map_or(0, |s| now.duration_since(s).as_secs());
    let requests = if total == 1 { "request" } else { "requests" };
    tracing::info!(
        uid,
        "{total} {requests} refused in the last {secs} s ({}); RUST_LOG=debug shows each",
        by.join(", ")
    );
}
