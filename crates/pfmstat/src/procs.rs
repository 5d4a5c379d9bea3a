//! The command's processes, as `/proc` shows them (for `-mp`, and for the
//! `-a` warning about tasks created before a mux switch).
//!
//! The device counts one tree of threads (the PME tree of the child's
//! `PCNTLOGSELECT`) into one set of counters per CPU: it cannot say which
//! process caused which events. What pfmstat can observe per process is CPU
//! time: this module polls `/proc` (every process's parent, command name and
//! run time from `task/*/schedstat`) and keeps the last value seen of every
//! process of the tree. A process that lives less than one poll interval
//! may be missed; the report shows what no process was seen to use as
//! "unattributed".
//!
//! A process's last stretch before its parent reaps it falls after its last
//! poll, and on a loaded machine the polls come late (a child measured at
//! 40-60% of its CPU time). The parent's `/proc` stat has it: the reaped
//! children's CPU time (cutime + cstime) grows by the child's whole time when
//! the child is reaped. When one process of the tree is gone at a poll and
//! its parent's reaped-children time grew meanwhile, that growth, less what
//! the child had itself reaped, is the child's final CPU time (to a clock
//! tick; never more than its threads could have run since it was last seen).
//! With several gone at once the growth cannot be split, and their last
//! stretches stay unattributed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
    /// Run time, ns, the largest seen.
    pub cpu_ns: u64,
    /// Most threads seen at once.
    pub threads: u64,
    start_ticks: u64,
    /// CPU time of the children it reaped (cutime + cstime), ns, the
    /// largest seen.
    children_ns: u64,
    /// When it was last seen, since the tracker began.
    seen_at: Duration,
}

#[cfg(test)]
impl Process {
    /// A process of `cpu_ns` for report tests.
    pub fn with_cpu(pid: i32, cpu_ns: u64) -> Process {
        Process {
            pid,
            ppid: 1,
            comm: "cc1".into(),
            cpu_ns,
            threads: 1,
            start_ticks: 0,
            children_ns: 0,
            seen_at: Duration::ZERO,
        }
    }
}

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub comm: String,
    pub ppid: i32,
    /// utime + stime, clock ticks.
    pub ticks: u64,
    /// cutime + cstime (the reaped children's), clock ticks.
    pub children_ticks: u64,
    pub threads: u64,
    pub start_ticks: u64,
}

impl From<procfs::process::Stat> for Stat {
    fn from(stat: procfs::process::Stat) -> Stat {
        // The kernel prints cutime, cstime and num_threads as signed
        // numbers; they are never negative.
        let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
        Stat {
            pid: stat.pid,
            ppid: stat.ppid,
            ticks: stat.utime + stat.stime,
            children_ticks: unsigned(stat.cutime) + unsigned(stat.cstime),
            threads: unsigned(stat.num_threads),
            start_ticks: stat.starttime,
            comm: stat.comm,
        }
    }
}

fn clock_ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// Run time of every thread of `pid`, ns (the first field of schedstat).
fn schedstat_ns(pid: i32) -> u64 {
    let Ok(tasks) = procfs::process::Process::new(pid).and_then(|p| p.tasks()) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| task.schedstat().ok())
        .map(|schedstat| schedstat.sum_exec_runtime)
        .sum()
}

/// The CPU time the command's processes have run, summed from each
/// process's CPU-time clock (`clock_getcpuclockid`; for another process the
/// kernel updates it only at the running thread's ticks and switches, so it
/// lags by up to a tick: `-a` uses it only where perf refuses the exact
/// `command_clock`) as increases, so processes that come and go
/// between samples never make the sum go backwards (a process's last
/// stretch before it is reaped can be lost; a new one counts from 0, all of
/// its life being inside the run).
#[derive(Debug, Default)]
pub struct TaskClock {
    last: BTreeMap<i32, u64>,
    total: u64,
}

impl TaskClock {
    /// Samples the processes `pids`; the cumulative CPU time, ns.
    pub fn sample(&mut self, pids: &[i32]) -> u64 {
        let now: BTreeMap<i32, u64> = pids
            .iter()
            .filter_map(|&pid| {
                let clock = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(pid)).ok()?;
                let t = nix::time::clock_gettime(clock).ok()?;
                Some((pid, t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64))
            })
            .collect();
        self.advance(now)
    }

    fn advance(&mut self, now: BTreeMap<i32, u64>) -> u64 {
        for (id, ns) in &now {
            self.total += ns.saturating_sub(self.last.get(id).copied().unwrap_or(0));
        }
        self.last = now;
        self.total
    }
}

#[derive(Debug)]
pub struct Tracker {
    root: i32,
    /// Our own pid: with PR_SET_CHILD_SUBREAPER, the command's orphans
    /// become our children, and the command is our only other child.
    me: i32,
    tick_ns: u64,
    procs: BTreeMap<(i32, u64), Process>,
    /// The processes the last poll saw.
    present: BTreeSet<(i32, u64)>,
    started: Instant,
}

impl Tracker {
    pub fn new(root: i32) -> Tracker {
        Tracker {
            root,
            me: std::process::id() as i32,
            tick_ns: 1_000_000_000 / clock_ticks_per_second(),
            procs: BTreeMap::new(),
            present: BTreeSet::new(),
            started: Instant::now(),
        }
    }

    /// One pass over `/proc`.
    pub fn poll(&mut self) {
        let Ok(processes) = procfs::process::all_processes() else {
            return;
        };
        // Each Process holds an fd on its /proc directory: read its stat and
        // drop it at once. A process gone since the listing is skipped.
        let stats: Vec<Stat> = processes
            .filter_map(|process| process.ok()?.stat().ok())
            .map(Stat::from)
            .collect();
        self.update(&stats, schedstat_ns, self.started.elapsed());
    }

    /// Folds one snapshot of the system's processes, taken at `at`, in: the
    /// root, and every process whose parent is in the tree (or is us: a
    /// reparented orphan). Then the final CPU time of processes reaped
    /// since the last snapshot, from their parents' (see the module docs).
    pub fn update(&mut self, stats: &[Stat], run_ns: impl Fn(i32) -> u64, at: Duration) {
        let mut members: Vec<i32> = vec![self.root];
        loop {
            let before = members.len();
            for s in stats {
                let child_of_tree =
                    members.contains(&s.ppid) || (s.ppid == self.me && s.pid != self.root);
                if child_of_tree && !members.contains(&s.pid) {
                    members.push(s.pid);
                }
            }
            if members.len() == before {
                break;
            }
        }
        let before: BTreeMap<(i32, u64), u64> = self
            .present
            .iter()
            .filter_map(|k| Some((*k, self.procs.get(k)?.children_ns)))
            .collect();
        let mut present = BTreeSet::new();
        for s in stats.iter().filter(|s| members.contains(&s.pid)) {
            let cpu_ns = (s.ticks * self.tick_ns).max(run_ns(s.pid));
            present.insert((s.pid, s.start_ticks));
            let p = self
                .procs
                .entry((s.pid, s.start_ticks))
                .or_insert_with(|| Process {
                    pid: s.pid,
                    ppid: s.ppid,
                    comm: s.comm.clone(),
                    cpu_ns: 0,
                    threads: 0,
                    start_ticks: s.start_ticks,
                    children_ns: 0,
                    seen_at: at,
                });
            p.comm = s.comm.clone();
            p.cpu_ns = p.cpu_ns.max(cpu_ns);
            p.threads = p.threads.max(s.threads);
            p.children_ns = p.children_ns.max(s.children_ticks * self.tick_ns);
            p.seen_at = at;
            if s.pid != self.root {
                p.ppid = s.ppid;
            }
        }
        // Reaped since the last snapshot: gone now, their parent still here.
        for (parent, children_before) in &before {
            if !present.contains(parent) {
                continue;
            }
            let grown = self.procs[parent]
                .children_ns
                .saturating_sub(*children_before);
            let gone: Vec<(i32, u64)> = before
                .keys()
                .filter(|k| !present.contains(k) && self.procs[k].ppid == parent.0)
                .copied()
                .collect();
            if grown == 0 || gone.len() != 1 {
                continue;
            }
            let p = self.procs.get_mut(&gone[0]).expect("a process seen before");
            let since = at.saturating_sub(p.seen_at).as_nanos() as u64;
            let most = p.cpu_ns + p.threads.max(1) * since;
            let own = grown.saturating_sub(p.children_ns);
            p.cpu_ns = p.cpu_ns.max(own.min(most));
        }
        self.present = present;
    }

    /// Every process seen, in order of appearance (pid order within it).
    pub fn processes(&self) -> Vec<Process> {
        let mut v: Vec<Process> = self.procs.values().cloned().collect();
        v.sort_by_key(|p| (p.start_ticks, p.pid));
        v
    }

    /// The pids of the tree seen by the last poll (and the root).
    pub fn pids(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.procs.keys().map(|(pid, _)| *pid).collect();
        if !v.contains(&self.root) {
            v.push(self.root);
        }
        v
    }

    /// True once the command was seen with more than one task (threads or
    /// processes).
    pub fn saw_other_tasks(&self) -> bool {
        self.procs.len() > 1 || self.procs.values().any(|p| p.threads > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/<pid>/stat` as the kernel writes it, the command name `comm`.
    fn stat_line(comm: &str) -> String {
        format!(
            "4242 ({comm}) S 4241 4242 4242 0 -1 4194560 100 0 0 0 150 50 3 4 20 0 2 0 98765 \
             3133440 390 18446744073709551615 94249714257920 94249714277801 140724067408304 0 0 \
             0 0 0 0 0 0 0 17 1 0 0 0 0 0 94249714293808 94249714295424 94250213957632 \
             140724067416787 140724067416807 140724067416807 140724067418091 0\n"
        )
    }

    fn parse(line: &str) -> procfs::ProcResult<Stat> {
        use procfs::FromRead;
        procfs::process::Stat::from_read(line.as_bytes()).map(Stat::from)
    }

    #[test]
    fn stat_lines_with_awkward_names() {
        let s = parse(&stat_line("my (odd) prog")).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "my (odd) prog");
        assert_eq!(s.ppid, 4241);
        assert_eq!(s.ticks, 200);
        assert_eq!(s.children_ticks, 7);
        assert_eq!(s.threads, 2);
        assert_eq!(s.start_ticks, 98765);
        // Fields are counted from the last `)`, whatever the name holds.
        let s = parse(&stat_line("a) S 1 2 (b")).unwrap();
        assert_eq!(
            (s.comm.as_str(), s.ppid, s.ticks),
            ("a) S 1 2 (b", 4241, 200)
        );
        assert!(parse("garbage").is_err());
        assert!(parse("4242 (short) S 4241 4242").is_err());
    }

    fn stat(pid: i32, ppid: i32, ticks: u64) -> Stat {
        Stat {
            pid,
            comm: format!("p{pid}"),
            ppid,
            ticks,
            children_ticks: 0,
            threads: 1,
            start_ticks: pid as u64,
        }
    }

    #[test]
    fn the_task_clock_only_moves_forward() {
        let mut c = TaskClock::default();
        assert_eq!(c.advance([(1, 100)].into()), 100);
        // Process 2 appears with 50 ns; process 1 runs 10 more.
        assert_eq!(c.advance([(1, 110), (2, 50)].into()), 160);
        // Process 1 is gone: nothing is taken back.
        assert_eq!(c.advance([(2, 70)].into()), 180);
    }

    #[test]
    fn the_tree_under_the_root_and_only_it() {
        let mut t = Tracker::new(100);
        t.me = 99;
        t.tick_ns = 10_000_000;
        // 100 -> 101 -> 102; 200 is unrelated; 103 is an orphan reparented to us.
        let snapshot = [
            stat(102, 101, 1),
            stat(100, 99, 5),
            stat(101, 100, 2),
            stat(200, 1, 7),
            stat(103, 99, 3),
        ];
        t.update(&snapshot, |_| 0, Duration::ZERO);
        let pids: Vec<i32> = t.processes().iter().map(|p| p.pid).collect();
        assert_eq!(pids, [100, 101, 102, 103]);
        assert!(t.saw_other_tasks());
        // Values only grow; a process that vanished keeps its last.
        t.update(
            &[stat(100, 99, 6)],
            |pid| if pid == 100 { 1 } else { 0 },
            Duration::from_millis(10),
        );
        let p = t.processes();
        assert_eq!(p[0].cpu_ns, 60_000_000);
        assert_eq!(p[1].cpu_ns, 20_000_000);
    }

    fn reaping(children_ticks: u64, at_ms: u64, gone: &[i32]) -> Vec<u64> {
        let mut t = Tracker::new(100);
        t.me = 99;
        t.tick_ns = 10_000_000;
        // 100 -> 101 (2 ticks, having reaped 1 tick of its own children)
        // and 102 (3 ticks).
        let mut child = stat(101, 100, 2);
        child.children_ticks = 1;
        t.update(
            &[stat(100, 99, 5), child, stat(102, 100, 3)],
            |_| 0,
            Duration::ZERO,
        );
        let mut root = stat(100, 99, 5);
        root.children_ticks = children_ticks;
        let mut now = vec![root];
        now.extend(
            [stat(101, 100, 2), stat(102, 100, 3)]
                .into_iter()
                .filter(|s| !gone.contains(&s.pid)),
        );
        t.update(&now, |_| 0, Duration::from_millis(at_ms));
        t.processes().iter().map(|p| p.cpu_ns / 1_000_000).collect()
    }

    #[test]
    fn a_reaped_childs_last_stretch_comes_from_its_parents_children_time() {
        // 101 is reaped between the polls: the root's reaped-children time
        // grew by 8 ticks, 1 of them 101's own reaped children.
        assert_eq!(reaping(8, 100, &[101]), [50, 70, 30]);
        // No more than its one thread could run since it was last seen.
        assert_eq!(reaping(8, 30, &[101]), [50, 50, 30]);
        // Two gone at once: the growth cannot be split.
        assert_eq!(reaping(12, 100, &[101, 102]), [50, 20, 30]);
        // Gone but not reaped by a process of the tree (no growth).
        assert_eq!(reaping(0, 100, &[101]), [50, 20, 30]);
    }
}
