/*
 * ev5count -- count three 21164 (EV5) events in user mode over a workload,
 * with /dev/pfcntr.
 *
 * usage: ev5count [-each] [-kernel | -allmodes] [-mux0 EVENT] [-mux1 EVENT]
 *                 [-mux2 EVENT] [-ms N] [-sys] [-- command [args ...]]
 *
 *	-each		open PCNTOPENEACH and print one line per CPU
 *			(default PCNTOPENALL, one aggregated line).
 *	-kernel		count kernel mode only (PF5_CTXT_KERNEL); default
 *			is user mode only (PF5_CTXT_USER).
 *	-allmodes	count every mode (PF5_CTXT_ALL_MODES).
 *	-muxN EVENT	counter N's event, by PF5_MUXn_* name or number
 *			(defaults PF5_MUX0_CYCLES, PF5_MUX1_FLOW_CHANGE,
 *			PF5_MUX2_C_CYCLES).
 *	-ms N		busy-loop N ms of CPU time (default 200) ...
 *	-sys		... making a system call every few hundred
 *			instructions, so kernel mode gets its share ...
 *	-- command	... or run this command and wait for it.
 *
 * Only this process and its children are counted (PF5_CTXT_THIS_PROC sets
 * their PME bit).  The counters are started with PCNT5RESTART and read with
 * PCNT5READCNTRS, whose values are (interrupts << width) + the hardware
 * counter: the event counts.  A counter whose event this host cannot count
 * (EOPNOTSUPP) is left off and reported as unavailable.  Output:
 *
 *	cpu=all pr_cycle=N cntr0=N cntr1=N cntr2=N	(cpu=K per CPU with -each)
 *	counter0 EVENT=N|unavailable			(one line per counter)
 *	workload_cpu_ns=N workload_user_ns=N workload_sys_ns=N
 *
 * The device is $PFM_DEVICE if set, else /dev/pfcntr.  An open that finds
 * no daemon (ENOENT, ENOTCONN, ECONNABORTED) asks "is pfmd running?"; an EV5
 * ioctl refused with EINVAL by a daemon emulating another family names the
 * model it emulates (PCNTGETINFO) and the --model to start instead.
 */
#define _DEFAULT_SOURCE			/* syscall, getrusage on strict C99 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char *prog = "ev5count";
static int fd = -1;

static struct evname {
	char		*name;
	int		counter;
	unsigned long	code;
} evnames[] = {
	{ "PF5_MUX0_CYCLES",			0, PF5_MUX0_CYCLES },
	{ "PF5_MUX0_ISSUES",			0, PF5_MUX0_ISSUES },
	{ "PF5_MUX1_NON_ISSUE_CYCLES",		1, PF5_MUX1_NON_ISSUE_CYCLES },
	{ "PF5_MUX1_SPLIT_ISSUE_CYCLES",	1, PF5_MUX1_SPLIT_ISSUE_CYCLES },
	{ "PF5_MUX1_PIPELINE_DRY",		1, PF5_MUX1_PIPELINE_DRY },
	{ "PF5_MUX1_REPLAY_TRAP",		1, PF5_MUX1_REPLAY_TRAP },
	{ "PF5_MUX1_SINGLE_ISSUE_CYCLES",	1, PF5_MUX1_SINGLE_ISSUE_CYCLES },
	{ "PF5_MUX1_DUAL_ISSUE_CYCLES",		1, PF5_MUX1_DUAL_ISSUE_CYCLES },
	{ "PF5_MUX1_TRIPLE_ISSUE_CYCLES",	1, PF5_MUX1_TRIPLE_ISSUE_CYCLES },
	{ "PF5_MUX1_QUAD_ISSUE_CYCLES",		1, PF5_MUX1_QUAD_ISSUE_CYCLES },
	{ "PF5_MUX1_FLOW_CHANGE",		1, PF5_MUX1_FLOW_CHANGE },
	{ "PF5_MUX1_INTEGER_OPERATE",		1, PF5_MUX1_INTEGER_OPERATE },
	{ "PF5_MUX1_C_FP_INSTRUCTIONS",		1, PF5_MUX1_C_FP_INSTRUCTIONS },
	{ "PF5_MUX1_C_LOAD_INSTRUCTIONS",	1, PF5_MUX1_C_LOAD_INSTRUCTIONS },
	{ "PF5_MUX1_C_STORE_INSTRUCTIONS",	1, PF5_MUX1_C_STORE_INSTRUCTIONS },
	{ "PF5_MUX1_C_ICACHE_ACCESS",		1, PF5_MUX1_C_ICACHE_ACCESS },
	{ "PF5_MUX1_C_DCACHE_ACCESS",		1, PF5_MUX1_C_DCACHE_ACCESS },
	{ "PF5_MUX1_C_BCACHE_VICTIM",		1, PF5_MUX1_C_BCACHE_VICTIM },
	{ "PF5_MUX1_C_SCACHE_ACCESS",		1, PF5_MUX1_C_SCACHE_ACCESS },
	{ "PF5_MUX1_C_SCACHE_READ",		1, PF5_MUX1_C_SCACHE_READ },
	{ "PF5_MUX1_C_SCACHE_WRITE",		1, PF5_MUX1_C_SCACHE_WRITE },
	{ "PF5_MUX1_C_SCACHE_VICTIM",		1, PF5_MUX1_C_SCACHE_VICTIM },
	{ "PF5_MUX1_C_BCACHE_REF",		1, PF5_MUX1_C_BCACHE_REF },
	{ "PF5_MUX1_C_SYS_REQ",			1, PF5_MUX1_C_SYS_REQ },
	{ "PF5_MUX1_C_BCACHE_READ",		1, PF5_MUX1_C_BCACHE_READ },
	{ "PF5_MUX1_C_BCACHE_DREAD_HIT",	1, PF5_MUX1_C_BCACHE_DREAD_HIT },
	{ "PF5_MUX1_C_BCACHE_DREAD_FILL",	1, PF5_MUX1_C_BCACHE_DREAD_FILL },
	{ "PF5_MUX1_C_BCACHE_WRITE",		1, PF5_MUX1_C_BCACHE_WRITE },
	{ "PF5_MUX1_C_BCACHE_CLN_WRT_HIT",	1, PF5_MUX1_C_BCACHE_CLN_WRT_HIT },
	{ "PF5_MUX1_C_READ_MISS_2",		1, PF5_MUX1_C_READ_MISS_2 },
	{ "PF5_MUX2_C_LONG_STALLS",		2, PF5_MUX2_C_LONG_STALLS },
	{ "PF5_MUX2_C_PC_MISPR",		2, PF5_MUX2_C_PC_MISPR },
	{ "PF5_MUX2_C_BRANCH_MISPREDICTS",	2, PF5_MUX2_C_BRANCH_MISPREDICTS },
	{ "PF5_MUX2_C_ICACHE_MISSES",		2, PF5_MUX2_C_ICACHE_MISSES },
	{ "PF5_MUX2_C_ITB_MISS",		2, PF5_MUX2_C_ITB_MISS },
	{ "PF5_MUX2_C_DCACHE_MISSES",		2, PF5_MUX2_C_DCACHE_MISSES },
	{ "PF5_MUX2_C_DTB_MISS",		2, PF5_MUX2_C_DTB_MISS },
	{ "PF5_MUX2_C_LOADS_MERGED",		2, PF5_MUX2_C_LOADS_MERGED },
	{ "PF5_MUX2_C_LDU_REPLAYS",		2, PF5_MUX2_C_LDU_REPLAYS },
	{ "PF5_MUX2_C_WB_MAF_FULL_REPLAYS",	2, PF5_MUX2_C_WB_MAF_FULL_REPLAYS },
	{ "PF5_MUX2_C_EXTERNAL",		2, PF5_MUX2_C_EXTERNAL },
	{ "PF5_MUX2_C_CYCLES",			2, PF5_MUX2_C_CYCLES },
	{ "PF5_MUX2_C_MEM_BARRIER",		2, PF5_MUX2_C_MEM_BARRIER },
	{ "PF5_MUX2_C_LOAD_LOCKED",		2, PF5_MUX2_C_LOAD_LOCKED },
	{ "PF5_MUX2_C_SCACHE_MISS",		2, PF5_MUX2_C_SCACHE_MISS },
	{ "PF5_MUX2_C_SCACHE_READ_MISS",	2, PF5_MUX2_C_SCACHE_READ_MISS },
	{ "PF5_MUX2_C_SCACHE_WRITE_MISS",	2, PF5_MUX2_C_SCACHE_WRITE_MISS },
	{ "PF5_MUX2_C_SCACHE_SH_WRITE",		2, PF5_MUX2_C_SCACHE_SH_WRITE },
	{ "PF5_MUX2_C_SCACHE_WRITE",		2, PF5_MUX2_C_SCACHE_WRITE },
	{ "PF5_MUX2_C_BCACHE_MISS",		2, PF5_MUX2_C_BCACHE_MISS },
	{ "PF5_MUX2_C_SYS_INV",			2, PF5_MUX2_C_SYS_INV },
	{ "PF5_MUX2_C_SYS_READ_REQ",		2, PF5_MUX2_C_SYS_READ_REQ },
	{ "PF5_MUX2_C_BCACHE_DREAD",		2, PF5_MUX2_C_BCACHE_DREAD },
	{ "PF5_MUX2_C_BCACHE_READ_HIT",		2, PF5_MUX2_C_BCACHE_READ_HIT },
	{ "PF5_MUX2_C_BCACHE_READ_FILL",	2, PF5_MUX2_C_BCACHE_READ_FILL },
	{ "PF5_MUX2_C_BCACHE_WRITE_HIT",	2, PF5_MUX2_C_BCACHE_WRITE_HIT },
	{ "PF5_MUX2_C_BCACHE_WRITE_FILL",	2, PF5_MUX2_C_BCACHE_WRITE_FILL },
	{ "PF5_MUX2_C_SYS_READ_FLUSH_HIT",	2, PF5_MUX2_C_SYS_READ_FLUSH_HIT },
	{ "PF5_MUX2_C_SYS_READ_FLUSH_MISS",	2, PF5_MUX2_C_SYS_READ_FLUSH_MISS },
	{ "PF5_MUX2_C_READ_MISS_3",		2, PF5_MUX2_C_READ_MISS_3 },
	{ 0, 0, 0 }
};

/* Bits of PCNT5MUX each counter owns. */
static unsigned long muxmask[3] = {
	0x80000000UL,
	0xF0UL | (7UL << 51),
	0xFUL | (7UL << 54)
};

static void
die(char *what)
{
	int e = errno;

	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(e));
	exit(1);
}

/* PCNTGETINFO's pi_impl, as pfmd --model names it. */
static char *models[] = {
	"ev4 (21064)", "ev45 (21064A)", "ev5 (21164)", "ev56 (21164A)",
	"pca56 (21164PC)", "ev6 (21264)", "ev67 (21264A)"
};

/* The open failed: say why, and what to do when no daemon serves it. */
static void
open_failed(char *dev)
{
	int e = errno;

	fprintf(stderr, "%s: %s: %s%s\n", prog, dev, strerror(e),
	    e == ENOENT || e == ENOTCONN || e == ECONNABORTED ?
	    " (is pfmd running? systemctl start pfmd)" : "");
	exit(1);
}

/* An EV5 ioctl failed: EINVAL from a daemon emulating another family says which. */
static void
family_failed(char *what)
{
	int e = errno;
	struct pfm_info pi;

	memset(&pi, 0, sizeof pi);
	if (e == EINVAL && ioctl(fd, PCNTGETINFO, &pi) == 0 &&
	    pi.pi_family != PFM_FAMILY_EV5 && pi.pi_impl <= PFM_IMPL_EV67) {
		fprintf(stderr, "%s: %s: %s: the daemon emulates %s; start pfmd --model ev5\n",
		    prog, what, strerror(e), models[pi.pi_impl]);
		exit(1);
	}
	errno = e;
	die(what);
}

static void
usage(void)
{
	fprintf(stderr, "usage: %s [-each] [-kernel | -allmodes] [-mux0 EVENT] [-mux1 EVENT]\n"
	    "\t[-mux2 EVENT] [-ms N] [-sys] [-- command [args ...]]\n", prog);
	exit(2);
}

/* The event named s (a PF5_MUXn_* name or a number) for counter n. */
static unsigned long
event(char *s, int n)
{
	struct evname *e;
	char *end;
	unsigned long v;

	for (e = evnames; e->name; e++)
		if (e->counter == n && strcmp(s, e->name) == 0)
			return e->code;
	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || *end || (v & ~muxmask[n]) != 0) {
		fprintf(stderr, "%s: %s: not a counter %d event\n", prog, s, n);
		exit(2);
	}
	return v;
}

/* A name for counter n's code (the first that matches; Cbox codes have two). */
static char *
evname(unsigned long code, int n)
{
	static char buf[3][32];
	struct evname *e;

	for (e = evnames; e->name; e++)
		if (e->counter == n && e->code == code)
			return e->name;
	sprintf(buf[n], "0x%lx", code);
	return buf[n];
}

/*
 * An ioctl whose declared type is long: as on Tru64, it takes the address of
 * the long.
 */
static int
lioctl(unsigned long req, unsigned long v)
{
	return ioctl(fd, req, &v);
}

static long long
ts_ns(struct timespec *t)
{
	return (long long)t->tv_sec * 1000000000LL + t->tv_nsec;
}

static long long
tv_ns(struct timeval *t)
{
	return (long long)t->tv_sec * 1000000000LL + (long long)t->tv_usec * 1000;
}

/* Busy-loop for ms ms of this thread's CPU time, with system calls if sys. */
static void
burn(long ms, int sys)
{
	struct timespec t0, t;
	volatile unsigned long x = 1;
	int i;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0) < 0)
		die("clock_gettime");
	do {
		for (i = 0; i < 100000; i++) {
			x = x * 6364136223846793005UL + 1442695040888963407UL;
			if (sys && (i & 63) == 0)
				(void)getppid();
		}
		if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) < 0)
			die("clock_gettime");
	} while (ts_ns(&t) - ts_ns(&t0) < ms * 1000000LL);
}

/* Run argv as a child and wait for it. */
static void
run(char **argv)
{
	pid_t pid;
	int status;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		execvp(argv[0], argv);
		fprintf(stderr, "%s: %s: %s\n", prog, argv[0], strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
		exit(1);
}

int
main(int argc, char **argv)
{
	struct pfcntrs_ev5 *cntrs, *p;
	struct rusage r0, r1, c0, c1;
	unsigned long mux[3], mode, ctxts, sel, on;
	long ms = 200, ncpu = 1, i;
	int each = 0, sys = 0, n, a;
	char *dev, **cmd = 0;
	long long user, kern;

	mux[0] = PF5_MUX0_CYCLES;
	mux[1] = PF5_MUX1_FLOW_CHANGE;
	mux[2] = PF5_MUX2_C_CYCLES;
	mode = PF5_CTXT_USER;
	for (a = 1; a < argc; a++) {
		if (strcmp(argv[a], "-each") == 0)
			each = 1;
		else if (strcmp(argv[a], "-kernel") == 0)
			mode = PF5_CTXT_KERNEL;
		else if (strcmp(argv[a], "-allmodes") == 0)
			mode = PF5_CTXT_ALL_MODES;
		else if (strcmp(argv[a], "-sys") == 0)
			sys = 1;
		else if (strncmp(argv[a], "-mux", 4) == 0 && argv[a][4] >= '0' &&
		    argv[a][4] <= '2' && argv[a][5] == '\0' && a + 1 < argc) {
			n = argv[a][4] - '0';
			mux[n] = event(argv[++a], n);
		} else if (strcmp(argv[a], "-ms") == 0 && a + 1 < argc)
			ms = atol(argv[++a]);
		else if (strcmp(argv[a], "--") == 0 && a + 1 < argc) {
			cmd = &argv[a + 1];
			break;
		} else
			usage();
	}

	if ((dev = getenv("PFM_DEVICE")) == 0 || *dev == '\0')
		dev = "/dev/pfcntr";
	fd = open(dev, O_RDONLY | (each ? PCNTOPENEACH : PCNTOPENALL));
	if (fd < 0)
		open_failed(dev);
	(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	if (each && (ncpu = sysconf(_SC_NPROCESSORS_CONF)) < 1)
		ncpu = 1;
	if ((cntrs = calloc(ncpu, sizeof *cntrs)) == 0)
		die("calloc");

	if (lioctl(PCNTSETITEMS, PFM_COUNTERS) < 0)
		die("PCNTSETITEMS");
	/* This process and its children, in the modes asked for. */
	ctxts = PF5_CTXT_THIS_PROC | mode;
	if (lioctl(PCNT5CTXTS, ctxts) < 0)
		family_failed("PCNT5CTXTS");
	if (lioctl(PCNT5FREQ, PF5_C0_INT_EVERY_65536 | PF5_C1_INT_EVERY_65536 |
	    PF5_C2_INT_EVERY_16384) < 0)
		family_failed("PCNT5FREQ");
	/* Counters off while selecting: each is checked when it is started. */
	sel = PF5_SEL_COUNTER_0 | PF5_SEL_COUNTER_1 | PF5_SEL_COUNTER_2;
	if (lioctl(PCNT5DISABLE, sel) < 0)
		family_failed("PCNT5DISABLE");
	if (lioctl(PCNT5MUX, mux[0] | mux[1] | mux[2]) < 0)
		family_failed("PCNT5MUX");
	if (ioctl(fd, PCNTCLEARCNT) < 0)
		die("PCNTCLEARCNT");

	if (getrusage(RUSAGE_SELF, &r0) < 0 || getrusage(RUSAGE_CHILDREN, &c0) < 0)
		die("getrusage");
	on = sel;
	if (lioctl(PCNT5RESTART, sel) < 0) {
		if (errno != EOPNOTSUPP)
			family_failed("PCNT5RESTART");
		/* Start the counters one by one: the host cannot count them all. */
		on = 0;
		for (n = 0; n < 3; n++) {
			if (lioctl(PCNT5RESTART, 1UL << n) == 0)
				on |= 1UL << n;
			else if (errno != EOPNOTSUPP)
				die("PCNT5RESTART");
		}
		if (on == 0) {
			fprintf(stderr, "%s: this host can count none of the events\n", prog);
			exit(1);
		}
	}
	if (cmd)
		run(cmd);
	else
		burn(ms, sys);
	if (ioctl(fd, PCNTRDISABLE) < 0)
		die("PCNTRDISABLE");
	if (getrusage(RUSAGE_SELF, &r1) < 0 || getrusage(RUSAGE_CHILDREN, &c1) < 0)
		die("getrusage");

	p = cntrs;
	if (ioctl(fd, PCNT5READCNTRS, &p) < 0)
		family_failed("PCNT5READCNTRS");
	for (i = 0; i < (each ? ncpu : 1); i++) {
		if (each)
			printf("cpu=%ld", i);
		else
			printf("cpu=all");
		printf(" pr_cycle=%lu cntr0=%lu cntr1=%lu cntr2=%lu\n", cntrs[i].pr_cycle,
		    cntrs[i].pf_cntr0, cntrs[i].pf_cntr1, cntrs[i].pf_cntr2);
	}
	for (n = 0; n < 3; n++) {
		unsigned long total = 0;

		for (i = 0; i < (each ? ncpu : 1); i++)
			total += n == 0 ? cntrs[i].pf_cntr0 :
			    n == 1 ? cntrs[i].pf_cntr1 : cntrs[i].pf_cntr2;
		if (on & (1UL << n))
			printf("counter%d %s=%lu\n", n, evname(mux[n], n), total);
		else
			printf("counter%d %s=unavailable\n", n, evname(mux[n], n));
	}
	user = tv_ns(&r1.ru_utime) - tv_ns(&r0.ru_utime) +
	    tv_ns(&c1.ru_utime) - tv_ns(&c0.ru_utime);
	kern = tv_ns(&r1.ru_stime) - tv_ns(&r0.ru_stime) +
	    tv_ns(&c1.ru_stime) - tv_ns(&c0.ru_stime);
	printf("workload_cpu_ns=%lld workload_user_ns=%lld workload_sys_ns=%lld\n",
	    user + kern, user, kern);
	close(fd);
	free(cntrs);
	return 0;
}
