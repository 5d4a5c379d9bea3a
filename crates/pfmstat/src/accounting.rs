//! Turning a timeline of counter reads into per-event counts.
//!
//! The device's counters are cumulative per counter, whatever event the
//! counter is programmed with, so pfmstat reads them at every change (a
//! multiplexing switch, a `-s` signal, the command's exit) and attributes
//! each interval's increase to the event its counter counted then.
//!
//! An interval is *clean* when one configuration held throughout. A *switch*
//! interval (from the read just before reprogramming to the read just after)
//! is credited to no event, on any counter: the daemon closes and reopens
//! its host counters to reprogram, so even a counter that keeps its event
//! misses part of it. Its time counts in the total, so every event's
//! estimate covers it.
//!
//! Scaling (`-a`): an event observed for `T_e` of the `T` counted is
//! estimated as `count × T / T_e`, exact when `T_e == T`. `T` is measured in
//! the command's own CPU time when multiplexing (each interval weighs what
//! the command's tasks ran in it, from /proc schedstat), as perf scales by
//! time *running*: events of a per-task counter happen only while the task
//! runs, so wall time would charge a slice in which the command was
//! preempted or asleep as if it had run. For an event whose rate per CPU
//! second is steady the estimate is then exact up to slice-edge effects; the
//! error is the rate's variation between the slices the event was and was
//! not counted in, and for a workload whose rate varies slowly compared with
//! a slice it shrinks like 1/(number of slices the event got).

use super::events::Config;
use pfm_model::AlphaEvent;
use std::time::Duration;

/// What one event accumulated.
#[derive(Debug, Clone)]
pub struct Tally {
    pub event: &'static AlphaEvent,
    pub counter: usize,
    /// Events counted while it was programmed, per CPU.
    pub per_cpu: Vec<u64>,
    /// Weight (time) it was programmed, within counting windows.
    pub observed: Duration,
}

impl Tally {
    pub fn count(&self) -> u64 {
        self.per_cpu.iter().sum()
    }
}

/// An event's result after scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scaled {
    /// The count, or the estimate `count × total / observed`.
    pub value: f64,
    /// Counted the whole time: the value is the count itself.
    pub exact: bool,
    /// observed / total.
    pub share: f64,
    /// total / observed.
    pub factor: f64,
}

/// `count × total / observed`; `None` when the event was never observed
/// (not "0": nothing is known about it).
pub fn scale(count: u64, observed: Duration, total: Duration) -> Option<Scaled> {
    if observed.is_zero() {
        return None;
    }
    let (o, t) = (observed.as_secs_f64(), total.as_secs_f64());
    if observed >= total {
        return Some(Scaled {
            value: count as f64,
            exact: true,
            share: 1.0,
            factor: 1.0,
        });
    }
    Some(Scaled {
        value: count as f64 * t / o,
        exact: false,
        share: o / t,
        factor: t / o,
    })
}

#[derive(Debug, Clone, Default)]
pub struct Ledger {
    pub tallies: Vec<Tally>,
    /// Wall time inside counting windows.
    pub counted: Duration,
    /// Weight inside counting windows (wall time, or the command's CPU time
    /// when multiplexing): what scaling divides by.
    pub weight: Duration,
    /// Counts of switch intervals no event could be credited with.
    pub discarded: u64,
    ncpus: usize,
}

impl Ledger {
    pub fn new(ncpus: usize) -> Self {
        Ledger {
            ncpus,
            ..Ledger::default()
        }
    }

    fn tally(&mut self, event: &'static AlphaEvent, counter: usize) -> &mut Tally {
        let index = match self
            .tallies
            .iter()
            .position(|t| std::ptr::eq(t.event, event))
        {
            Some(i) => i,
            None => {
                self.tallies.push(Tally {
                    event,
                    counter,
                    per_cpu: vec![0; self.ncpus],
                    observed: Duration::ZERO,
                });
                self.tallies.len() - 1
            }
        };
        &mut self.tallies[index]
    }

    /// Makes `event` known even if it is never credited (so it reports as
    /// "not observed" rather than vanishing).
    pub fn register(&mut self, event: &'static AlphaEvent, counter: usize) {
        self.tally(event, counter);
    }

    /// Credits the interval between two reads. `before` held at its start,
    /// `after` at its end (the same for a clean interval). `delta[cpu][c]`
    /// is counter c's increase on cpu; `wall` the interval's length,
    /// `elapsed` its weight. Nothing is credited outside windows.
    pub fn credit(
        &mut self,
        before: &Config,
        after: &Config,
        delta: &[[u64; 3]],
        wall: Duration,
        elapsed: Duration,
        in_window: bool,
    ) {
        if !in_window {
            return;
        }
        self.counted += wall;
        self.weight += elapsed;
        if before != after {
            self.discarded += delta.iter().flatten().sum::<u64>();
            return;
        }
        for (c, event) in before.events() {
            let tally = self.tally(event, c);
            tally.observed += elapsed;
            for (slot, d) in tally.per_cpu.iter_mut().zip(delta) {
                *slot += d[c];
            }
        }
    }

    pub fn find(&self, event: &AlphaEvent) -> Option<&Tally> {
        self.tallies.iter().find(|t| std::ptr::eq(t.event, event))
    }
}

/// The increase from one read to the next, per CPU and counter.
pub fn delta(from: &[[u64; 3]], to: &[[u64; 3]]) -> Vec<[u64; 3]> {
    from.iter()
        .zip(to)
        .map(|(a, b)| [0, 1, 2].map(|c| b[c].wrapping_sub(a[c])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::lookup;
    use pfm_model::Implementation;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn scaling_math() {
        let s = scale(500, ms(250), ms(1000)).unwrap();
        assert_eq!(s.value, 2000.0);
        assert!(!s.exact);
        assert_eq!((s.share, s.factor), (0.25, 4.0));
        let whole = scale(700, ms(1000), ms(1000)).unwrap();
        assert!(whole.exact && whole.value == 700.0 && whole.factor == 1.0);
        assert_eq!(
            scale(0, Duration::ZERO, ms(10)),
            None,
            "never observed is unknown"
        );
    }

    #[test]
    fn round_robin_on_a_steady_workload_scales_back_to_the_rate() {
        // Counter 0 always counts cycles; counter 1 alternates two events,
        // each 10 ms slices; the workload makes 1000 events/ms of each.
        let m = Implementation::Ev6;
        let cycles = lookup(m, "PF6_MUX0_CYCLES").unwrap();
        let a = lookup(m, "PF6_MUX1_CYCLES").unwrap();
        let b = lookup(m, "PF6_MUX1_RET_BRANCH_MISPREDICTS").unwrap();
        let configs = [
            Config {
                counters: [Some(cycles), Some(a), None],
                pair: None,
            },
            Config {
                counters: [Some(cycles), Some(b), None],
                pair: None,
            },
        ];
        let mut ledger = Ledger::new(2);
        let rate = 1000; // events per ms per counter, split over 2 CPUs
        for k in 0..100 {
            let config = &configs[k % 2];
            // The clean slice: 10 ms.
            let slice = [[5 * rate, 5 * rate, 0], [5 * rate, 5 * rate, 0]];
            ledger.credit(config, config, &slice, ms(10), ms(10), true);
            // The switch: 1 ms during which counter 1 changes event.
            let next = &configs[(k + 1) % 2];
            let gap = [[rate / 2, rate / 2, 0], [rate / 2, rate / 2, 0]];
            ledger.credit(config, next, &gap, ms(1), ms(1), true);
        }
        let total = ledger.weight;
        assert_eq!(total, ms(1100));
        assert_eq!(ledger.counted, total);
        for event in [cycles, a, b] {
            let t = ledger.find(event).unwrap();
            let s = scale(t.count(), t.observed, total).unwrap();
            assert!(!s.exact, "switches are unobserved for every counter");
            assert!((s.value - (1100 * rate) as f64).abs() < 1.0, "{s:?}");
        }
        let c = ledger.find(cycles).unwrap();
        assert_eq!(c.observed, ms(1000), "every clean slice");
        assert_eq!(ledger.find(a).unwrap().observed, ms(500));
        assert_eq!(ledger.discarded, 200 * rate, "both counters' switch counts");
    }

    #[test]
    fn nothing_outside_a_window_counts() {
        let m = Implementation::Ev4;
        let cycles = lookup(m, "PF_CYCLES").unwrap();
        let config = Config {
            counters: [Some(cycles), None, None],
            pair: None,
        };
        let mut ledger = Ledger::new(1);
        ledger.credit(&config, &config, &[[100, 0, 0]], ms(1), ms(1), false);
        ledger.credit(&config, &config, &[[300, 0, 0]], ms(3), ms(3), true);
        ledger.credit(&config, &config, &[[200, 0, 0]], ms(2), ms(2), false);
        assert_eq!(ledger.find(cycles).unwrap().count(), 300);
        assert_eq!(ledger.counted, ms(3));
    }

    #[test]
    fn weights_not_wall_time_decide_the_scale() {
        // The command ran 8 ms of a 10 ms slice with event A and 2 ms of a
        // 10 ms slice with event B (preempted), at 1000 events per ms of its
        // own CPU time: weighting by CPU time recovers 10 000 for both.
        let m = Implementation::Ev6;
        let cycles = lookup(m, "PF6_MUX0_CYCLES").unwrap();
        let a = lookup(m, "PF6_MUX1_CYCLES").unwrap();
        let b = lookup(m, "PF6_MUX1_RET_BRANCH_MISPREDICTS").unwrap();
        let ca = Config {
            counters: [Some(cycles), Some(a), None],
            pair: None,
        };
        let cb = Config {
            counters: [Some(cycles), Some(b), None],
            pair: None,
        };
        let mut ledger = Ledger::new(1);
        ledger.credit(&ca, &ca, &[[8000, 8000, 0]], ms(10), ms(8), true);
        ledger.credit(&cb, &cb, &[[2000, 2000, 0]], ms(10), ms(2), true);
        let est = |e| {
            let t = ledger.find(e).unwrap();
            scale(t.count(), t.observed, ledger.weight).unwrap().value
        };
        assert_eq!(est(a), 10_000.0);
        assert_eq!(est(b), 10_000.0);
        assert_eq!(est(cycles), 10_000.0);
        assert_eq!(ledger.counted, ms(20), "wall time is still reported");
    }

    #[test]
    fn deltas_wrap_like_the_counters() {
        assert_eq!(delta(&[[u64::MAX, 5, 0]], &[[1, 7, 0]]), vec![[2, 2, 0]]);
    }
}
