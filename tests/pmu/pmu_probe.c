/*
 * pmu_probe -- loops of a known instruction count, counted through
 * /dev/pfcntr, for tests/pmu_vm.rs (aarch64 only: the loops are inline
 * assembly; built with aarch64-linux-gnu-gcc -static -I include).
 *
 * The loops (assembly, so their instruction counts are known):
 *
 *	spin_loop(n)	n iterations of "subs x0, x0, #1; b.ne": 2n
 *			instructions, all in user mode (n >= 1).
 *	sys_loop(n)	n iterations of "svc #0 (getppid); subs; b.ne":
 *			3n user instructions and n system calls (n >= 1).
 *
 * usage:
 *	pmu_probe loop N		run spin_loop(N) (a workload for pfmstat)
 *	pmu_probe ev5 [-c0 EV] [-c1 EV] [-c2 EV] [-ctx user|kernel|all]
 *		[-loop spin|sys] N...
 *	pmu_probe ev6 [-mux WORD] [-loop spin|sys] N...
 *	pmu_probe ev4 [-period 4096|65536] [-prof] [-loop spin|sys] N...
 *
 * ev5: counters given with -cK count their event (a PF5_MUXK_* name
 * without the prefix, e.g. ISSUES, C_CYCLES, or a number), the others are
 * off; PCNT5CTXTS(PF5_CTXT_THIS_PROC | mode), low-frequency periods, so
 * PCNT5READCNTRS returns event counts.  ev6: PCNT6MUX(WORD) (default
 * PF6_MUX0_RET_INSTRUCTIONS, which also selects PF6_MUX1_CYCLES; on an
 * EV67 daemon pass -mux 0 for PF67_RET_INST_AND_CYCLES), both counters,
 * PCNTLOGSELECT, PCNT6READCNTRS.  ev4: PF_CYCLES on counter 0 (counter 1
 * off), PCNTLOGSELECT, PCNTGETCNT; with -prof also PFM_IPL and
 * PFM_PROFILING over this program's text (PCNTSETURANGE, stride 4).
 *
 * For each N: PCNTCLEARCNT, start (PCNT5RESTART, PCNT6RESTART or
 * PCNTRENABLE), the loop, PCNTRDISABLE, read.  Everything between the
 * start ioctl's return and the disable ioctl's system call is the loop
 * plus a fixed number of instructions (the ioctl wrapper's return and
 * entry, the call).  One line per N:
 *
 *	ev5 n=N c0=X c1=X c2=X fid=F,F,F flags=X
 *	ev6 n=N c0=X c1=X fid=F,F flags=X
 *	ev4 n=N period=P interrupts=X flags=X [ipl=I0,...,I8 sample_period=S
 *	    lost=L throttled=T rsize=R samples=S in_loop=S loop_buckets=F-L]
 *
 * (fid: PCNTGETINFO's pi_fidelity, flags: pi_flags, PFM_INFO_USER_ONLY 8.)
 * Exit status 0, or 1 with a message on the first failing call.
 * The device is $PFM_DEVICE if set, else /dev/pfcntr.
 */
#define _DEFAULT_SOURCE
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef __aarch64__
#error "pmu_probe's loops are aarch64 assembly"
#endif

void spin_loop(unsigned long n);
void sys_loop(unsigned long n);

/*
 * Each loop starts a 64-byte block of its own, so the 16-byte profile
 * buckets (stride 4) of spin_loop hold nothing else: its first bucket is
 * the two loop instructions and the ret.
 */
__asm__(
	".text\n"
	".balign 64\n"
	".global spin_loop\n"
	".type spin_loop, %function\n"
	"spin_loop:\n"
	"1:	subs x0, x0, #1\n"
	"	b.ne 1b\n"
	"	ret\n"
	".size spin_loop, .-spin_loop\n"
	".balign 64\n"
	".global spin_loop_end\n"
	"spin_loop_end:\n"
	".global sys_loop\n"
	".type sys_loop, %function\n"
	"sys_loop:\n"
	"	mov x9, x0\n"
	"	mov x8, #173\n"		/* __NR_getppid */
	"2:	svc #0\n"
	"	subs x9, x9, #1\n"
	"	b.ne 2b\n"
	"	ret\n"
	".size sys_loop, .-sys_loop\n"
	".balign 64\n"
);

extern char spin_loop_end;
extern char __executable_start;		/* first byte of the text (ld) */
extern char etext;			/* first byte after it */

static const char *prog = "pmu_probe";
static int fd = -1;

static void
die(const char *what)
{
	int e = errno;

	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(e));
	exit(1);
}

static void
usage(void)
{
	fprintf(stderr,
	    "usage: %s loop N\n"
	    "       %s ev5 [-c0 EV] [-c1 EV] [-c2 EV] [-ctx user|kernel|all] [-loop spin|sys] N...\n"
	    "       %s ev6 [-mux WORD] [-loop spin|sys] N...\n"
	    "       %s ev4 [-period 4096|65536] [-prof] [-loop spin|sys] N...\n",
	    prog, prog, prog, prog);
	exit(2);
}

/* An ioctl whose declared type is long takes the address of the long. */
static void
lioctl(unsigned long req, unsigned long v, const char *name)
{
	if (ioctl(fd, req, &v) < 0)
		die(name);
}

static void
nioctl(unsigned long req, const char *name)
{
	if (ioctl(fd, req, 0) < 0)
		die(name);
}

static unsigned long
number(const char *s)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || *end || end == s)
		usage();
	return v;
}

static void (*pick_loop(const char *s))(unsigned long)
{
	if (strcmp(s, "spin") == 0)
		return spin_loop;
	if (strcmp(s, "sys") == 0)
		return sys_loop;
	usage();
	return 0;
}

static struct pfm_info
info(void)
{
	struct pfm_info pi;

	memset(&pi, 0, sizeof pi);
	if (ioctl(fd, PCNTGETINFO, &pi) < 0)
		die("PCNTGETINFO");
	return pi;
}

static void
open_device(void)
{
	const char *dev = getenv("PFM_DEVICE");

	if (dev == 0 || *dev == '\0')
		dev = "/dev/pfcntr";
	if ((fd = open(dev, O_RDONLY | PCNTOPENALL)) < 0)
		die(dev);
}

static const struct ev5name {
	const char	*name;
	int		counter;
	unsigned long	code;
} ev5names[] = {
	{ "CYCLES",		0, PF5_MUX0_CYCLES },
	{ "ISSUES",		0, PF5_MUX0_ISSUES },
	{ "NON_ISSUE_CYCLES",	1, PF5_MUX1_NON_ISSUE_CYCLES },
	{ "PIPELINE_DRY",	1, PF5_MUX1_PIPELINE_DRY },
	{ "FLOW_CHANGE",	1, PF5_MUX1_FLOW_CHANGE },
	{ "C_LOAD_INSTRUCTIONS", 1, PF5_MUX1_C_LOAD_INSTRUCTIONS },
	{ "C_STORE_INSTRUCTIONS", 1, PF5_MUX1_C_STORE_INSTRUCTIONS },
	{ "C_DCACHE_ACCESS",	1, PF5_MUX1_C_DCACHE_ACCESS },
	{ "C_CYCLES",		2, PF5_MUX2_C_CYCLES },
	{ "C_BRANCH_MISPREDICTS", 2, PF5_MUX2_C_BRANCH_MISPREDICTS },
	{ "C_DCACHE_MISSES",	2, PF5_MUX2_C_DCACHE_MISSES },
	{ 0, 0, 0 }
};

static unsigned long
ev5event(const char *s, int counter)
{
	const struct ev5name *e;

	for (e = ev5names; e->name; e++)
		if (e->counter == counter && strcmp(s, e->name) == 0)
			return e->code;
	return number(s);
}

static int
ev5(int argc, char **argv)
{
	unsigned long mux = 0, sel = 0, mode = PF5_CTXT_USER;
	void (*loop)(unsigned long) = spin_loop;
	struct pfcntrs_ev5 c, *p = &c;
	struct pfm_info pi;
	int a;

	for (a = 0; a < argc && argv[a][0] == '-'; a++) {
		if (a + 1 >= argc)
			usage();
		if (strncmp(argv[a], "-c", 2) == 0 && argv[a][2] >= '0' &&
		    argv[a][2] <= '2' && argv[a][3] == '\0') {
			int n = argv[a][2] - '0';

			mux |= ev5event(argv[++a], n);
			sel |= 1UL << n;
		} else if (strcmp(argv[a], "-ctx") == 0) {
			a++;
			if (strcmp(argv[a], "user") == 0)
				mode = PF5_CTXT_USER;
			else if (strcmp(argv[a], "kernel") == 0)
				mode = PF5_CTXT_KERNEL;
			else if (strcmp(argv[a], "all") == 0)
				mode = PF5_CTXT_ALL_MODES;
			else
				usage();
		} else if (strcmp(argv[a], "-loop") == 0)
			loop = pick_loop(argv[++a]);
		else
			usage();
	}
	if (a >= argc || sel == 0)
		usage();
	open_device();
	lioctl(PCNTSETITEMS, PFM_COUNTERS, "PCNTSETITEMS");
	lioctl(PCNT5CTXTS, PF5_CTXT_THIS_PROC | mode, "PCNT5CTXTS");
	lioctl(PCNT5FREQ, PF5_C0_INT_EVERY_65536 | PF5_C1_INT_EVERY_65536 |
	    PF5_C2_INT_EVERY_16384, "PCNT5FREQ");
	/* Every counter off, select, then start only those asked for. */
	lioctl(PCNT5DISABLE, PF5_SEL_COUNTER_0 | PF5_SEL_COUNTER_1 |
	    PF5_SEL_COUNTER_2, "PCNT5DISABLE");
	lioctl(PCNT5MUX, mux, "PCNT5MUX");
	for (; a < argc; a++) {
		unsigned long n = number(argv[a]);

		if (n == 0)
			usage();
		nioctl(PCNTCLEARCNT, "PCNTCLEARCNT");
		lioctl(PCNT5RESTART, sel, "PCNT5RESTART");
		loop(n);
		nioctl(PCNTRDISABLE, "PCNTRDISABLE");
		memset(&c, 0, sizeof c);
		if (ioctl(fd, PCNT5READCNTRS, &p) < 0)
			die("PCNT5READCNTRS");
		pi = info();
		printf("ev5 n=%lu c0=%lu c1=%lu c2=%lu fid=%lu,%lu,%lu flags=%lu\n", n,
		    c.pf_cntr0, c.pf_cntr1, c.pf_cntr2, pi.pi_fidelity[0],
		    pi.pi_fidelity[1], pi.pi_fidelity[2], pi.pi_flags);
		fflush(stdout);
	}
	return 0;
}

static int
ev6(int argc, char **argv)
{
	unsigned long mux = PF6_MUX0_RET_INSTRUCTIONS;
	void (*loop)(unsigned long) = spin_loop;
	struct pfcntrs_ev6 c, *p = &c;
	union pmctrs_ev6 sel;
	struct pfm_info pi;
	int a;

	for (a = 0; a < argc && argv[a][0] == '-'; a++) {
		if (a + 1 >= argc)
			usage();
		if (strcmp(argv[a], "-mux") == 0)
			mux = number(argv[++a]);
		else if (strcmp(argv[a], "-loop") == 0)
			loop = pick_loop(argv[++a]);
		else
			usage();
	}
	if (a >= argc)
		usage();
	open_device();
	lioctl(PCNTSETITEMS, PFM_COUNTERS, "PCNTSETITEMS");
	nioctl(PCNTLOGSELECT, "PCNTLOGSELECT");
	lioctl(PCNT6MUX, mux, "PCNT6MUX");
	nioctl(PCNTRDISABLE, "PCNTRDISABLE");
	for (; a < argc; a++) {
		unsigned long n = number(argv[a]);

		if (n == 0)
			usage();
		nioctl(PCNTCLEARCNT, "PCNTCLEARCNT");
		memset(&sel, 0, sizeof sel);
		sel.pmctrs_ev6_cpu = PMCTRS_ALL_CPUS;
		sel.pmctrs_ev6_select = PF6_SEL_COUNTER_0 | PF6_SEL_COUNTER_1;
		if (ioctl(fd, PCNT6RESTART, &sel.pmctrs_ev6_long) < 0)
			die("PCNT6RESTART");
		loop(n);
		nioctl(PCNTRDISABLE, "PCNTRDISABLE");
		memset(&c, 0, sizeof c);
		if (ioctl(fd, PCNT6READCNTRS, &p) < 0)
			die("PCNT6READCNTRS");
		pi = info();
		printf("ev6 n=%lu c0=%lu c1=%lu fid=%lu,%lu flags=%lu\n", n, c.pf_cntr0,
		    c.pf_cntr1, pi.pi_fidelity[0], pi.pi_fidelity[1], pi.pi_flags);
		fflush(stdout);
	}
	return 0;
}

static int
ev4(int argc, char **argv)
{
	void (*loop)(unsigned long) = spin_loop;
	unsigned long period = 4096;
	struct pfcntrs c, *p = &c;
	struct pfipls ipl, *ip = &ipl;
	struct iccsr mux;
	struct pfm_info pi;
	addr_range_t range;
	int a, prof = 0, i;

	for (a = 0; a < argc && argv[a][0] == '-'; a++) {
		if (strcmp(argv[a], "-prof") == 0)
			prof = 1;
		else if (strcmp(argv[a], "-period") == 0 && a + 1 < argc)
			period = number(argv[++a]);
		else if (strcmp(argv[a], "-loop") == 0 && a + 1 < argc)
			loop = pick_loop(argv[++a]);
		else
			usage();
	}
	if (a >= argc || (period != 4096 && period != 65536))
		usage();
	open_device();
	lioctl(PCNTSETITEMS, prof ? PFM_COUNTERS | PFM_IPL | PFM_PROFILING : PFM_COUNTERS,
	    "PCNTSETITEMS");
	memset(&mux, 0, sizeof mux);
	mux.iccsr_mux0 = PF_CYCLES;
	mux.iccsr_pc0 = period == 4096 ? PF_C0_INT_EVERY_4096 : PF_C0_INT_EVERY_65536;
	mux.iccsr_disable = 2;			/* counter 1 off */
	if (ioctl(fd, PCNTSETMUX, &mux) < 0)
		die("PCNTSETMUX");
	nioctl(PCNTLOGSELECT, "PCNTLOGSELECT");
	for (; a < argc; a++) {
		unsigned long n = number(argv[a]);

		if (n == 0)
			usage();
		if (prof) {
			/* A new range starts with zeroed buckets. */
			memset(&range, 0, sizeof range);
			range.start = (unsigned long)&__executable_start;
			range.end = (unsigned long)&etext;
			range.stride = 4;
			if (ioctl(fd, PCNTSETURANGE, &range) < 0)
				die("PCNTSETURANGE");
		}
		nioctl(PCNTCLEARCNT, "PCNTCLEARCNT");
		nioctl(PCNTRENABLE, "PCNTRENABLE");
		loop(n);
		nioctl(PCNTRDISABLE, "PCNTRDISABLE");
		memset(&c, 0, sizeof c);
		if (ioctl(fd, PCNTGETCNT, &p) < 0)
			die("PCNTGETCNT");
		pi = info();
		printf("ev4 n=%lu period=%lu interrupts=%lu flags=%lu", n, period,
		    c.pf_cntr0, pi.pi_flags);
		if (prof) {
			unsigned long samples = 0, in_loop = 0, first, last, b, nb;
			unsigned int *buckets;
			long rsize = 0;
			ssize_t got;

			memset(&ipl, 0, sizeof ipl);
			if (ioctl(fd, PCNTGETIPLHIS, &ip) < 0)
				die("PCNTGETIPLHIS");
			if (ioctl(fd, PCNTGETRSIZE, &rsize) < 0)
				die("PCNTGETRSIZE");
			if (rsize <= 0 || (buckets = malloc((size_t)rsize)) == 0)
				die("PCNTGETRSIZE/malloc");
			if ((got = read(fd, buckets, (size_t)rsize)) != rsize)
				die("read");
			nb = (unsigned long)rsize / 4;
			/* spin_loop's buckets: 16 bytes each from the range start. */
			first = ((unsigned long)spin_loop - range.start) / 16;
			last = ((unsigned long)&spin_loop_end - 1 - range.start) / 16;
			for (b = 0; b < nb; b++) {
				samples += buckets[b];
				if (b >= first && b <= last)
					in_loop += buckets[b];
			}
			printf(" ipl=");
			for (i = 0; i < 9; i++)
				printf("%s%lu", i ? "," : "", ipl.ipl[i]);
			printf(" sample_period=%lu lost=%lu throttled=%lu rsize=%ld samples=%lu"
			    " in_loop=%lu loop_buckets=%lu-%lu", pi.pi_sample_period[0],
			    pi.pi_lost_samples, pi.pi_throttled, rsize, samples, in_loop,
			    first, last);
			free(buckets);
		}
		printf("\n");
		fflush(stdout);
	}
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc < 3)
		usage();
	if (strcmp(argv[1], "loop") == 0) {
		unsigned long n = number(argv[2]);

		if (n == 0 || argc != 3)
			usage();
		spin_loop(n);
		return 0;
	}
	if (strcmp(argv[1], "ev5") == 0)
		return ev5(argc - 2, argv + 2);
	if (strcmp(argv[1], "ev6") == 0)
		return ev6(argc - 2, argv + 2);
	if (strcmp(argv[1], "ev4") == 0)
		return ev4(argc - 2, argv + 2);
	usage();
	return 2;
}
