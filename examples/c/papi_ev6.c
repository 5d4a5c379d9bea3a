/*
 * papi_ev6 -- the call sequence PAPI's Tru64 substrate made on an EV6, as a
 * plain client of /dev/pfcntr: count cycles (and retired conditional
 * branches) of this process over a workload.
 *
 * usage: papi_ev6 [-ms N]
 *
 *	-ms N	busy-loop N ms of CPU time (default 200).
 *
 * The sequence: open ALL; PCNTSETITEMS(PFM_COUNTERS); PCNTLOGSELECT;
 * PCNTCLEARCNT; PCNT6MUX(PF6_MUX0_CYCLES | PF6_MUX1_RET_COND_BRANCHES);
 * PCNTRDISABLE; PCNTCLEARCNT; PCNT6RESTART({cpu PMCTRS_ALL_CPUS, both
 * counters}); the workload; PCNTRDISABLE; PCNT6READCNTRS into a 32-element
 * array, of which element 0 holds the counts.
 *
 * Where the host cannot count retired conditional branches, PCNT6MUX fails
 * with EOPNOTSUPP (or PCNT6RESTART does, had counter 1 been off when it was
 * selected); the program then turns counter 1 off (PCNT6DISABLE), selects
 * again and counts cycles alone.  On an EV67 (21264A) the counters count
 * only in fixed pairs and none holds conditional branches: PCNT6MUX of the
 * EV6 word is EINVAL there, so the program says so on stderr and counts
 * cycles alone with PF67_CYCLES_AND_UNDEFINED.  Output:
 *
 *	cycles=N
 *	cond_branches=N|unavailable
 *	pr_cycle=N
 *	workload_cpu_ns=N
 *	cycles_per_ns=X.XXX	(cycles / workload_cpu_ns: the clock rate in GHz)
 *
 * The device is $PFM_DEVICE if set, else /dev/pfcntr.  An open that finds
 * no daemon (ENOENT, ENOTCONN, ECONNABORTED) asks "is pfmd running?"; an EV6
 * ioctl refused with EINVAL by a daemon emulating another family names the
 * model it emulates (PCNTGETINFO) and the --model to start instead.
 */
#define _DEFAULT_SOURCE			/* getrusage on strict C99 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXCPUS	32			/* PAPI's array */

static char *prog = "papi_ev6";
static int fd = -1;

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

/* The emulated implementation (PFM_IMPL_*), or -1 if the device cannot say. */
static long
impl(void)
{
	struct pfm_info pi;

	memset(&pi, 0, sizeof pi);
	if (ioctl(fd, PCNTGETINFO, &pi) < 0 || pi.pi_impl > PFM_IMPL_EV67)
		return -1;
	return (long)pi.pi_impl;
}

/* An EV6 ioctl failed: EINVAL from a daemon emulating another family says which. */
static void
family_failed(char *what)
{
	int e = errno;
	long i = impl();

	if (e == EINVAL && i >= 0 && i < PFM_IMPL_EV6) {
		fprintf(stderr, "%s: %s: %s: the daemon emulates %s; start pfmd --model ev6\n",
		    prog, what, strerror(e), models[i]);
		exit(1);
	}
	errno = e;
	die(what);
}

/* An ioctl whose declared type is long takes the address of the long. */
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

/* Busy-loop for ms milliseconds of this thread's CPU time. */
static void
burn(long ms)
{
	struct timespec t0, t;
	volatile unsigned long x = 1;
	int i;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0) < 0)
		die("clock_gettime");
	do {
		for (i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
		if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) < 0)
			die("clock_gettime");
	} while (ts_ns(&t) - ts_ns(&t0) < ms * 1000000LL);
}

int
main(int argc, char **argv)
{
	struct pfcntrs_ev6 p[MAXCPUS], *pp;
	union pmctrs_ev6 sel;
	struct rusage r0, r1;
	unsigned long mux, counters;
	long ms = 200;
	long long ns;
	char *dev;
	int a, branches = 1;

	for (a = 1; a < argc; a++) {
		if (strcmp(argv[a], "-ms") == 0 && a + 1 < argc)
			ms = atol(argv[++a]);
		else {
			fprintf(stderr, "usage: %s [-ms N]\n", prog);
			exit(2);
		}
	}
	if ((dev = getenv("PFM_DEVICE")) == 0 || *dev == '\0')
		dev = "/dev/pfcntr";

	fd = open(dev, O_RDONLY | PCNTOPENALL);
	if (fd < 0)
		open_failed(dev);
	if (lioctl(PCNTSETITEMS, PFM_COUNTERS) < 0)
		die("PCNTSETITEMS");
	if (ioctl(fd, PCNTLOGSELECT) < 0)
		die("PCNTLOGSELECT");
	if (ioctl(fd, PCNTCLEARCNT) < 0)
		die("PCNTCLEARCNT");
	mux = PF6_MUX0_CYCLES | PF6_MUX1_RET_COND_BRANCHES;
	counters = PF6_SEL_COUNTER_0 | PF6_SEL_COUNTER_1;
	if (lioctl(PCNT6MUX, mux) < 0) {
		if (errno == EINVAL && impl() == PFM_IMPL_EV67) {
			/* The 21264A counts in pairs; none has conditional branches. */
			fprintf(stderr, "%s: PCNT6MUX: the daemon emulates %s, whose counters "
			    "count in pairs: cycles alone (PF67_CYCLES_AND_UNDEFINED)\n",
			    prog, models[PFM_IMPL_EV67]);
			mux = PF67_CYCLES_AND_UNDEFINED;	/* counter 1 off */
		} else if (errno != EOPNOTSUPP)
			family_failed("PCNT6MUX");
		else if (lioctl(PCNT6DISABLE, PF6_SEL_COUNTER_1) < 0)
			family_failed("PCNT6DISABLE");
		/* No conditional-branch event: cycles alone. */
		branches = 0;
		counters = PF6_SEL_COUNTER_0;
		if (lioctl(PCNT6MUX, mux) < 0)
			family_failed("PCNT6MUX");
	}
	if (ioctl(fd, PCNTRDISABLE) < 0)
		die("PCNTRDISABLE");
	if (ioctl(fd, PCNTCLEARCNT) < 0)
		die("PCNTCLEARCNT");

	memset(&sel, 0, sizeof sel);
	sel.pmctrs_ev6_cpu = PMCTRS_ALL_CPUS;
	sel.pmctrs_ev6_select = counters;
	if (getrusage(RUSAGE_SELF, &r0) < 0)
		die("getrusage");
	if (ioctl(fd, PCNT6RESTART, &sel.pmctrs_ev6_long) < 0) {
		if (errno != EOPNOTSUPP || counters == PF6_SEL_COUNTER_0)
			family_failed("PCNT6RESTART");
		/* Counter 1 was off when selected and cannot count here. */
		branches = 0;
		sel.pmctrs_ev6_select = PF6_SEL_COUNTER_0;
		if (ioctl(fd, PCNT6RESTART, &sel.pmctrs_ev6_long) < 0)
			die("PCNT6RESTART");
	}
	burn(ms);
	if (ioctl(fd, PCNTRDISABLE) < 0)
		die("PCNTRDISABLE");
	if (getrusage(RUSAGE_SELF, &r1) < 0)
		die("getrusage");

	memset(p, 0, sizeof p);
	pp = p;
	if (ioctl(fd, PCNT6READCNTRS, &pp) < 0)
		family_failed("PCNT6READCNTRS");
	close(fd);

	ns = tv_ns(&r1.ru_utime) - tv_ns(&r0.ru_utime) +
	    tv_ns(&r1.ru_stime) - tv_ns(&r0.ru_stime);
	printf("cycles=%lu\n", p[0].pf_cntr0);
	if (branches)
		printf("cond_branches=%lu\n", p[0].pf_cntr1);
	else
		printf("cond_branches=unavailable\n");
	printf("pr_cycle=%lu\n", p[0].pr_cycle);
	printf("workload_cpu_ns=%lld\n", ns);
	printf("cycles_per_ns=%.3f\n", ns > 0 ? (double)p[0].pf_cntr0 / (double)ns : 0.0);
	return 0;
}
