/*
 * ioctl_bench -- latency of /dev/pfcntr ioctls, for comparing transports.
 *
 * usage: ioctl_bench [-n CALLS] [-label NAME]
 *
 * Rows, each CALLS calls after CALLS/10 warm-up calls:
 *
 *	noop		PCNTRDISABLE on a disabled device: nothing to do (the
 *			transport's floor, one request)
 *	enable		PCNTRENABLE on an enabled device: nothing to do but the
 *			LOGALL privilege check (reads the caller's /proc status)
 *	getcnt_all	PCNTGETCNT, ALL mode, PF_CYCLES counting (pointer argument)
 *	getcnt_each	PCNTGETCNT, EACH mode (one struct pfcntrs per CPU)
 *	perf_read	read(2) of a perf task-clock counter (no transport at all)
 *
 * One line per row:
 *
 *	bench label=NAME row=ROW calls=N p50_ns=N p90_ns=N p99_ns=N mean_ns=N calls_per_s=N
 *
 * The device is $PFM_DEVICE if set, else /dev/pfcntr.  Run as root (the
 * counting rows use LOGALL).
 */
#define _GNU_SOURCE			/* syscall */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/pfcntr.h>
#include <linux/perf_event.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char *prog = "ioctl_bench";
static char *label = "-";
static long calls = 20000;

static void
die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(errno));
	exit(1);
}

static long long
now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int
cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

typedef int (*call_fn)(void *);

/* Times `calls` calls of fn(arg) and prints the row. */
static void
row(const char *name, call_fn fn, void *arg)
{
	long long *lat, t0, t1, start, total;
	long i, warm = calls / 10;

	if ((lat = malloc(calls * sizeof *lat)) == 0)
		die("malloc");
	for (i = 0; i < warm; i++)
		if (fn(arg) < 0)
			die(name);
	start = now_ns();
	for (i = 0; i < calls; i++) {
		t0 = now_ns();
		if (fn(arg) < 0)
			die(name);
		t1 = now_ns();
		lat[i] = t1 - t0;
	}
	total = now_ns() - start;
	qsort(lat, calls, sizeof *lat, cmp);
	printf("bench label=%s row=%s calls=%ld p50_ns=%lld p90_ns=%lld p99_ns=%lld "
	    "mean_ns=%lld calls_per_s=%.0f\n",
	    label, name, calls, lat[calls / 2], lat[calls * 9 / 10],
	    lat[calls * 99 / 100], total / calls, calls * 1e9 / (double)total);
	fflush(stdout);
	free(lat);
}

static int fd;

static int
noop(void *arg)
{
	(void)arg;
	return ioctl(fd, PCNTRDISABLE, 0);
}

static int
enable(void *arg)
{
	(void)arg;
	return ioctl(fd, PCNTRENABLE, 0);
}

static int
getcnt(void *arg)
{
	struct pfcntrs *p = arg;

	return ioctl(fd, PCNTGETCNT, &p);
}

static int
perf_read(void *arg)
{
	unsigned long long v;

	return read(*(int *)arg, &v, sizeof v) == (ssize_t)sizeof v ? 0 : -1;
}

/* Opens the device in `mode`, set to count PF_CYCLES system-wide, disabled. */
static int
open_counting(const char *dev, int mode)
{
	struct iccsr iccsr;
	long items = PFM_COUNTERS;
	int f;

	if ((f = open(dev, O_RDONLY | mode)) < 0)
		die(dev);
	memset(&iccsr, 0, sizeof iccsr);
	iccsr.iccsr_mux0 = PF_CYCLES;
	iccsr.iccsr_pc0 = PF_C0_INT_EVERY_4096;
	iccsr.iccsr_disable = 2;		/* counter 1 off */
	if (ioctl(f, PCNTSETITEMS, &items) < 0)
		die("PCNTSETITEMS");
	if (ioctl(f, PCNTSETMUX, &iccsr) < 0)
		die("PCNTSETMUX");
	if (ioctl(f, PCNTLOGALL, 0) < 0)
		die("PCNTLOGALL");
	return f;
}

int
main(int argc, char **argv)
{
	struct perf_event_attr attr;
	struct pfcntrs *cntrs;
	struct pfm_info info;
	char *dev;
	long ncpus;
	int i, pfd;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
			calls = atol(argv[++i]);
		else if (strcmp(argv[i], "-label") == 0 && i + 1 < argc)
			label = argv[++i];
		else {
			fprintf(stderr, "usage: %s [-n CALLS] [-label NAME]\n", prog);
			return 2;
		}
	}
	if (calls < 10)
		calls = 10;
	if ((dev = getenv("PFM_DEVICE")) == 0 || *dev == '\0')
		dev = "/dev/pfcntr";

	fd = open_counting(dev, PCNTOPENALL);
	if ((cntrs = calloc(1, sizeof *cntrs)) == 0)
		die("calloc");
	row("noop", noop, 0);
	if (ioctl(fd, PCNTRENABLE, 0) < 0)
		die("PCNTRENABLE");
	row("enable", enable, 0);
	row("getcnt_all", getcnt, cntrs);
	close(fd);
	free(cntrs);

	fd = open_counting(dev, PCNTOPENEACH);
	memset(&info, 0, sizeof info);
	ncpus = ioctl(fd, PCNTGETINFO, &info) == 0 && info.pi_ncpus > 0 ?
	    (long)info.pi_ncpus : sysconf(_SC_NPROCESSORS_CONF);
	if ((cntrs = calloc(ncpus, sizeof *cntrs)) == 0)
		die("calloc");
	if (ioctl(fd, PCNTRENABLE, 0) < 0)
		die("PCNTRENABLE");
	row("getcnt_each", getcnt, cntrs);
	close(fd);
	free(cntrs);

	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_TASK_CLOCK;
	pfd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
	if (pfd < 0)
		die("perf_event_open(task-clock)");
	row("perf_read", perf_read, &pfd);
	close(pfd);
	return 0;
}
