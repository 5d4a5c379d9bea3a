/*
 * uprofile -- profile this program's own text with /dev/pfcntr (pfm(7)).
 *
 * usage: uprofile [-each] [-stride N] [-ms N] [-top N]
 *
 *	-each		open PCNTOPENEACH (one histogram per CPU, summed here)
 *			instead of PCNTOPENALL.
 *	-stride N	instructions (4 bytes) per bucket: 0 or a power of
 *			two (default 4, one bucket per 16 bytes of text).
 *	-ms N		CPU milliseconds for hot(); cold() gets a tenth of
 *			that (default 400).
 *	-top N		hottest address ranges to print (default 8).
 *
 * The program selects PF_CYCLES every 4096 cycles with PC profiling,
 * counts only itself (PCNTLOGSELECT, so an ordinary user may run it),
 * profiles its text from &__executable_start to &etext with
 * PCNTSETURANGE, runs hot() and cold(), then reads the buckets:
 * PCNTGETRSIZE says how many bytes one read(2) returns.  It prints the
 * hottest bucket ranges and the function each falls in, then one line
 * for machines:
 *
 *	hot_samples=N cold_samples=N other_samples=N total=N pf_cntr0=N
 *
 * Counts are counter interrupts, as the driver keeps them.  The device
 * is $PFM_DEVICE if set, else /dev/pfcntr.
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

static void
die(char *what)
{
	int e = errno;

	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(e));
	if (fd >= 0)
		close(fd);
	exit(1);
}

#define IOCTL(req, arg) \
	do { if (ioctl(fd, req, arg) < 0) die(#req); } while (0)

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

static void usage(void);
int main(int, char **);

/* This file's functions, to name the hot ranges. */
static struct func {
	char	*name;
	unsigned long addr;
} funcs[] = {
	{ "die", 0 }, { "cpu_ns", 0 }, { "hot", 0 }, { "cold", 0 },
	{ "usage", 0 }, { "main", 0 }, { 0, 0 }
};

static void
init_funcs(void)
{
	struct func t;
	int i, j;

	funcs[0].addr = (unsigned long)die;
	funcs[1].addr = (unsigned long)cpu_ns;
	funcs[2].addr = (unsigned long)hot;
	funcs[3].addr = (unsigned long)cold;
	funcs[4].addr = (unsigned long)usage;
	funcs[5].addr = (unsigned long)main;
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
	fprintf(stderr, "usage: %s [-each] [-stride N] [-ms N] [-top N]\n", prog);
	exit(2);
}

int
main(int argc, char **argv)
{
	char *device;
	int mode = PCNTOPENALL, i, c, top = 8, ncpu = 1;
	long ms = 400, items, rsize, nb, b, stride = 4, got;
	unsigned long start, end, bbytes, a, total, hotn, coldn, other, cntr;
	unsigned int *buf, *sum;
	struct iccsr mux;
	addr_range_t range;
	struct pfm_info pi;
	struct pfcntrs *cnt, *pc;
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
		else
			usage();
	}
	if ((device = getenv("PFM_DEVICE")) == 0 || *device == '\0')
		device = "/dev/pfcntr";
	init_funcs();

	if ((fd = open(device, O_RDONLY | mode)) < 0)
		die(device);
	memset(&pi, 0, sizeof pi);
	if (mode == PCNTOPENEACH) {
		IOCTL(PCNTGETINFO, &pi);
		ncpu = (int)pi.pi_ncpus;
	}
	items = PFM_COUNTERS | PFM_PROFILING;
	IOCTL(PCNTSETITEMS, &items);
	memset(&mux, 0, sizeof mux);
	mux.iccsr_mux0 = PF_CYCLES;
	mux.iccsr_pc0 = PF_C0_INT_EVERY_4096;
	mux.iccsr_disable = 2;			/* counter 1 off */
	IOCTL(PCNTSETMUX, &mux);
	IOCTL(PCNTLOGSELECT, 0);

	start = (unsigned long)&__executable_start;
	end = (unsigned long)&etext;
	memset(&range, 0, sizeof range);
	range.start = start;
	range.end = end;
	range.stride = (unsigned long)stride;
	IOCTL(PCNTSETURANGE, &range);
	IOCTL(PCNTCLEARCNT, 0);
	IOCTL(PCNTRENABLE, 0);

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
	if ((cnt = calloc((size_t)ncpu, sizeof *cnt)) == 0)
		die("calloc");
	pc = cnt;
	IOCTL(PCNTGETCNT, &pc);
	for (cntr = 0, c = 0; c < ncpu; c++)
		cntr += cnt[c].pf_cntr0;
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
	free(cnt);
	return 0;
}
