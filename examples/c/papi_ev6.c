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
 * again and counts cycles alone.  Output:
 *
 *	cycles=N
 *	cond_branches=N|unavailable
 *	pr_cycle=N
 *	workload_cpu_ns=N
 *	cycles_per_ns=X.XXX	(cycles / workload_cpu_ns: the clock rate in GHz)
 *
 * The device is $PFM_DEVICE if set, else /dev/pfcntr.
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
		die(dev);
	if (lioctl(PCNTSETITEMS, PFM_COUNTERS) < 0)
		die("PCNTSETITEMS");
	if (ioctl(fd, PCNTLOGSELECT) < 0)
		die("PCNTLOGSELECT");
	if (ioctl(fd, PCNTCLEARCNT) < 0)
		die("PCNTCLEARCNT");
	mux = PF6_MUX0_CYCLES | PF6_MUX1_RET_COND_BRANCHES;
	counters = PF6_SEL_COUNTER_0 | PF6_SEL_COUNTER_1;
	if (lioctl(PCNT6MUX, mux) < 0) {
		if (errno != EOPNOTSUPP)
			die("PCNT6MUX");
		/* No conditional-branch event on this host: cycles alone. */
		branches = 0;
		counters = PF6_SEL_COUNTER_0;
		if (lioctl(PCNT6DISABLE, PF6_SEL_COUNTER_1) < 0)
			die("PCNT6DISABLE");
		if (lioctl(PCNT6MUX, mux) < 0)
			die("PCNT6MUX");
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
			die("PCNT6RESTART");
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
		die("PCNT6READCNTRS");
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
