/*
 * hostile_client -- the C clients of tests/hostile.rs: each subcommand is one
 * hostile (or merely unusual) caller of the pfm device, written as a legacy
 * program would write it, against <sys/pfcntr.h>.  Output is "key=value"
 * words and "row NAME ERRNO" lines for the Rust side to check; the exit
 * status is 0 unless the program itself could not run (bad usage, no
 * device), which is 2.  tests/common_hostile.rs builds it after
 * tests/common's TASK_CLOCK_C, which gives it task_clock_ns().
 *
 *	hostile_client userns DEV            privilege rows (run it in a user ns)
 *	hostile_client pidns DEV             LOGSELECT from inside a PID namespace
 *	hostile_client poll DEV MODE N       N opens, one a millisecond
 *	hostile_client peek DEV [select]     what a fresh open shows
 *	hostile_client wedge DEV A|B         a forked child's LOGSELECT, then exit
 *	hostile_client pme DEV N [exit]      N threads each call PCNTLOGSELECT
 *	hostile_client profile DEV CPU BYTES... [hold]  ONE open, user ranges
 *	hostile_client mmap DEV              MAP_SHARED and MAP_PRIVATE
 *	hostile_client flood DEV SECONDS MIN open/close and refused ioctls
 *	hostile_client hammer DEV N SEED     N random open/ioctl/close rounds
 *	hostile_client reopen DEV N          N rounds of open, ioctl, close
 *	hostile_client trunc DEV             open with O_TRUNC
 *	hostile_client hold DEV MODE         counts and reads them until stdin ends
 *	hostile_client execclose DEV         an O_CLOEXEC open, then fork and exec
 *	hostile_client reads DEV BYTES N T   T threads each read a profile N times
 *	hostile_client stall DEV OPENCPU RUNCPU FILE T  T threads' PCNTGETCNT into
 *				an untouched MAP_PRIVATE page of FILE
 *	hostile_client latency DEV CPU N     N PCNTGETCNT of a ONE open, timed
 *	hostile_client setuid DEV PROG       a PME child execs PROG; the parent
 *				changes the items and reads the counts
 *	hostile_client handdown DEV          (as root) a counting LOGALL open kept
 *				by a child that drops to nobody
 */
#define _GNU_SOURCE
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char *device;
static struct pfm_info info;

static const char *
errname(int e)
{
	static char buf[16];

	switch (e) {
	case 0:		return "0";
	case EPERM:	return "EPERM";
	case ENOENT:	return "ENOENT";
	case ESRCH:	return "ESRCH";
	case EINTR:	return "EINTR";
	case EAGAIN:	return "EAGAIN";
	case EIO:	return "EIO";
	case EBADF:	return "EBADF";
	case ENOMEM:	return "ENOMEM";
	case EACCES:	return "EACCES";
	case EFAULT:	return "EFAULT";
	case EBUSY:	return "EBUSY";
	case ENODEV:	return "ENODEV";
	case EINVAL:	return "EINVAL";
	case EMFILE:	return "EMFILE";
	case ENOTTY:	return "ENOTTY";
	case ENOSPC:	return "ENOSPC";
	case ESPIPE:	return "ESPIPE";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENOTCONN:	return "ENOTCONN";
	}
	snprintf(buf, sizeof buf, "E%d", e);
	return buf;
}

static void
die(const char *what)
{
	fprintf(stderr, "hostile_client: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* ioctl's errno, 0 on success. */
static int
io(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? errno : 0;
}

static int
io_long(int fd, unsigned long cmd, long value)
{
	return io(fd, cmd, &value);
}

static void
row(const char *name, int e)
{
	printf("row %s %s\n", name, errname(e));
	fflush(stdout);
}

/*
 * Opens the device in `mode`.  A previous client's release reaches the
 * daemon after that client has gone (FUSE sends RELEASE asynchronously), so
 * an open that finds the device busy is tried again for a while: the
 * subcommands below are not about EBUSY at open (poll is, and does not use
 * this).  Returns the descriptor or -errno.
 */
static void sleep_ms(long ms);

static int
open_dev(int mode)
{
	int fd, tries;

	for (tries = 0; tries < 3000; tries++) {
		fd = open(device, O_RDONLY | mode);
		if (fd >= 0 || errno != EBUSY)
			break;
		sleep_ms(10);
	}
	return fd < 0 ? -errno : fd;
}

static void
get_info(int fd)
{
	if (io(fd, PCNTGETINFO, &info) != 0)
		die("PCNTGETINFO");
}

static int
bind_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof set, &set) < 0 ? errno : 0;
}

/*
 * Counter 0 counts cycles (EV4: every 4096), every other counter is off:
 * the one selection every family and every host can count.
 */
static int
select_cycles(int fd)
{
	switch (info.pi_family) {
	case PFM_FAMILY_EV4: {
		struct iccsr m;

		memset(&m, 0, sizeof m);
		m.iccsr_mux0 = PF_CYCLES;
		m.iccsr_pc0 = PF_C0_INT_EVERY_4096;
		m.iccsr_disable = 2;
		return io(fd, PCNTSETMUX, &m);
	}
	case PFM_FAMILY_EV5: {
		int e = io_long(fd, PCNT5DISABLE, PF5_SEL_COUNTER_1 | PF5_SEL_COUNTER_2);

		return e ? e : io_long(fd, PCNT5MUX, PF5_MUX0_CYCLES);
	}
	default:
		return io_long(fd, PCNT6MUX, info.pi_impl == PFM_IMPL_EV67 ?
		    PF67_CYCLES_AND_UNDEFINED : PF6_MUX0_CYCLES);
	}
}

/* Counter 0's interrupt count, summed (ONE and ALL store one element). */
static int
counter0(int fd, unsigned long *out)
{
	int e;

	switch (info.pi_family) {
	case PFM_FAMILY_EV4: {
		struct pfcntrs c[64], *p = c;

		memset(c, 0, sizeof c);
		e = io(fd, PCNTGETCNT, &p);
		*out = c[0].pf_cntr0;
		return e;
	}
	case PFM_FAMILY_EV5: {
		struct pfcntrs_ev5 c[64], *p = c;

		memset(c, 0, sizeof c);
		e = io(fd, PCNT5GETCNT, &p);
		*out = c[0].pf_cntr0;
		return e;
	}
	default: {
		struct pfcntrs_ev6 c[64], *p = c;

		memset(c, 0, sizeof c);
		e = io(fd, PCNT6GETCNT, &p);
		*out = c[0].pf_cntr0;
		return e;
	}
	}
}

static unsigned long
thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (unsigned long)ts.tv_sec * 1000000000UL + (unsigned long)ts.tv_nsec;
}

static volatile unsigned long sink;

/* Burns `ns` of this thread's CPU time. */
static void
burn(unsigned long ns)
{
	unsigned long start = thread_cpu_ns();
	unsigned long i;

	while (thread_cpu_ns() - start < ns)
		for (i = 0; i < 10000; i++)
			sink += i;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/*
 * userns: the §8 rows a caller that is root only in a user namespace of its
 * own must be refused, and one it must be allowed (LOGSELECT at paranoid 2).
 */
static int
cmd_userns(void)
{
	addr_range_t kr;
	int fd, e;

	printf("uid=%d euid=%d\n", (int)getuid(), (int)geteuid());
	fd = open_dev(PCNTOPENALL);
	if (fd < 0) {
		row("open", -fd);
		return 0;
	}
	get_info(fd);
	row("open", 0);
	row("logall", io(fd, PCNTLOGALL, 0));
	row("setitems", io_long(fd, PCNTSETITEMS, PFM_COUNTERS));
	row("select", select_cycles(fd));
	/* LOGALL is the scope after open: enabling under it is system-wide. */
	row("renable_under_logall", io(fd, PCNTRENABLE, 0));
	/* Kernel PC profiling. */
	row("setitems_profiling", io_long(fd, PCNTSETITEMS, PFM_COUNTERS | PFM_PROFILING));
	memset(&kr, 0, sizeof kr);
	kr.start = 0xffffffff81000000UL;
	kr.end = kr.start + 0x10000;
	kr.stride = 4;
	row("setkrange", io(fd, PCNTSETKRANGE, &kr));
	row("caller", io(fd, PCNTCALLER, 0));
	if (info.pi_family == PFM_FAMILY_EV5)
		row("freq256", io_long(fd, PCNT5FREQ, PF5_C0_INT_EVERY_256));
	/* What such a caller may do: count its own threads, user mode only. */
	e = io(fd, PCNTLOGSELECT, 0);
	row("logselect", e);
	row("renable_under_logselect", io(fd, PCNTRENABLE, 0));
	get_info(fd);
	printf("user_only=%d\n", (info.pi_flags & PFM_INFO_USER_ONLY) ? 1 : 0);
	close(fd);
	return 0;
}

/*
 * pidns: counts with LOGSELECT from inside a PID namespace.  Phase 1: only
 * threads without the PME bit run (a thread and a process created before
 * LOGSELECT) while the PME thread sleeps: 0.  Phase 2: the PME thread
 * burns CPU: its time.
 */
static int pme_go[2], pme_done[2], nonpme_go[2], nonpme_done[2];
static int pidns_fd;
static unsigned long pme_ns;
static volatile long pme_tid;

/*
 * Waits until thread tid sleeps (state S in /proc): after it said "done" it
 * still runs into its next read(2), and on a loaded machine it may be
 * preempted on the way and finish that after phase 1 began.
 */
static void
wait_asleep(long tid)
{
	char path[64], buf[512], *state;
	int i, fd;
	ssize_t n;

	snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
	for (i = 0; i < 10000; i++) {
		fd = open(path, O_RDONLY);
		if (fd < 0)
			die(path);
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n <= 0)
			die(path);
		buf[n] = 0;
		state = strrchr(buf, ')');
		if (state && state[1] == ' ' && state[2] == 'S')
			return;
		sleep_ms(1);
	}
	die("the PME thread never went to sleep");
}

static void *
pme_thread(void *arg)
{
	char c;
	unsigned long start;
	int e;

	(void)arg;
	e = io(pidns_fd, PCNTLOGSELECT, 0);
	row("logselect", e);
	pme_tid = syscall(SYS_gettid);
	if (write(pme_done[1], "x", 1) != 1)
		die("write");
	if (read(pme_go[0], &c, 1) != 1)	/* asleep through phase 1 */
		die("read");
	/* task_clock_ns(): tests/common's TASK_CLOCK_C, which the harness
	 * puts before this file; the clock pfmd's cycles run on here. */
	start = (unsigned long)task_clock_ns();
	burn(300000000UL);
	pme_ns = (unsigned long)task_clock_ns() - start;
	if (write(pme_done[1], "x", 1) != 1)
		die("write");
	return 0;
}

static void *
nonpme_thread(void *arg)
{
	char c;

	(void)arg;
	if (read(nonpme_go[0], &c, 1) != 1)
		die("read");
	burn(200000000UL);
	if (write(nonpme_done[1], "x", 1) != 1)
		die("write");
	return 0;
}

static int
cmd_pidns(void)
{
	pthread_t pme, other;
	unsigned long phase1, phase2;
	pid_t child;
	char c;
	int go_child[2], status;

	printf("pid=%d\n", (int)getpid());
	if (pipe(pme_go) || pipe(pme_done) || pipe(nonpme_go) || pipe(nonpme_done) ||
	    pipe(go_child))
		die("pipe");
	pidns_fd = open_dev(PCNTOPENALL);
	if (pidns_fd < 0) {
		row("open", -pidns_fd);
		return 0;
	}
	get_info(pidns_fd);
	row("setitems", io_long(pidns_fd, PCNTSETITEMS, PFM_COUNTERS));
	row("select", select_cycles(pidns_fd));
	/* Created before any LOGSELECT: never PME. */
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		if (read(go_child[0], &c, 1) != 1)
			_exit(1);
		burn(200000000UL);
		_exit(0);
	}
	if (pthread_create(&other, 0, nonpme_thread, 0))
		die("pthread_create");
	if (pthread_create(&pme, 0, pme_thread, 0))
		die("pthread_create");
	if (read(pme_done[0], &c, 1) != 1)	/* its LOGSELECT is done */
		die("read");
	wait_asleep(pme_tid);

	/* Phase 1. */
	row("clearcnt1", io(pidns_fd, PCNTCLEARCNT, 0));
	row("renable1", io(pidns_fd, PCNTRENABLE, 0));
	if (write(nonpme_go[1], "x", 1) != 1 || write(go_child[1], "x", 1) != 1)
		die("write");
	if (read(nonpme_done[0], &c, 1) != 1)
		die("read");
	if (waitpid(child, &status, 0) != child)
		die("waitpid");
	row("rdisable1", io(pidns_fd, PCNTRDISABLE, 0));
	row("getcnt1", counter0(pidns_fd, &phase1));

	/* Phase 2. */
	row("clearcnt2", io(pidns_fd, PCNTCLEARCNT, 0));
	row("renable2", io(pidns_fd, PCNTRENABLE, 0));
	if (write(pme_go[1], "x", 1) != 1)
		die("write");
	if (read(pme_done[0], &c, 1) != 1)
		die("read");
	row("rdisable2", io(pidns_fd, PCNTRDISABLE, 0));
	row("getcnt2", counter0(pidns_fd, &phase2));
	pthread_join(pme, 0);
	pthread_join(other, 0);
	get_info(pidns_fd);
	printf("phase1=%lu phase2=%lu pme_cpu_ns=%lu khz=%lu fidelity=%lu period=%lu\n",
	    phase1, phase2, pme_ns, info.pi_cpu_khz, info.pi_fidelity[0], info.pi_period[0]);
	close(pidns_fd);
	return 0;
}

/* poll: N opens one millisecond apart, each closed at once if it succeeds. */
static int
cmd_poll(const char *mode, int n)
{
	int flags, cpu = -1, i, fd;
	long ebusy = 0, opened = 0, other = 0;
	int last_other = 0;

	if (!strcmp(mode, "all"))
		flags = PCNTOPENALL;
	else if (!strcmp(mode, "each"))
		flags = PCNTOPENEACH;
	else if (!strncmp(mode, "one", 3)) {
		flags = PCNTOPENONE;
		cpu = atoi(mode + 3);
		if (bind_cpu(cpu))
			die("sched_setaffinity");
	} else {
		fprintf(stderr, "mode all|each|oneN\n");
		return 2;
	}
	for (i = 0; i < n; i++) {
		fd = open(device, O_RDONLY | flags);
		if (fd >= 0) {
			opened++;
			close(fd);
		} else if (errno == EBUSY) {
			ebusy++;
		} else {
			other++;
			last_other = errno;
		}
		sleep_ms(1);
	}
	printf("attempts=%d ebusy=%ld opened=%ld other=%ld last_other=%s\n",
	    n, ebusy, opened, other, errname(last_other));
	return 0;
}

/*
 * peek: what a fresh ALL open shows: selection, items, counts.  With
 * "select" it then selects cycles every 65536 (a selection of its own).
 */
static int
cmd_peek(int select)
{
	unsigned long c0 = 0;
	int fd, i;

	fd = open_dev(PCNTOPENALL);
	if (fd < 0) {
		row("open", -fd);
		return 0;
	}
	get_info(fd);
	printf("uid=%d", (int)geteuid());
	for (i = 0; i < PFM_INFO_MAX_COUNTERS; i++)
		printf(" period%d=%lu fidelity%d=%lu", i, info.pi_period[i], i, info.pi_fidelity[i]);
	printf(" items=%lu flags=%lu\n", info.pi_items, info.pi_flags);
	row("getcnt", counter0(fd, &c0));
	printf("count0=%lu\n", c0);
	if (select) {
		struct iccsr m;

		memset(&m, 0, sizeof m);
		m.iccsr_mux0 = PF_CYCLES;
		m.iccsr_pc0 = PF_C0_INT_EVERY_65536;
		m.iccsr_disable = 2;
		row("select", io(fd, PCNTSETMUX, &m));
	}
	close(fd);
	return 0;
}

/*
 * wedge: items without PFM_COUNTERS (the sampling path), a forked child
 * calls PCNTLOGSELECT on the inherited descriptor and exits; then the
 * parent changes every setting.  B first enables under LOGSELECT, so the
 * child's events are live when it exits.
 */
static int
cmd_wedge(const char *variant)
{
	struct pfipls ipl[64], *ip = ipl;
	unsigned long c0 = 0;
	int fd, status, result[2];
	pid_t child;
	int e;

	fd = open_dev(PCNTOPENALL);
	if (fd < 0) {
		row("open", -fd);
		return 0;
	}
	get_info(fd);
	if (pipe(result))
		die("pipe");
	row("setitems_ipl", io_long(fd, PCNTSETITEMS, PFM_IPL));
	row("select", select_cycles(fd));
	if (variant[0] == 'B') {
		row("parent_logselect", io(fd, PCNTLOGSELECT, 0));
		row("renable", io(fd, PCNTRENABLE, 0));
	}
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		e = io(fd, PCNTLOGSELECT, 0);
		if (write(result[1], &e, sizeof e) != sizeof e)
			_exit(1);
		_exit(0);
	}
	if (read(result[0], &e, sizeof e) != sizeof e)
		die("read");
	if (waitpid(child, &status, 0) != child)
		die("waitpid");
	row("child_logselect", e);
	/* The child is gone.  Every setting change reopens the host events. */
	if (info.pi_family == PFM_FAMILY_EV4) {
		struct iccsr m;

		memset(&m, 0, sizeof m);
		m.iccsr_mux0 = PF_CYCLES;
		m.iccsr_pc0 = PF_C0_INT_EVERY_65536;
		m.iccsr_disable = 2;
		row("setmux", io(fd, PCNTSETMUX, &m));
	} else {
		row("setmux", select_cycles(fd));
	}
	row("logselect", io(fd, PCNTLOGSELECT, 0));
	row("setitems", io_long(fd, PCNTSETITEMS, PFM_IPL | PFM_COUNTERS));
	row("renable", io(fd, PCNTRENABLE, 0));
	burn(100000000UL);
	row("rdisable", io(fd, PCNTRDISABLE, 0));
	row("getcnt", counter0(fd, &c0));
	row("getiplhis", io(fd, PCNTGETIPLHIS, &ip));
	printf("count0=%lu\n", c0);
	close(fd);
	return 0;
}

/*
 * pme: N threads, one after another, each calls LOGSELECT and stays; with
 * "exit" each exits once it has (and is joined before the next starts).
 */
static int pme_fd;
static pthread_mutex_t pme_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pme_cond = PTHREAD_COND_INITIALIZER;
static int pme_answered, pme_release, pme_exit;
static int pme_errno;

static void *
pme_caller(void *arg)
{
	int e = io(pme_fd, PCNTLOGSELECT, 0);

	(void)arg;
	pthread_mutex_lock(&pme_lock);
	pme_errno = e;
	pme_answered++;
	pthread_cond_broadcast(&pme_cond);
	while (!pme_release && !pme_exit)
		pthread_cond_wait(&pme_cond, &pme_lock);
	pthread_mutex_unlock(&pme_lock);
	return 0;
}

static int
cmd_pme(int n, int exit_early)
{
	pthread_t t[64];
	char name[32];
	int i;

	if (n > 64)
		n = 64;
	pme_exit = exit_early;
	pme_fd = open_dev(PCNTOPENALL);
	if (pme_fd < 0) {
		row("open", -pme_fd);
		return 0;
	}
	get_info(pme_fd);
	row("setitems", io_long(pme_fd, PCNTSETITEMS, PFM_COUNTERS));
	row("select", select_cycles(pme_fd));
	for (i = 0; i < n; i++) {
		if (pthread_create(&t[i], 0, pme_caller, 0))
			die("pthread_create");
		pthread_mutex_lock(&pme_lock);
		while (pme_answered < i + 1)
			pthread_cond_wait(&pme_cond, &pme_lock);
		snprintf(name, sizeof name, "thread%d", i + 1);
		row(name, pme_errno);
		pthread_mutex_unlock(&pme_lock);
		if (pme_exit)
			pthread_join(t[i], 0);
	}
	/* The open still works for the threads it has. */
	row("renable", io(pme_fd, PCNTRENABLE, 0));
	row("rdisable", io(pme_fd, PCNTRDISABLE, 0));
	pthread_mutex_lock(&pme_lock);
	pme_release = 1;
	pthread_cond_broadcast(&pme_cond);
	pthread_mutex_unlock(&pme_lock);
	for (i = 0; !pme_exit && i < n; i++)
		pthread_join(t[i], 0);
	close(pme_fd);
	return 0;
}

/*
 * profile: a ONE open of CPU, PFM_PROFILING, then one user range of each
 * size given (start 4 MiB, stride 4: a quarter of the range in buckets).
 * With "hold" it then says "holding" and keeps the open until stdin ends.
 */
static int
cmd_profile(int argc, char **argv)
{
	addr_range_t r;
	char name[64], buf[64];
	int fd, i, hold = 0;

	if (bind_cpu(atoi(argv[0])))
		die("sched_setaffinity");
	fd = open_dev(PCNTOPENONE);
	if (fd < 0) {
		row("open", -fd);
		return 0;
	}
	row("open", 0);
	row("setitems", io_long(fd, PCNTSETITEMS, PFM_COUNTERS | PFM_PROFILING));
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "hold")) {
			hold = 1;
			continue;
		}
		memset(&r, 0, sizeof r);
		r.start = 4UL << 20;
		r.end = r.start + strtoul(argv[i], 0, 0);
		r.stride = 4;
		snprintf(name, sizeof name, "range_%s", argv[i]);
		row(name, io(fd, PCNTSETURANGE, &r));
	}
	if (hold) {
		printf("holding\n");
		fflush(stdout);
		while (read(0, buf, sizeof buf) > 0)
			;
	}
	close(fd);
	return 0;
}

/* mmap: MAP_SHARED and MAP_PRIVATE of an open device. */
static int
cmd_mmap(void)
{
	void *p;
	int fd;

	fd = open_dev(PCNTOPENALL);
	if (fd < 0) {
		row("open", -fd);
		return 0;
	}
	p = mmap(0, 4096, PROT_READ, MAP_SHARED, fd, 0);
	row("map_shared", p == MAP_FAILED ? errno : 0);
	if (p != MAP_FAILED)
		munmap(p, 4096);
	p = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	row("map_private", p == MAP_FAILED ? errno : 0);
	/*
	 * Not touched: the file's size is 0, so its first page lies past the
	 * end of the file and the kernel answers the fault with SIGBUS.
	 */
	if (p != MAP_FAILED)
		munmap(p, 4096);
	/* The device still answers. */
	row("getinfo", io(fd, PCNTGETINFO, &info));
	close(fd);
	return 0;
}

/*
 * flood: for at least SECONDS and at least MIN rounds, open, three refused
 * ioctls (an unknown number, PCNTLOGALL, PCNTSETITEMS 0), close.
 */
static int
cmd_flood(int seconds, long min)
{
	struct timespec start, now;
	long rounds = 0, refused = 0, busy = 0, unexpected = 0;
	int fd;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= seconds && rounds >= min)
			break;
		fd = open(device, O_RDONLY | PCNTOPENALL);
		if (fd < 0) {
			/* Our own last close may still be on its way (see open_dev). */
			if (errno == EBUSY)
				busy++;
			else
				unexpected++;
			continue;
		}
		refused += io(fd, _IO('P', 99), 0) == EINVAL;
		refused += io(fd, PCNTLOGALL, 0) == EACCES;
		refused += io_long(fd, PCNTSETITEMS, 0) == EINVAL;
		close(fd);
		rounds++;
	}
	printf("rounds=%ld refused=%ld busy=%ld unexpected=%ld\n", rounds, refused, busy,
	    unexpected);
	return 0;
}

/*
 * hammer: N rounds of open (a random mode; ONE bound to a random CPU), a
 * few random requests, close.  Every errno outside the device's table is
 * printed and counted.
 */
static unsigned long rng;

static unsigned long
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int
table_errno(int e)
{
	switch (e) {
	case 0: case EBUSY: case EINVAL: case EFAULT: case ENOMEM: case ENOSPC:
	case EOPNOTSUPP: case EPERM: case EACCES:
	/* A pointer ioctl over FUSE while the user's stores fill its budget
	 * (docs/device.md §9): 32 processes of two users at once can. */
	case EAGAIN:
		return 1;
	}
	return 0;
}

static int
cmd_hammer(int n, unsigned long seed)
{
	static const int modes[] = { PCNTOPENALL, PCNTOPENEACH, PCNTOPENONE, 0 };
	long opened = 0, busy = 0, calls = 0, unexpected = 0;
	int ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	int i, j, fd, mode, e = 0;
	unsigned long c0;

	rng = seed * 2654435761UL + 1;
	for (i = 0; i < n; i++) {
		mode = modes[rnd() % 4];
		if (mode == PCNTOPENONE)
			bind_cpu((int)(rnd() % (unsigned long)ncpus));
		fd = open(device, O_RDONLY | mode);
		if (fd < 0) {
			if (errno == EBUSY)
				busy++;
			else if (!table_errno(errno)) {
				unexpected++;
				printf("unexpected open errno=%s\n", errname(errno));
			}
			continue;
		}
		opened++;
		if (info.pi_version == 0)
			get_info(fd);
		for (j = 0; j < 6; j++) {
			switch (rnd() % 8) {
			case 0: e = io_long(fd, PCNTSETITEMS, (long)(rnd() % 8)); break;
			case 1: e = select_cycles(fd); break;
			case 2: e = io(fd, PCNTLOGSELECT, 0); break;
			case 3: e = io(fd, PCNTRENABLE, 0); break;
			case 4: e = counter0(fd, &c0); break;
			case 5: e = io(fd, PCNTRDISABLE, 0); break;
			case 6: e = io(fd, PCNTGETINFO, &info); break;
			case 7: e = io(fd, PCNTCLEARCNT, 0); break;
			}
			calls++;
			if (!table_errno(e)) {
				unexpected++;
				printf("unexpected ioctl errno=%s\n", errname(e));
			}
		}
		close(fd);
	}
	printf("opened=%ld ebusy=%ld calls=%ld unexpected=%ld\n", opened, busy, calls, unexpected);
	return 0;
}

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/*
 * reopen: N rounds of open, PCNTGETINFO, close, as a legacy program that
 * opens the device for each measurement does.  The next open comes right
 * after the close, while the close's RELEASE may still be on its way to the
 * daemon; the daemon waits up to 50 ms for a process's own release
 * (docs/device.md §2), so such an open must not be refused sooner.
 * Refusals are told apart by how long they took: one answered before the
 * grace could have run out ("fast") had no reason to be; one after it may
 * be a release slower than the grace on a loaded machine ("slow").  Load
 * only makes an answer later, never sooner.
 */
static int
cmd_reopen(long n)
{
	long i, fast = 0, slow = 0, other = 0;
	double t0, took, worst_fast = 0;
	int fd, last_other = 0;

	for (i = 0; i < n; i++) {
		t0 = now_ms();
		fd = open(device, O_RDONLY | PCNTOPENALL);
		took = now_ms() - t0;
		if (fd < 0) {
			if (errno != EBUSY) {
				other++;
				last_other = errno;
			} else if (took < 50.0) {
				fast++;
				if (took > worst_fast)
					worst_fast = took;
			} else {
				slow++;
			}
			continue;
		}
		if (io(fd, PCNTGETINFO, &info) != 0)
			other++;
		close(fd);
	}
	printf("rounds=%ld fast_ebusy=%ld slow_ebusy=%ld other=%ld last_other=%s "
	    "slowest_fast_ebusy_ms=%.3f\n", n, fast, slow, other, errname(last_other), worst_fast);
	return 0;
}

/* trunc: an open with O_TRUNC (the kernel asks for write permission). */
static int
cmd_trunc(void)
{
	int fd = open(device, O_RDONLY | O_TRUNC | PCNTOPENALL);

	row("open_trunc", fd < 0 ? errno : 0);
	if (fd >= 0)
		close(fd);
	return 0;
}

/*
 * hold: a holder in MODE (all, each, oneN) counting cycles system-wide,
 * reading its counts in a loop until stdin ends: every call must succeed
 * and the count never go back.  Says "ready" once counting.
 */
static int
cmd_hold(const char *mode)
{
	struct pollfd in = { 0, POLLIN, 0 };
	unsigned long c0, last = 0;
	long calls = 0, errors = 0, backwards = 0;
	int flags, fd, e, last_error = 0;

	if (!strcmp(mode, "all"))
		flags = PCNTOPENALL;
	else if (!strcmp(mode, "each"))
		flags = PCNTOPENEACH;
	else if (!strncmp(mode, "one", 3)) {
		flags = PCNTOPENONE;
		if (bind_cpu(atoi(mode + 3)))
			die("sched_setaffinity");
	} else {
		fprintf(stderr, "mode all|each|oneN\n");
		return 2;
	}
	fd = open_dev(flags);
	if (fd < 0) {
		row("open", -fd);
		return 0;
	}
	get_info(fd);
	row("setitems", io_long(fd, PCNTSETITEMS, PFM_COUNTERS));
	row("select", select_cycles(fd));
	row("renable", io(fd, PCNTRENABLE, 0));
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		if (calls % 64 == 0 && poll(&in, 1, 0) > 0)
			break;		/* stdin readable: it has ended */
		e = counter0(fd, &c0);
		calls++;
		if (e) {
			errors++;
			last_error = e;
			continue;
		}
		if (c0 < last)
			backwards++;
		last = c0;
	}
	printf("calls=%ld errors=%ld last_error=%s backwards=%ld last=%lu\n", calls, errors,
	    errname(last_error), backwards, last);
	close(fd);
	return 0;
}

/*
 * execclose: a legacy tool's pattern: open the device close-on-exec, count,
 * run a program with fork and exec, read the counts.  The exec closes the
 * child's copy of the descriptor (a FUSE FLUSH from a process in the middle
 * of execve).  The child gets 30 s; then it is killed and the row says
 * "HANG".
 */
static int
cmd_execclose(void)
{
	unsigned long c0 = 0;
	int fd, status, i;
	pid_t child;

	fd = open_dev(PCNTOPENALL | O_CLOEXEC);
	if (fd < 0) {
		row("open", -fd);
		return 0;
	}
	get_info(fd);
	row("setitems", io_long(fd, PCNTSETITEMS, PFM_COUNTERS));
	row("select", select_cycles(fd));
	row("logselect", io(fd, PCNTLOGSELECT, 0));
	row("renable", io(fd, PCNTRENABLE, 0));
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		execl("/bin/true", "true", (char *)0);
		_exit(127);
	}
	for (i = 0; i < 3000; i++) {
		if (waitpid(child, &status, WNOHANG) == child)
			break;
		sleep_ms(10);
	}
	if (i == 3000) {
		printf("row exec_child HANG\n");
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	} else {
		row("exec_child", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : EINTR);
	}
	row("getcnt_after", counter0(fd, &c0));
	/*
	 * Another process that closes its inherited copy and opens: the
	 * holder still holds the device, so its open is refused at once, not
	 * after the wait a holder's own close earns.
	 */
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		double t0;
		int e;

		close(fd);
		t0 = now_ms();
		e = open(device, O_RDONLY | PCNTOPENALL);
		printf("contender_ms=%.0f\n", now_ms() - t0);
		row("contender_open", e < 0 ? errno : 0);
		_exit(0);
	}
	if (waitpid(child, &status, 0) != child)
		die("waitpid");
	close(fd);
	return 0;
}

/*
 * reads: a user profile of a BYTES range (a quarter of it in buckets),
 * then T threads each read(2) the whole profile N times from the same
 * descriptor.  Each read must return PCNTGETRSIZE bytes (docs/device.md
 * §6: a read is served from one snapshot taken at its start).
 */
static int reads_fd, reads_rounds;
static long reads_size;

static void *
reads_thread(void *arg)
{
	long *shorts = arg;
	char *buf = malloc((size_t)reads_size);
	ssize_t n;
	int i;

	for (i = 0; buf && i < reads_rounds; i++) {
		n = read(reads_fd, buf, (size_t)reads_size);
		if (n != reads_size)
			(*shorts)++;
	}
	free(buf);
	return 0;
}

static int
cmd_reads(unsigned long bytes, int rounds, int threads)
{
	pthread_t t[16];
	long shorts[16] = { 0 }, total = 0;
	addr_range_t r;
	int i;

	if (threads > 16)
		threads = 16;
	reads_rounds = rounds;
	reads_fd = open_dev(PCNTOPENALL);
	if (reads_fd < 0) {
		row("open", -reads_fd);
		return 0;
	}
	row("setitems", io_long(reads_fd, PCNTSETITEMS, PFM_COUNTERS | PFM_PROFILING));
	memset(&r, 0, sizeof r);
	r.start = 4UL << 20;
	r.end = r.start + bytes;
	r.stride = 4;
	row("seturange", io(reads_fd, PCNTSETURANGE, &r));
	row("getrsize", io(reads_fd, PCNTGETRSIZE, &reads_size));
	for (i = 0; i < threads; i++)
		if (pthread_create(&t[i], 0, reads_thread, &shorts[i]))
			die("pthread_create");
	for (i = 0; i < threads; i++) {
		pthread_join(t[i], 0);
		total += shorts[i];
	}
	printf("rsize=%ld reads=%d short=%ld\n", reads_size, rounds * threads, total);
	close(reads_fd);
	return 0;
}

/*
 * together THREADS CALLS MODE: one program's threads reading their counts
 * at once, as a threaded tool's do: one ALL open, counting the selected
 * threads with MODE "select" (so every request goes through the open's
 * worker), nothing with "idle" (reads answered on the serving threads);
 * each thread CALLS times PCNTGETCNT, every third PCNTGETIPLHIS.  Prints
 * how many calls failed with EAGAIN and with anything else.
 */
static int together_fd, together_calls;
static long together_eagain, together_other;
static int together_errno;
static pthread_mutex_t together_lock = PTHREAD_MUTEX_INITIALIZER;

static void *
together_thread(void *arg)
{
	struct pfcntrs c[64], *p = c;
	struct pfipls h[64], *ph = h;
	long eagain = 0, other = 0;
	int i, e, last = 0;

	for (i = 0; i < together_calls; i++) {
		e = i % 3 == 2 ? io(together_fd, PCNTGETIPLHIS, &ph) :
		    io(together_fd, PCNTGETCNT, &p);
		if (e == EAGAIN)
			eagain++;
		else if (e) {
			other++;
			last = e;
		}
	}
	pthread_mutex_lock(&together_lock);
	together_eagain += eagain;
	together_other += other;
	if (last)
		together_errno = last;
	pthread_mutex_unlock(&together_lock);
	return arg;
}

static int
cmd_together(int threads, int calls, const char *mode)
{
	pthread_t t[1024];
	pthread_attr_t attr;
	int i;

	if (threads < 1 || threads > 1024)
		die("together: THREADS");
	together_calls = calls;
	together_fd = open_dev(PCNTOPENALL);
	if (together_fd < 0) {
		row("open", -together_fd);
		return 0;
	}
	row("setitems", io_long(together_fd, PCNTSETITEMS, PFM_COUNTERS | PFM_IPL));
	if (!strcmp(mode, "select")) {
		row("logselect", io(together_fd, PCNTLOGSELECT, 0));
		row("enable", io(together_fd, PCNTRENABLE, 0));
	}
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 65536);
	for (i = 0; i < threads; i++)
		if (pthread_create(&t[i], &attr, together_thread, 0))
			die("pthread_create");
	for (i = 0; i < threads; i++)
		pthread_join(t[i], 0);
	printf("calls=%ld eagain=%ld other=%ld\n", (long)threads * calls,
	    together_eagain, together_other);
	row("other", together_errno);
	close(together_fd);
	return 0;
}

/* A ONE open of `cpu` counting cycles on counter 0, for stall and latency;
 * -1 (after its "row open") if the open failed. */
static int
open_counting_one(int cpu)
{
	int fd;

	if (bind_cpu(cpu))
		die("sched_setaffinity");
	fd = open_dev(PCNTOPENONE);
	if (fd < 0) {
		row("open", -fd);
		return -1;
	}
	get_info(fd);
	row("setitems", io_long(fd, PCNTSETITEMS, PFM_COUNTERS));
	row("select", select_cycles(fd));
	return fd;
}

/* stall: the attack on the daemon's stores.  A ONE open of OPENCPU, then,
 * from threads on RUNCPU, PCNTGETCNT whose pointer is an untouched page of
 * FILE mapped MAP_PRIVATE: the store faults that page in, which waits for
 * FILE's filesystem.  "started" once the threads run; "row getcnt_I ERRNO"
 * as each call returns. */
static char *stall_page;
static int stall_fd;

static void *
stall_thread(void *arg)
{
	long i = (long)arg;
	struct pfcntrs *p = (struct pfcntrs *)(stall_page + 64 * i);
	char name[32];

	snprintf(name, sizeof name, "getcnt_%ld", i);
	row(name, io(stall_fd, PCNTGETCNT, &p));
	return 0;
}

static int
cmd_stall(char **argv)
{
	pthread_t t[64];
	long i, n = atol(argv[3]);
	int file;

	if (n < 1 || n > 64)
		die("stall: 1 to 64 threads");
	stall_fd = open_counting_one(atoi(argv[0]));
	if (stall_fd < 0)
		return 0;
	file = open(argv[2], O_RDONLY);
	if (file < 0)
		die(argv[2]);
	stall_page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, file, 0);
	if (stall_page == MAP_FAILED)
		die("mmap");
	if (bind_cpu(atoi(argv[1])))
		die("sched_setaffinity");
	for (i = 0; i < n; i++)
		if (pthread_create(&t[i], 0, stall_thread, (void *)i))
			die("pthread_create");
	printf("started\n");
	fflush(stdout);
	for (i = 0; i < n; i++)
		pthread_join(t[i], 0);
	close(stall_fd);
	return 0;
}

static int
cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return x < y ? -1 : x > y;
}

/* latency: N PCNTGETCNT of a ONE open of CPU, each timed; prints the p50
 * and p99 in ns and the errno of the last call that failed (0 if none). */
static int
cmd_latency(char **argv)
{
	struct pfcntrs c, *p = &c;
	struct timespec a, b;
	long i, n = atol(argv[1]), *ns;
	int fd, e, failed = 0;

	if (n < 1)
		die("latency: N");
	fd = open_counting_one(atoi(argv[0]));
	if (fd < 0)
		return 0;
	row("enable", io(fd, PCNTRENABLE, 0));
	ns = calloc(n, sizeof *ns);
	if (!ns)
		die("calloc");
	for (i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &a);
		e = io(fd, PCNTGETCNT, &p);
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (e)
			failed = e;
		ns[i] = (b.tv_sec - a.tv_sec) * 1000000000L + b.tv_nsec - a.tv_nsec;
	}
	qsort(ns, n, sizeof *ns, cmp_long);
	printf("calls=%ld p50_ns=%ld p99_ns=%ld max_ns=%ld\n", n, ns[n / 2],
	    ns[n * 99 / 100], ns[n - 1]);
	row("getcnt", failed);
	close(fd);
	return 0;
}

/*
 * setuid PROG: a forked child takes the PME bit, enables, and execs PROG
 * (which burns CPU for a while): a setuid program, or the same program
 * without the bit as the control.  Meanwhile the parent, which keeps the
 * descriptor, changes the items, so the daemon opens the host events
 * again, and reads how far counter 0 moves in half a second: grew=N.
 */
static int
cmd_setuid(const char *prog)
{
	unsigned long before = 0, after = 0;
	int fd, ready[2], e, status;
	pid_t child;

	fd = open_dev(PCNTOPENALL);
	if (fd < 0) {
		row("open", -fd);
		return 0;
	}
	get_info(fd);
	row("setitems", io_long(fd, PCNTSETITEMS, PFM_COUNTERS));
	row("select", select_cycles(fd));
	if (pipe(ready))
		die("pipe");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		e = io(fd, PCNTLOGSELECT, 0);
		if (e == 0)
			e = io(fd, PCNTRENABLE, 0);
		if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
			_exit(2);
		if (write(ready[1], &e, sizeof e) != sizeof e)
			_exit(2);
		execl(prog, prog, (char *)0);
		_exit(127);
	}
	if (read(ready[0], &e, sizeof e) != sizeof e)
		die("read");
	row("child_logselect", e);
	sleep_ms(300);
	row("change", io_long(fd, PCNTSETITEMS, PFM_COUNTERS | PFM_IPL));
	sleep_ms(100);
	row("getcnt", counter0(fd, &before));
	sleep_ms(500);
	counter0(fd, &after);
	printf("grew=%lu\n", after - before);
	if (waitpid(child, &status, 0) != child)
		die("waitpid");
	close(fd);
	return 0;
}

/*
 * handdown (run as root): a system-wide open, counting, kept by a child
 * that drops to uid and gid 65534, as a descriptor passed on would be.  The
 * child's rows: what it may still do (read, stop) and what it may not
 * start (new items, enabling again).
 */
static int
cmd_handdown(void)
{
	unsigned long c0 = 0;
	int fd, status;
	pid_t child;

	fd = open_dev(PCNTOPENALL);
	if (fd < 0) {
		row("open", -fd);
		return 0;
	}
	get_info(fd);
	row("root_setitems", io_long(fd, PCNTSETITEMS, PFM_COUNTERS));
	row("root_select", select_cycles(fd));
	row("root_logall", io(fd, PCNTLOGALL, 0));
	row("root_renable", io(fd, PCNTRENABLE, 0));
	fflush(stdout);
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		if (setgroups(0, 0) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			die("dropping to nobody");
		row("nobody_setitems_ipl", io_long(fd, PCNTSETITEMS, PFM_COUNTERS | PFM_IPL));
		row("nobody_setitems_profiling",
		    io_long(fd, PCNTSETITEMS, PFM_COUNTERS | PFM_PROFILING));
		burn(20000000UL);
		row("nobody_getcnt", counter0(fd, &c0));
		printf("nobody_count0=%lu\n", c0);
		row("nobody_rdisable", io(fd, PCNTRDISABLE, 0));
		row("nobody_renable", io(fd, PCNTRENABLE, 0));
		fflush(stdout);
		_exit(0);
	}
	if (waitpid(child, &status, 0) != child)
		die("waitpid");
	row("root_setitems_ipl", io_long(fd, PCNTSETITEMS, PFM_COUNTERS | PFM_IPL));
	close(fd);
	return 0;
}

/*
 * calls CPU SECONDS: a ONE open of CPU, counting; PCNTGETCNT as often as it
 * can for SECONDS: "calls=N", and the errno of the last call that failed.
 */
static int
cmd_calls(int cpu, double seconds)
{
	struct pfcntrs c, *p = &c;
	long calls = 0;
	int fd, e, failed = 0;
	double end;

	fd = open_counting_one(cpu);
	if (fd < 0)
		return 0;
	row("enable", io(fd, PCNTRENABLE, 0));
	end = now_ms() + seconds * 1e3;
	while (now_ms() < end) {
		e = io(fd, PCNTGETCNT, &p);
		if (e)
			failed = e;
		calls++;
	}
	printf("calls=%ld\n", calls);
	row("getcnt", failed);
	close(fd);
	return 0;
}

/*
 * inherit OPENCPU P K H SECONDS: a ONE open of OPENCPU counting; P threads
 * take the PME bit and each starts K sleeping threads (which inherit the
 * open's host events); then H threads bound to the other CPU change the
 * open's items back and forth for SECONDS ("ready" once they run):
 * "changes=N", and the errno of the last change that failed.
 */
static int inh_fd, inh_kids, inh_cpu;
static volatile int inh_stop;
static long inh_changes;
static int inh_failed;
static pthread_barrier_t inh_selected, inh_spawned;

static void *
inh_kid(void *arg)
{
	(void)arg;
	while (!inh_stop)
		pause();
	return 0;
}

static void *
inh_pme(void *arg)
{
	pthread_attr_t attr;
	pthread_t t;
	int i, e = io(inh_fd, PCNTLOGSELECT, 0);

	if (e) {
		row("logselect", e);
		exit(0);
	}
	pthread_barrier_wait(&inh_selected);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 65536);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (i = 0; i < inh_kids; i++)
		if (pthread_create(&t, &attr, inh_kid, arg))
			die("pthread_create (a child of a PME thread)");
	pthread_barrier_wait(&inh_spawned);
	while (!inh_stop)
		pause();
	return 0;
}

static void *
inh_hammer(void *arg)
{
	long k = 0;
	int e;

	(void)arg;
	if (bind_cpu(inh_cpu))
		die("sched_setaffinity");
	while (!inh_stop) {
		e = io_long(inh_fd, PCNTSETITEMS, (k++ & 1) ? PFM_COUNTERS : PFM_COUNTERS | PFM_IPL);
		if (e)
			inh_failed = e;
		__sync_fetch_and_add(&inh_changes, 1);
	}
	return 0;
}

static int
cmd_inherit(char **argv)
{
	int open_cpu = atoi(argv[0]), pme = atoi(argv[1]), hammers = atoi(argv[3]), i;
	double seconds = atof(argv[4]);
	pthread_t t[128];

	inh_kids = atoi(argv[2]);
	if (pme < 1 || pme > 64 || hammers < 1 || hammers > 64)
		die("inherit: P and H are 1..64");
	inh_cpu = !open_cpu;
	inh_fd = open_counting_one(open_cpu);
	if (inh_fd < 0)
		return 0;
	pthread_barrier_init(&inh_selected, 0, pme + 1);
	pthread_barrier_init(&inh_spawned, 0, pme + 1);
	for (i = 0; i < pme; i++)
		if (pthread_create(&t[i], 0, inh_pme, 0))
			die("pthread_create");
	pthread_barrier_wait(&inh_selected);
	row("enable", io(inh_fd, PCNTRENABLE, 0));
	pthread_barrier_wait(&inh_spawned);
	for (i = 0; i < hammers; i++)
		if (pthread_create(&t[pme + i], 0, inh_hammer, 0))
			die("pthread_create");
	printf("ready\n");
	fflush(stdout);
	usleep((useconds_t)(seconds * 1e6));
	inh_stop = 1;
	printf("changes=%ld\n", inh_changes);
	row("changes", inh_failed);
	fflush(stdout);
	/* Thousands of sleeping threads: leave without waking each. */
	_exit(0);
}

int
main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: hostile_client CMD DEVICE [ARGS]\n");
		return 2;
	}
	setvbuf(stdout, 0, _IOLBF, 0);
	device = argv[2];
	if (!strcmp(argv[1], "userns"))
		return cmd_userns();
	if (!strcmp(argv[1], "pidns"))
		return cmd_pidns();
	if (!strcmp(argv[1], "poll") && argc == 5)
		return cmd_poll(argv[3], atoi(argv[4]));
	if (!strcmp(argv[1], "peek"))
		return cmd_peek(argc > 3 && !strcmp(argv[3], "select"));
	if (!strcmp(argv[1], "wedge") && argc == 4)
		return cmd_wedge(argv[3]);
	if (!strcmp(argv[1], "pme") && argc >= 4)
		return cmd_pme(atoi(argv[3]), argc > 4 && !strcmp(argv[4], "exit"));
	if (!strcmp(argv[1], "profile") && argc >= 5)
		return cmd_profile(argc - 3, argv + 3);
	if (!strcmp(argv[1], "mmap"))
		return cmd_mmap();
	if (!strcmp(argv[1], "flood") && argc == 5)
		return cmd_flood(atoi(argv[3]), atol(argv[4]));
	if (!strcmp(argv[1], "hammer") && argc == 5)
		return cmd_hammer(atoi(argv[3]), strtoul(argv[4], 0, 0));
	if (!strcmp(argv[1], "reopen") && argc == 4)
		return cmd_reopen(atol(argv[3]));
	if (!strcmp(argv[1], "trunc"))
		return cmd_trunc();
	if (!strcmp(argv[1], "hold") && argc == 4)
		return cmd_hold(argv[3]);
	if (!strcmp(argv[1], "execclose"))
		return cmd_execclose();
	if (!strcmp(argv[1], "reads") && argc == 6)
		return cmd_reads(strtoul(argv[3], 0, 0), atoi(argv[4]), atoi(argv[5]));
	if (!strcmp(argv[1], "together") && argc == 6)
		return cmd_together(atoi(argv[3]), atoi(argv[4]), argv[5]);
	if (!strcmp(argv[1], "stall") && argc == 7)
		return cmd_stall(argv + 3);
	if (!strcmp(argv[1], "handdown"))
		return cmd_handdown();
	if (!strcmp(argv[1], "setuid") && argc == 4)
		return cmd_setuid(argv[3]);
	if (!strcmp(argv[1], "latency") && argc == 5)
		return cmd_latency(argv + 3);
	if (!strcmp(argv[1], "calls") && argc == 5)
		return cmd_calls(atoi(argv[3]), atof(argv[4]));
	if (!strcmp(argv[1], "inherit") && argc == 8)
		return cmd_inherit(argv + 3);
	fprintf(stderr, "hostile_client: unknown command or arguments: %s\n", argv[1]);
	return 2;
}
