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

/// How often refusals of one user are summarized, at most.
const REFUSAL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
/// Users whose refusals are tallied at once; past it, the oldest summary is
/// written out early.
const REFUSAL_USERS: usize = 256;

#[derive(Default)]
struct RefusalTally {
    since: Option<std::time::Instant>,
    by_errno: std::collections::BTreeMap<&'static str, u64>,
}

/// Counts a refused request of `uid` (`errno` by name). Each user's
/// refusals are logged as one INFO line per [`REFUSAL_INTERVAL`], so no
/// loop of bad requests grows the log faster than that; each refusal
/// itself is logged at DEBUG where it happens.
pub fn refused(uid: u32, errno: &'static str) {
    static TALLIES: OnceLock<Mutex<std::collections::HashMap<u32, RefusalTally>>> = OnceLock::new();
    let now = std::time::Instant::now();
    let mut tallies = TALLIES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
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
    let since = *tally.since.get_or_insert(now);
    *tally.by_errno.entry(errno).or_default() += 1;
    if now.duration_since(since) >= REFUSAL_INTERVAL {
        summarize(uid, tally, now);
        *tally = RefusalTally::default();
    }
}

fn summarize(uid: u32, tally: &RefusalTally, now: std::time::Instant) {
    let total: u64 = tally.by_errno.values().sum();
    let by: Vec<String> = tally
        .by_errno
        .iter()
        .map(|(errno, n)| format!("{errno} {n}"))
        .collect();
    let secs = tally.since.map_or(0, |s| now.duration_since(s).as_secs());
    tracing::info!(
        uid,
        "{total} requests refused in the last {secs} s ({}); RUST_LOG=debug shows each",
        by.join(", ")
    );
}
