/*
 * ev4count -- count 21064 (EV4) events over a workload with /dev/pfcntr.
 *
 * usage: ev4count [-one | -each | -all] [-select] [-cpu K] [-ipl]
 *                 [-mux0 EVENT] [-mux1 EVENT] [-pc0 4096|65536] [-pc1 256|4096]
 *                 [-ms N] [-- command [args ...]]
 *
 *	-one, -each, -all	open mode (default -all).  -one binds this
 *				process to one CPU first: -cpu K, or the CPU
 *				it is running on.
 *	-select			count only this process and its children
 *				(PCNTLOGSELECT) instead of the whole system.
 *	-ipl			keep the IPL histogram too (PFM_IPL) and print
 *				it after the counts.
 *	-mux0 EVENT		counter 0 event (default PF_CYCLES).
 *	-mux1 EVENT		enable counter 1 with this event (default: off).
 *	-pc0, -pc1		events per interrupt (default 4096 for both).
 *	-ms N			busy-loop N ms of CPU time (default 200) ...
 *	-- command		... or run this command and wait for it.
 *
 * An ordinary user may not count the whole system unless pfmd allows it
 * (kernel.perf_event_paranoid, CAP_PERFMON, pfmd --allow-group): PCNTLOGALL
 * then fails with EACCES and -select is the way.
 *
 * EVENT is a name (PF_CYCLES or cycles) or a number.  Output, one line per
 * element of the PCNTGETCNT array:
 *
 *	cpu=all pf_cntr0=N pf_cntr1=N pr_cycle=N	(-all)
 *	cpu=K pf_cntr0=N pf_cntr1=N pr_cycle=N		(-each: every CPU; -one: the bound CPU)
 *	workload_cpu_ns=N
 *
 * and with -ipl, one line per element of the PCNTGETIPLHIS array: the
 * ticks at each IPL, idle ticks (a part of IPL 0), user-mode ticks, and
 * their total (idle not counted twice), which is the interrupts counted:
 *
 *	ipl cpu=K ipl0=N ipl1=N ... ipl5=N idle=N user=N total=N
 *
 * then the samples the host lost (PCNTGETINFO's pi_lost_samples, for the
 * whole open) and the interrupts they stood for, which no histogram holds
 * (at counter 0's weight, pi_sample_period[0] / pi_period[0]: the count does
 * not say which counter's samples were lost):
 *
 *	lost_samples=N lost_interrupts=N
 *
 * The counts are the driver's interrupt counts (events / period), as pfm(7)
 * says.  The device is $PFM_DEVICE if set, else /dev/pfcntr.
 *
 * Errors name the failing call and errno.  Two say what to do: an open that
 * finds no daemon (ENOENT, ENOTCONN, ECONNABORTED) asks "is pfmd running?",
 * and an EV4 ioctl refused with EINVAL by a daemon emulating another family
 * names the model it emulates (PCNTGETINFO) and the --model to start:
 *
 *	ev4count: PCNTSETMUX: Invalid argument: the daemon emulates ev6 (21264); start pfmd --model ev4
 */
#define _GNU_SOURCE			/* sched_setaffinity, sched_getcpu */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static char *prog = "ev4count";
static int fd = -1;

static struct evname {
	char	*name;
	int	counter;
	int	code;
} evnames[] = {
	{ "PF_ISSUES",		0, PF_ISSUES },
	{ "PF_PIPEDRY",		0, PF_PIPEDRY },
	{ "PF_LOADI",		0, PF_LOADI },
	{ "PF_PIPEFROZEN",	0, PF_PIPEFROZEN },
	{ "PF_BRANCHI",		0, PF_BRANCHI },
	{ "PF_CYCLES",		0, PF_CYCLES },
	{ "PF_PALMODE",		0, PF_PALMODE },
	{ "PF_NONISSUES",	0, PF_NONISSUES },
	{ "PF_EXTPIN0",		0, PF_EXTPIN0 },
	{ "PF_DCACHE",		1, PF_DCACHE },
	{ "PF_ICACHE",		1, PF_ICACHE },
	{ "PF_DUAL",		1, PF_DUAL },
	{ "PF_BRANCHMISS",	1, PF_BRANCHMISS },
	{ "PF_FPINST",		1, PF_FPINST },
	{ "PF_INTOPS",		1, PF_INTOPS },
	{ "PF_STOREI",		1, PF_STOREI },
	{ "PF_EXTPIN1",		1, PF_EXTPIN1 },
	{ 0, 0, 0 }
};

/* errno's symbolic name. */
static char *
errname(int e)
{
	static char buf[16];

	switch (e) {
	case EPERM:	return "EPERM";
	case ENOENT:	return "ENOENT";
	case ESRCH:	return "ESRCH";
	case EINTR:	return "EINTR";
	case EIO:	return "EIO";
	case ENXIO:	return "ENXIO";
	case E2BIG:	return "E2BIG";
	case ENOEXEC:	return "ENOEXEC";
	case EBADF:	return "EBADF";
	case ECHILD:	return "ECHILD";
	case EAGAIN:	return "EAGAIN";
	case ENOMEM:	return "ENOMEM";
	case EACCES:	return "EACCES";
	case EFAULT:	return "EFAULT";
	case EBUSY:	return "EBUSY";
	case EEXIST:	return "EEXIST";
	case ENODEV:	return "ENODEV";
	case ENOTDIR:	return "ENOTDIR";
	case EISDIR:	return "EISDIR";
	case EINVAL:	return "EINVAL";
	case ENFILE:	return "ENFILE";
	case EMFILE:	return "EMFILE";
	case ENOTTY:	return "ENOTTY";
	case ENOSPC:	return "ENOSPC";
	case EROFS:	return "EROFS";
	case ERANGE:	return "ERANGE";
	case ENOSYS:	return "ENOSYS";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENOTCONN:	return "ENOTCONN";
	case ECONNABORTED: return "ECONNABORTED";
	case ETIMEDOUT:	return "ETIMEDOUT";
	case ECONNREFUSED: return "ECONNREFUSED";
	}
	sprintf(buf, "E%d", e);
	return buf;
}

static void
usage(void)
{
	fprintf(stderr, "usage: %s [-one|-each|-all] [-select] [-cpu K] [-ipl] "
	    "[-mux0 EVENT] [-mux1 EVENT] [-pc0 4096|65536] [-pc1 256|4096] "
	    "[-ms N] [-- command [args ...]]\n", prog);
	exit(2);
}

/* Report a failed call by name and errno name, and give up. */
static void
die(char *what)
{
	int e = errno;

	fprintf(stderr, "%s: %s: %s (%s)\n", prog, what, errname(e), strerror(e));
	if (fd >= 0)
		close(fd);
	exit(1);
}

/* One ioctl; on failure report it by name and exit. */
#define IOCTL(req, arg) \
	do { if (ioctl(fd, req, arg) < 0) die(#req); } while (0)

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

	if (e == ENOENT || e == ENOTCONN || e == ECONNABORTED) {
		fprintf(stderr, "%s: %s: %s (%s; is pfmd running? systemctl start pfmd)\n",
		    prog, dev, strerror(e), errname(e));
		exit(1);
	}
	die(dev);
}

/* An EV4 ioctl failed: EINVAL from a daemon emulating another family says which. */
static void
family_failed(char *what)
{
	int e = errno;
	struct pfm_info pi;

	memset(&pi, 0, sizeof pi);
	if (e == EINVAL && ioctl(fd, PCNTGETINFO, &pi) == 0 &&
	    pi.pi_family != PFM_FAMILY_EV4 && pi.pi_impl <= PFM_IMPL_EV67) {
		fprintf(stderr, "%s: %s: %s: the daemon emulates %s; start pfmd --model ev4\n",
		    prog, what, strerror(e), models[pi.pi_impl]);
		exit(1);
	}
	errno = e;
	die(what);
}

/* An EV4-family ioctl. */
#define FIOCTL(req, arg) \
	do { if (ioctl(fd, req, arg) < 0) family_failed(#req); } while (0)

static int
event(char *s, int counter)
{
	struct evname *e;
	char *end;
	long v;

	for (e = evnames; e->name; e++) {
		if (e->counter != counter)
			continue;
		if (strcasecmp(s, e->name) == 0 || strcasecmp(s, e->name + 3) == 0)
			return e->code;
	}
	v = strtol(s, &end, 0);
	if (*s == '\0' || *end != '\0' || v < 0 || v > (counter ? 7 : 15)) {
		fprintf(stderr, "%s: %s is not a counter %d event\n", prog, s, counter);
		exit(2);
	}
	return (int)v;
}

static long
number(char *s)
{
	char *end;
	long v;

	v = strtol(s, &end, 0);
	if (*s == '\0' || *end != '\0' || v < 0) {
		fprintf(stderr, "%s: bad number %s\n", prog, s);
		exit(2);
	}
	return v;
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

/* Busy-loop for ms milliseconds of this thread's CPU time; returns the ns used. */
static long long
burn(long ms)
{
	struct timespec t0, t;
	volatile unsigned long x = 1;
	long long ns;
	int i;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0) < 0)
		die("clock_gettime");
	do {
		for (i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
		if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) < 0)
			die("clock_gettime");
		ns = ts_ns(&t) - ts_ns(&t0);
	} while (ns < ms * 1000000LL);
	return ns;
}

/* Run argv as a child and wait; returns the CPU time (user + system) it used. */
static long long
run(char **argv)
{
	struct rusage r0, r1;
	pid_t pid;
	int status;

	if (getrusage(RUSAGE_CHILDREN, &r0) < 0)
		die("getrusage");
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
	if (getrusage(RUSAGE_CHILDREN, &r1) < 0)
		die("getrusage");
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
		close(fd);
		exit(1);
	}
	if (WIFSIGNALED(status))
		fprintf(stderr, "%s: %s: killed by signal %d\n", prog, argv[0], WTERMSIG(status));
	else if (WEXITSTATUS(status) != 0)
		fprintf(stderr, "%s: %s: exit status %d\n", prog, argv[0], WEXITSTATUS(status));
	return tv_ns(&r1.ru_utime) - tv_ns(&r0.ru_utime) +
	    tv_ns(&r1.ru_stime) - tv_ns(&r0.ru_stime);
}

int
main(int argc, char **argv)
{
	char *dev;
	int mode = PCNTOPENALL, select = 0, cpu = -1;
	int mux0 = PF_CYCLES, mux1 = -1;
	int pc0 = PF_C0_INT_EVERY_4096, pc1 = PF_C1_INT_EVERY_4096;
	long ms = 200, items = PFM_COUNTERS, n, i, j, total;
	char **cmd = 0;
	struct iccsr iccsr;
	struct pfm_info info;
	struct pfcntrs *cntrs, *p;
	struct pfipls *ipls = 0, *q;
	long long ns;
	cpu_set_t set;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-one") == 0)
			mode = PCNTOPENONE;
		else if (strcmp(argv[i], "-each") == 0)
			mode = PCNTOPENEACH;
		else if (strcmp(argv[i], "-all") == 0)
			mode = PCNTOPENALL;
		else if (strcmp(argv[i], "-select") == 0)
			select = 1;
		else if (strcmp(argv[i], "-ipl") == 0)
			items |= PFM_IPL;
		else if (strcmp(argv[i], "-cpu") == 0 && i + 1 < argc)
			cpu = (int)number(argv[++i]);
		else if (strcmp(argv[i], "-mux0") == 0 && i + 1 < argc)
			mux0 = event(argv[++i], 0);
		else if (strcmp(argv[i], "-mux1") == 0 && i + 1 < argc)
			mux1 = event(argv[++i], 1);
		else if (strcmp(argv[i], "-pc0") == 0 && i + 1 < argc) {
			n = number(argv[++i]);
			if (n == 4096)
				pc0 = PF_C0_INT_EVERY_4096;
			else if (n == 65536)
				pc0 = PF_C0_INT_EVERY_65536;
			else
				usage();
		} else if (strcmp(argv[i], "-pc1") == 0 && i + 1 < argc) {
			n = number(argv[++i]);
			if (n == 256)
				pc1 = PF_C1_INT_EVERY_256;
			else if (n == 4096)
				pc1 = PF_C1_INT_EVERY_4096;
			else
				usage();
		} else if (strcmp(argv[i], "-ms") == 0 && i + 1 < argc)
			ms = number(argv[++i]);
		else if (strcmp(argv[i], "--") == 0) {
			if (i + 1 < argc)
				cmd = &argv[i + 1];
			break;
		} else
			usage();
	}

	if ((dev = getenv("PFM_DEVICE")) == 0 || *dev == '\0')
		dev = "/dev/pfcntr";

	/* PCNTOPENONE: the opening thread must be bound to exactly one CPU. */
	if (mode == PCNTOPENONE) {
		if (cpu < 0 && (cpu = sched_getcpu()) < 0)
			die("sched_getcpu");
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof set, &set) < 0)
			die("sched_setaffinity");
	}

	if ((fd = open(dev, O_RDONLY | mode)) < 0)
		open_failed(dev);
	(void)fcntl(fd, F_SETFD, FD_CLOEXEC);	/* the workload need not hold it */

	/* How many elements PCNTGETCNT fills: one per CPU in EACH mode. */
	n = 1;
	if (mode == PCNTOPENEACH) {
		memset(&info, 0, sizeof info);
		if (ioctl(fd, PCNTGETINFO, &info) == 0 && info.pi_ncpus > 0)
			n = (long)info.pi_ncpus;
		else if ((n = sysconf(_SC_NPROCESSORS_CONF)) < 1)
			n = 1;
	}
	if ((cntrs = calloc(n, sizeof *cntrs)) == 0)
		die("calloc");

	memset(&iccsr, 0, sizeof iccsr);
	iccsr.iccsr_mux0 = mux0;
	iccsr.iccsr_pc0 = pc0;
	if (mux1 >= 0) {
		iccsr.iccsr_mux1 = mux1;
		iccsr.iccsr_pc1 = pc1;
		iccsr.iccsr_disable = 0;
	} else
		iccsr.iccsr_disable = 2;	/* counter 1 off */

	IOCTL(PCNTSETITEMS, &items);
	FIOCTL(PCNTSETMUX, &iccsr);
	if (select)
		IOCTL(PCNTLOGSELECT, 0);
	else if (ioctl(fd, PCNTLOGALL, 0) < 0) {
		int e = errno;

		if (e == EACCES)
			fprintf(stderr, "%s: counting the whole system needs privilege "
			    "(perf_event_paranoid <= 0, CAP_PERFMON or pfmd --allow-group); "
			    "-select counts this command only\n", prog);
		errno = e;
		die("PCNTLOGALL");
	}
	IOCTL(PCNTCLEARCNT, 0);
	IOCTL(PCNTRENABLE, 0);

	if (cmd)
		ns = run(cmd);
	else
		ns = burn(ms);

	IOCTL(PCNTRDISABLE, 0);
	p = cntrs;
	FIOCTL(PCNTGETCNT, &p);

	for (i = 0; i < n; i++) {
		if (mode == PCNTOPENEACH)
			printf("cpu=%ld", i);
		else if (mode == PCNTOPENONE)
			printf("cpu=%d", cpu);
		else
			printf("cpu=all");
		printf(" pf_cntr0=%lu pf_cntr1=%lu pr_cycle=%lu\n",
		    cntrs[i].pf_cntr0, cntrs[i].pf_cntr1, cntrs[i].pr_cycle);
	}
	printf("workload_cpu_ns=%lld\n", ns);

	if (items & PFM_IPL) {
		if ((ipls = calloc(n, sizeof *ipls)) == 0)
			die("calloc");
		q = ipls;
		IOCTL(PCNTGETIPLHIS, &q);
		for (i = 0; i < n; i++) {
			if (mode == PCNTOPENEACH)
				printf("ipl cpu=%ld", i);
			else if (mode == PCNTOPENONE)
				printf("ipl cpu=%d", cpu);
			else
				printf("ipl cpu=all");
			for (j = 0, total = 0; j <= 5; j++) {
				printf(" ipl%ld=%lu", j, ipls[i].ipl[j]);
				total += ipls[i].ipl[j];
			}
			total += ipls[i].ipl[8];
			printf(" idle=%lu user=%lu total=%ld\n", ipls[i].ipl[7],
			    ipls[i].ipl[8], total);
		}
		free(ipls);
		IOCTL(PCNTGETINFO, &info);
		printf("lost_samples=%lu lost_interrupts=%lu\n", info.pi_lost_samples,
		    info.pi_period[0] ? info.pi_lost_samples *
		    (info.pi_sample_period[0] / info.pi_period[0]) : 0);
	}

	close(fd);
	free(cntrs);
	return 0;
}
