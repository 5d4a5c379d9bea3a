//! The command's processes, as `/proc` shows them (for `-mp`, and for the
//! `-a` warning about tasks created before a mux switch).
//!
//! The device counts one tree of threads (the PME tree of the child's
//! `PCNTLOGSELECT`) into one set of counters per CPU: it cannot say which
//! process caused which events. What pfmstat can observe per process is CPU
//! time: this module polls `/proc` (every process's parent, command name and
//! run time from `task/*/schedstat`) and keeps the last value seen of every
//! process of the tree. A process that lives less than one poll interval
//! may be missed, and up to one interval of a process's last run time may
//! be; the report shows what no process was seen to use as "unattributed".

use std::collections::BTreeMap;
use std::fs;

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
}

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub comm: String,
    pub ppid: i32,
    /// utime + stime, clock ticks.
    pub ticks: u64,
    pub threads: u64,
    pub start_ticks: u64,
}

/// Parses a `/proc/<pid>/stat` line; the command name may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_string();
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // rest[0] is field 3 (state): field n is rest[n - 3].
    let field = |n: usize| -> Option<u64> { rest.get(n - 3)?.parse().ok() };
    Some(Stat {
        pid,
        comm,
        ppid: rest.get(1)?.parse().ok()?,
        ticks: field(14)? + field(15)?,
        threads: field(20)?,
        start_ticks: field(22)?,
    })
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
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
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
}

impl Tracker {
    pub fn new(root: i32) -> Tracker {
        Tracker {
            root,
            me: std::process::id() as i32,
            tick_ns: 1_000_000_000 / clock_ticks_per_second(),
            procs: BTreeMap::new(),
        }
    }

    /// One pass over `/proc`.
    pub fn poll(&mut self) {
        let Ok(dir) = fs::read_dir("/proc") else {
            return;
        };
        let stats: Vec<Stat> = dir
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .filter_map(|e| fs::read_to_string(e.path().join("stat")).ok())
            .filter_map(|t| parse_stat(&t))
            .collect();
        self.update(&stats, schedstat_ns);
    }

    /// Folds one snapshot of the system's processes in: the root, and every
    /// process whose parent is in the tree (or is us: a reparented orphan).
    pub fn update(&mut self, stats: &[Stat], run_ns: impl Fn(i32) -> u64) {
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
        for s in stats.iter().filter(|s| members.contains(&s.pid)) {
            let cpu_ns = (s.ticks * self.tick_ns).max(run_ns(s.pid));
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
                });
            p.comm = s.comm.clone();
            p.cpu_ns = p.cpu_ns.max(cpu_ns);
            p.threads = p.threads.max(s.threads);
            if s.pid != self.root {
                p.ppid = s.ppid;
            }
        }
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

    #[test]
    fn stat_lines_with_awkward_names() {
        let s = parse_stat(
            "4242 (my (odd) prog) S 4241 4242 4242 0 -1 4194560 100 0 0 0 150 50 3 4 20 0 2 0 98765 0 0",
        )
        .unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "my (odd) prog");
        assert_eq!(s.ppid, 4241);
        assert_eq!(s.ticks, 200);
        assert_eq!(s.threads, 2);
        assert_eq!(s.start_ticks, 98765);
        assert!(parse_stat("garbage").is_none());
    }

    fn stat(pid: i32, ppid: i32, ticks: u64) -> Stat {
        Stat {
            pid,
            comm: format!("p{pid}"),
            ppid,
            ticks,
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
        t.update(&snapshot, |_| 0);
        let pids: Vec<i32> = t.processes().iter().map(|p| p.pid).collect();
        assert_eq!(pids, [100, 101, 102, 103]);
        assert!(t.saw_other_tasks());
        // Values only grow; a process that vanished keeps its last.
        t.update(&[stat(100, 99, 6)], |pid| if pid == 100 { 1 } else { 0 });
        let p = t.processes();
        assert_eq!(p[0].cpu_ns, 60_000_000);
        assert_eq!(p[1].cpu_ns, 20_000_000);
    }
}
