/*
 * uprofile -- profile this program's own text with /dev/pfcntr (pfm(7)),
 * on whichever Alpha the device emulates.
 *
 * usage: uprofile [-each] [-stride N] [-ms N] [-top N] [-pair]
 *
 *	-each		open PCNTOPENEACH (one histogram per CPU, summed here)
 *			instead of PCNTOPENALL.
 *	-stride N	instructions (4 bytes) per bucket: 0 or a power of
 *			two (default 4, one bucket per 16 bytes of text).
 *	-ms N		CPU milliseconds for hot(); cold() gets a tenth of
 *			that (default 400; 1000 on an EV6 or EV67, whose
 *			counters interrupt only every 2^20 cycles).
 *	-top N		hottest address ranges to print (default 8).
 *	-pair		EV67 only: sample with the aggregate pair
 *			PF67_CYCLES_AND_UNDEFINED instead of profile-me mode.
 *
 * The program asks the device which Alpha it emulates (PCNTGETINFO:
 * pi_family, pi_impl) and selects cycles on counter 0 with PC profiling,
 * with that family's own ioctls, as a program of the day did:
 *
 *	EV4, EV45	  PCNTSETMUX: PF_CYCLES every 4096 cycles, counter 1
 *			  off; PCNTRENABLE.
 *	EV5, EV56, PCA56  PCNT5DISABLE counters 1 and 2; PCNT5MUX
 *			  PF5_MUX0_CYCLES; PCNT5FREQ PF5_C0_INT_EVERY_65536
 *			  (every 256 needs privilege); PCNT5RESTART counter 0.
 *	EV6		  PCNT6DISABLE counter 1; PCNT6MUX PF6_MUX0_CYCLES
 *			  (every 2^20 cycles); PCNT6RESTART counter 0.
 *	EV67		  profile-me: PCNTSETITEMS carrying PF67_PM_RETIRE in
 *			  bits 8..15, PCNT6MUX PF67_PROFILE_ME_MODE (counter
 *			  0 cycles, counter 1 off); PCNT6RESTART counter 0.
 *			  -pair: PCNT6MUX PF67_CYCLES_AND_UNDEFINED, plain
 *			  items.
 *
 * It counts only itself (PCNTLOGSELECT, so an ordinary user may run it),
 * profiles its text from &__executable_start to &etext with
 * PCNTSETURANGE, runs hot() and cold(), stops (PCNTRDISABLE) and reads the
 * buckets: PCNTGETRSIZE says how many bytes one read(2) returns.  It prints
 * what it selected, the hottest bucket ranges and the function each falls
 * in, then one line for machines, the same on every model:
 *
 *	hot_samples=N cold_samples=N other_samples=N total=N pf_cntr0=N
 *
 * Samples and pf_cntr0 are counter 0 interrupts, as the driver keeps them;
 * pf_cntr0 comes from the family's own count ioctl (PCNTGETCNT,
 * PCNT5GETCNT or PCNT6GETCNT).  The periods differ by family, so the same
 * -ms gives an EV6 1/256 of an EV4's samples.  The device is $PFM_DEVICE
 * if set, else /dev/pfcntr.
 */
#define _POSIX_C_SOURCE 200809L
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char __executable_start;		/* first byte of the text (ld) */
extern char etext;			/* first byte after it */

static char *prog = "uprofile";
static int fd = -1;

/* PCNTGETINFO's pi_impl, as pfmd --model names it. */
static char *models[] = {
	"ev4 (21064)", "ev45 (21064A)", "ev5 (21164)", "ev56 (21164A)",
	"pca56 (21164PC)", "ev6 (21264)", "ev67 (21264A)"
};

static void
die(char *what)
{
	int e = errno;

	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(e));
	if (fd >= 0)
		close(fd);
	exit(1);
}

/* The open failed: say why, and what to do when no daemon serves it. */
static void
open_failed(char *device)
{
	int e = errno;

	fprintf(stderr, "%s: %s: %s%s\n", prog, device, strerror(e),
	    e == ENOENT || e == ENOTCONN || e == ECONNABORTED ?
	    " (is pfmd running? systemctl start pfmd)" : "");
	exit(1);
}

#define IOCTL(req, arg) \
	do { if (ioctl(fd, req, arg) < 0) die(#req); } while (0)

/* An ioctl whose declared type is long takes the address of the long. */
static void
lioctl(unsigned long req, char *name, unsigned long v)
{
	if (ioctl(fd, req, &v) < 0)
		die(name);
}
#define LIOCTL(req, v)	lioctl(req, #req, v)

static long long
cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static volatile unsigned long sink;

/* The expensive function: ms of CPU time. */
static void
hot(long ms)
{
	long long end = cpu_ns() + ms * 1000000LL;
	unsigned long x = 1;
	int i;

	do {
		for (i = 0; i < 200000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
	} while (cpu_ns() < end);
	sink = x;
}

/* The cheap one: the same kind of work, a tenth of the time. */
static void
cold(long ms)
{
	long long end = cpu_ns() + ms * 100000LL;
	unsigned long x = 7;
	int i;

	do {
		for (i = 0; i < 200000; i++)
			x = (x ^ (x >> 7)) * 2862933555777941757UL + 3037000493UL;
	} while (cpu_ns() < end);
	sink = x;
}

/* Called through pointers the compiler cannot see through: never inlined. */
static void (*volatile run_hot)(long) = hot;
static void (*volatile run_cold)(long) = cold;

/*
 * Select cycles on counter 0 with the family's ioctls (items already set);
 * returns the period, for the report.
 */
static unsigned long
select_cycles(unsigned long family, unsigned long impl, int pair)
{
	struct iccsr mux;

	switch (family) {
	case PFM_FAMILY_EV4:
		memset(&mux, 0, sizeof mux);
		mux.iccsr_mux0 = PF_CYCLES;
		mux.iccsr_pc0 = PF_C0_INT_EVERY_4096;
		mux.iccsr_disable = 2;		/* counter 1 off */
		IOCTL(PCNTSETMUX, &mux);
		printf("# PCNTSETMUX PF_CYCLES, PF_C0_INT_EVERY_4096\n");
		return 4096;
	case PFM_FAMILY_EV5:
		/* Counters 1 and 2 off first: only a counting counter is resolved. */
		LIOCTL(PCNT5DISABLE, PF5_SEL_COUNTER_1 | PF5_SEL_COUNTER_2);
		LIOCTL(PCNT5MUX, PF5_MUX0_CYCLES);
		LIOCTL(PCNT5FREQ, PF5_C0_INT_EVERY_65536);
		printf("# PCNT5MUX PF5_MUX0_CYCLES, PCNT5FREQ PF5_C0_INT_EVERY_65536\n");
		return 65536;
	default:
		if (impl != PFM_IMPL_EV67) {
			LIOCTL(PCNT6DISABLE, PF6_SEL_COUNTER_1);
			LIOCTL(PCNT6MUX, PF6_MUX0_CYCLES);
			printf("# PCNT6MUX PF6_MUX0_CYCLES, every 1048576\n");
		} else if (pair) {
			LIOCTL(PCNT6MUX, PF67_CYCLES_AND_UNDEFINED);
			printf("# PCNT6MUX PF67_CYCLES_AND_UNDEFINED, every 1048576\n");
		} else {
			LIOCTL(PCNT6MUX, PF67_PROFILE_ME_MODE);
			printf("# PCNT6MUX PF67_PROFILE_ME_MODE, PF67_PM_RETIRE, every 1048576\n");
		}
		return 1UL << 20;
	}
}

/* Start counter 0 counting, the family's way. */
static void
start_counting(unsigned long family)
{
	switch (family) {
	case PFM_FAMILY_EV4:
		IOCTL(PCNTRENABLE, 0);
		break;
	case PFM_FAMILY_EV5:
		LIOCTL(PCNT5RESTART, PF5_SEL_COUNTER_0);
		break;
	default:
		LIOCTL(PCNT6RESTART, PF6_SEL_COUNTER_0);
		break;
	}
}

/* Counter 0's interrupts, summed over the ncpu elements the family's GETCNT stores. */
static unsigned long
counter0(unsigned long family, int ncpu)
{
	struct pfcntrs *p4, *c4;
	struct pfcntrs_ev5 *p5, *c5;
	struct pfcntrs_ev6 *p6, *c6;
	unsigned long n = 0;
	int c;

	switch (family) {
	case PFM_FAMILY_EV4:
		if ((p4 = c4 = calloc((size_t)ncpu, sizeof *c4)) == 0)
			die("calloc");
		IOCTL(PCNTGETCNT, &p4);
		for (c = 0; c < ncpu; c++)
			n += c4[c].pf_cntr0;
		free(c4);
		break;
	case PFM_FAMILY_EV5:
		if ((p5 = c5 = calloc((size_t)ncpu, sizeof *c5)) == 0)
			die("calloc");
		IOCTL(PCNT5GETCNT, &p5);
		for (c = 0; c < ncpu; c++)
			n += c5[c].pf_cntr0;
		free(c5);
		break;
	default:
		if ((p6 = c6 = calloc((size_t)ncpu, sizeof *c6)) == 0)
			die("calloc");
		IOCTL(PCNT6GETCNT, &p6);
		for (c = 0; c < ncpu; c++)
			n += c6[c].pf_cntr0;
		free(c6);
		break;
	}
	return n;
}

static void usage(void);
int main(int, char **);

/* This file's functions, to name the hot ranges. */
static struct func {
	char	*name;
	unsigned long addr;
} funcs[] = {
	{ "die", 0 }, { "open_failed", 0 }, { "lioctl", 0 }, { "cpu_ns", 0 },
	{ "hot", 0 }, { "cold", 0 }, { "select_cycles", 0 },
	{ "start_counting", 0 }, { "counter0", 0 }, { "usage", 0 },
	{ "main", 0 }, { 0, 0 }
};

static void
init_funcs(void)
{
	struct func t;
	int i, j;

	funcs[0].addr = (unsigned long)die;
	funcs[1].addr = (unsigned long)open_failed;
	funcs[2].addr = (unsigned long)lioctl;
	funcs[3].addr = (unsigned long)cpu_ns;
	funcs[4].addr = (unsigned long)hot;
	funcs[5].addr = (unsigned long)cold;
	funcs[6].addr = (unsigned long)select_cycles;
	funcs[7].addr = (unsigned long)start_counting;
	funcs[8].addr = (unsigned long)counter0;
	funcs[9].addr = (unsigned long)usage;
	funcs[10].addr = (unsigned long)main;
	/* Sort by address: a function runs up to the next one. */
	for (i = 1; funcs[i].name; i++)
		for (j = i; j > 0 && funcs[j - 1].addr > funcs[j].addr; j--) {
			t = funcs[j];
			funcs[j] = funcs[j - 1];
			funcs[j - 1] = t;
		}
}

/* The function of this file an address falls in, or 0 (crt, PLT ...). */
static struct func *
func_of(unsigned long a)
{
	struct func *f, *found = 0;

	for (f = funcs; f->name; f++)
		if (f->addr <= a)
			found = f;
	/* The last one cannot be told from the crt code after it. */
	if (found && found[1].name == 0 && a - found->addr > 4096)
		return 0;
	return found;
}

static void
usage(void)
{
	fprintf(stderr, "usage: %s [-each] [-stride N] [-ms N] [-top N] [-pair]\n", prog);
	exit(2);
}

int
main(int argc, char **argv)
{
	char *device;
	int mode = PCNTOPENALL, i, c, top = 8, ncpu = 1, pair = 0;
	long ms = -1, rsize, nb, b, stride = 4, got;
	unsigned long start, end, bbytes, a, total, hotn, coldn, other, cntr;
	unsigned long items, period;
	unsigned int *buf, *sum;
	addr_range_t range;
	struct pfm_info pi;
	struct func *f;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-each") == 0)
			mode = PCNTOPENEACH;
		else if (strcmp(argv[i], "-stride") == 0 && i + 1 < argc)
			stride = atol(argv[++i]);
		else if (strcmp(argv[i], "-ms") == 0 && i + 1 < argc)
			ms = atol(argv[++i]);
		else if (strcmp(argv[i], "-top") == 0 && i + 1 < argc)
			top = atoi(argv[++i]);
		else if (strcmp(argv[i], "-pair") == 0)
			pair = 1;
		else
			usage();
	}
	if ((device = getenv("PFM_DEVICE")) == 0 || *device == '\0')
		device = "/dev/pfcntr";
	init_funcs();

	if ((fd = open(device, O_RDONLY | mode)) < 0)
		open_failed(device);
	/* Which Alpha: the port's getsysinfo(GSI_PROC_TYPE). */
	memset(&pi, 0, sizeof pi);
	IOCTL(PCNTGETINFO, &pi);
	if (pi.pi_family > PFM_FAMILY_EV6 || pi.pi_impl > PFM_IMPL_EV67) {
		fprintf(stderr, "%s: unknown Alpha: family %lu, implementation %lu\n",
		    prog, pi.pi_family, pi.pi_impl);
		exit(1);
	}
	if (pair && pi.pi_impl != PFM_IMPL_EV67) {
		fprintf(stderr, "%s: -pair: the daemon emulates %s, not ev67 (21264A)\n",
		    prog, models[pi.pi_impl]);
		exit(2);
	}
	if (mode == PCNTOPENEACH)
		ncpu = (int)pi.pi_ncpus;
	if (ms < 0)
		ms = pi.pi_family == PFM_FAMILY_EV6 ? 1000 : 400;
	printf("# model %s, -ms %ld\n", models[pi.pi_impl], ms);

	items = PFM_COUNTERS | PFM_PROFILING;
	if (pi.pi_impl == PFM_IMPL_EV67 && !pair)
		items |= (unsigned long)PF67_PM_RETIRE << PFM_PROFME_MODE_SHIFT;
	LIOCTL(PCNTSETITEMS, items);
	period = select_cycles(pi.pi_family, pi.pi_impl, pair);
	IOCTL(PCNTLOGSELECT, 0);

	start = (unsigned long)&__executable_start;
	end = (unsigned long)&etext;
	memset(&range, 0, sizeof range);
	range.start = start;
	range.end = end;
	range.stride = (unsigned long)stride;
	IOCTL(PCNTSETURANGE, &range);
	IOCTL(PCNTCLEARCNT, 0);
	start_counting(pi.pi_family);

	run_hot(ms);
	run_cold(ms);

	IOCTL(PCNTRDISABLE, 0);
	IOCTL(PCNTGETRSIZE, &rsize);
	if (rsize <= 0 || rsize % 4 || (rsize / 4) % ncpu) {
		fprintf(stderr, "%s: PCNTGETRSIZE says %ld bytes\n", prog, rsize);
		exit(1);
	}
	if ((buf = malloc((size_t)rsize)) == 0)
		die("malloc");
	if ((got = (long)read(fd, buf, (size_t)rsize)) < 0)
		die("read");
	if (got != rsize) {
		fprintf(stderr, "%s: read %ld of %ld bytes\n", prog, got, rsize);
		exit(1);
	}
	cntr = counter0(pi.pi_family, ncpu);
	close(fd);

	/* Sum the CPUs' histograms (EACH lays them one after another). */
	nb = rsize / 4 / ncpu;
	sum = buf;
	for (c = 1; c < ncpu; c++)
		for (b = 0; b < nb; b++)
			sum[b] += buf[c * nb + b];
	bbytes = stride ? (unsigned long)stride * 4 : end - start;

	total = hotn = coldn = other = 0;
	for (b = 0; b < nb; b++) {
		if (sum[b] == 0)
			continue;
		total += sum[b];
		f = func_of(start + (unsigned long)b * bbytes);
		if (stride && f && f->addr == (unsigned long)hot)
			hotn += sum[b];
		else if (stride && f && f->addr == (unsigned long)cold)
			coldn += sum[b];
		else
			other += sum[b];
	}

	printf("# text %#lx-%#lx stride %ld (%lu bytes per bucket), %ld buckets, %d histogram(s)\n",
	    start, end, stride, bbytes, nb, ncpu);
	printf("# counter 0 interrupts every %lu cycles\n", period);
	printf("# hottest ranges:\n");
	for (i = 0; i < top; i++) {
		long best = -1;

		for (b = 0; b < nb; b++)
			if (sum[b] && (best < 0 || sum[b] > sum[best]))
				best = b;
		if (best < 0)
			break;
		a = start + (unsigned long)best * bbytes;
		f = func_of(a);
		printf("%#lx-%#lx %10u %5.1f%%  ", a, a + bbytes, sum[best],
		    total ? 100.0 * sum[best] / total : 0.0);
		if (f)
			printf("%s+%#lx\n", f->name, a - f->addr);
		else
			printf("?\n");
		sum[best] = 0;
	}
	printf("hot_samples=%lu cold_samples=%lu other_samples=%lu total=%lu pf_cntr0=%lu\n",
	    hotn, coldn, other, total, cntr);
	free(buf);
	return 0;
}
