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
 *	getcnt_all	PCNTGETCNT, ALL mode, cycles counting (pointer argument)
 *	getcnt_each	PCNTGETCNT, EACH mode (one count structure per CPU)
 *	perf_read	read(2) of a perf task-clock counter (no transport at all)
 *
 * It runs on every model: it asks the device which Alpha it emulates
 * (PCNTGETINFO) and selects cycles on counter 0 with the family's mux ioctl
 * (PCNTSETMUX; PCNT5MUX with counters 1 and 2 off; PCNT6MUX with counter 1
 * off, on an EV67 the pair PF67_CYCLES_AND_UNDEFINED); the getcnt rows then
 * call the family's count ioctl (PCNTGETCNT, PCNT5GETCNT, PCNT6GETCNT).
 *
 * One line per row:
 *
 *	bench label=NAME row=ROW calls=N p50_ns=N p90_ns=N p99_ns=N mean_ns=N calls_per_s=N
 *
 * The device is $PFM_DEVICE if set, else /dev/pfcntr.  Run as root (the
 * counting rows use LOGALL).  An open that finds no daemon (ENOENT,
 * ENOTCONN, ECONNABORTED) asks "is pfmd running?".
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

/* The open failed: say why, and what to do when no daemon serves it. */
static void
open_failed(const char *dev)
{
	int e = errno;

	fprintf(stderr, "%s: %s: %s%s\n", prog, dev, strerror(e),
	    e == ENOENT || e == ENOTCONN || e == ECONNABORTED ?
	    " (is pfmd running? systemctl start pfmd)" : "");
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
static unsigned long getcnt_req = PCNTGETCNT;	/* the family's count ioctl */

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
	void *p = arg;

	return ioctl(fd, getcnt_req, &p);
}

static int
perf_read(void *arg)
{
	unsigned long long v;

	return read(*(int *)arg, &v, sizeof v) == (ssize_t)sizeof v ? 0 : -1;
}

/*
 * Opens the device in `mode`, set to count cycles on counter 0 system-wide
 * with the emulated family's ioctls, disabled.
 */
static int
open_counting(const char *dev, int mode)
{
	struct iccsr iccsr;
	struct pfm_info pi;
	long items = PFM_COUNTERS, v;
	int f;

	if ((f = open(dev, O_RDONLY | mode)) < 0)
		open_failed(dev);
	memset(&pi, 0, sizeof pi);
	if (ioctl(f, PCNTGETINFO, &pi) < 0)
		die("PCNTGETINFO");
	if (ioctl(f, PCNTSETITEMS, &items) < 0)
		die("PCNTSETITEMS");
	switch (pi.pi_family) {
	case PFM_FAMILY_EV4:
		memset(&iccsr, 0, sizeof iccsr);
		iccsr.iccsr_mux0 = PF_CYCLES;
		iccsr.iccsr_pc0 = PF_C0_INT_EVERY_4096;
		iccsr.iccsr_disable = 2;	/* counter 1 off */
		if (ioctl(f, PCNTSETMUX, &iccsr) < 0)
			die("PCNTSETMUX");
		getcnt_req = PCNTGETCNT;
		break;
	case PFM_FAMILY_EV5:
		v = PF5_SEL_COUNTER_1 | PF5_SEL_COUNTER_2;
		if (ioctl(f, PCNT5DISABLE, &v) < 0)
			die("PCNT5DISABLE");
		v = PF5_MUX0_CYCLES;
		if (ioctl(f, PCNT5MUX, &v) < 0)
			die("PCNT5MUX");
		getcnt_req = PCNT5GETCNT;
		break;
	default:
		v = PF6_SEL_COUNTER_1;
		if (ioctl(f, PCNT6DISABLE, &v) < 0)
			die("PCNT6DISABLE");
		v = pi.pi_impl == PFM_IMPL_EV67 ? PF67_CYCLES_AND_UNDEFINED : PF6_MUX0_CYCLES;
		if (ioctl(f, PCNT6MUX, &v) < 0)
			die("PCNT6MUX");
		getcnt_req = PCNT6GETCNT;
		break;
	}
	if (ioctl(f, PCNTLOGALL, 0) < 0)
		die("PCNTLOGALL");
	return f;
}

int
main(int argc, char **argv)
{
	struct perf_event_attr attr;
	struct pfcntrs_ev5 *cntrs;		/* the largest of the families' counts */
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
