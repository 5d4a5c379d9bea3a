/*
 * errno_contract -- check the errno contract of /dev/pfcntr (pfm(7)).
 *
 * Every row of the contract's errno table that EV4 counting and sampling
 * (IPL histograms, PC profiling) reach, and the positive paths those rows
 * stand on.  One line per check:
 *
 *	PASS name
 *	FAIL name: expected E got G
 *	SKIP name: why
 *
 * then the last line "N passed, N failed".  Exit status 0 iff nothing failed.
 * Lines starting with '#' are information.
 *
 * The device is $PFM_DEVICE if set, else /dev/pfcntr.  Run it once as root
 * and once as an ordinary user: the EACCES rows need the latter, the
 * kernel-profiling rows (PCNTCALLER ranges) the former.  A member of the
 * group pfmd's --allow-group names is privileged although the program cannot
 * tell: run it with -allowed then (usage: errno_contract [-allowed]).  A device without
 * PC profiling (PCNTGETRSIZE refused after a range was set) skips the
 * sampling rows and says so.
 *
 * If the device does not open at all, no other row can run: the program
 * says why on stderr, with "is pfmd running?" when no daemon serves the
 * path (ENOENT, ENOTCONN, ECONNABORTED), and exits 1 after "0 passed,
 * 1 failed".
 */
#define _GNU_SOURCE			/* sched_setaffinity, CPU_SET, MAP_ANONYMOUS */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROW_SECONDS	60		/* a row taking longer has hung */

static char *device;
static int npass, nfail;
static char *row = "start";		/* the check running now */

static int fds[16], nfds;		/* descriptors the row holds */
static char *map;			/* guard-page mapping the row holds */
static size_t maplen;
static cpu_set_t wide;			/* every CPU this process may run on */
static int nwide, first_cpu, second_cpu;

/* What PCNTGETINFO said (EV4 and the CPU count if it could not be asked). */
static int have_info;
static struct pfm_info info;
static unsigned long family = PFM_FAMILY_EV4;
static unsigned long ncpus = 1;

#define FAM(f)	(1 << (f))
#define F4	FAM(PFM_FAMILY_EV4)
#define F5	FAM(PFM_FAMILY_EV5)
#define F6	FAM(PFM_FAMILY_EV6)
#define FANY	(F4 | F5 | F6)

/* errno's symbolic name; 0 is "0". */
static char *
errname(int e)
{
	static char buf[2][16];
	static int which;

	switch (e) {
	case 0:		return "0";
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
	case ETIMEDOUT:	return "ETIMEDOUT";
	case ECONNREFUSED: return "ECONNREFUSED";
	}
	which = !which;
	sprintf(buf[which], "E%d", e);
	return buf[which];
}

/*
 * Rows.  begin() starts one and cleans up whatever the last one left:
 * descriptors closed, guard mapping freed, CPU affinity widened again.
 */
static void
cleanup(void)
{
	while (nfds > 0)
		close(fds[--nfds]);
	if (map) {
		munmap(map, maplen);
		map = 0;
	}
	sched_setaffinity(0, sizeof wide, &wide);
	alarm(0);
}

static void
begin(char *name)
{
	cleanup();
	row = name;
	alarm(ROW_SECONDS);
}

/* The next check of a sequence that keeps its descriptors. */
static void
next(char *name)
{
	row = name;
	alarm(ROW_SECONDS);
}

static void
pass(void)
{
	printf("PASS %s\n", row);
	npass++;
}

static void
fail(char *want, char *got, char *note)
{
	printf("FAIL %s: expected %s got %s", row, want, got);
	if (note)
		printf(" (%s)", note);
	printf("\n");
	nfail++;
}

static void
skip(char *why)
{
	printf("SKIP %s: %s\n", row, why);
}

static void
expect(int want, int got)
{
	if (got == want)
		pass();
	else
		fail(errname(want), errname(got), 0);
}

/* A value check: "expected <what>=<want> got <got>". */
static void
expect_val(char *what, unsigned long want, unsigned long got)
{
	char w[64], g[64];

	if (got == want) {
		pass();
		return;
	}
	snprintf(w, sizeof w, "%s=%lu", what, want);
	snprintf(g, sizeof g, "%lu", got);
	fail(w, g, 0);
}

static void
on_alarm(int sig)
{
	char buf[512];
	int n;

	(void)sig;
	n = snprintf(buf, sizeof buf,
	    "FAIL %s: expected an answer got none in %d s\n%d passed, %d failed\n",
	    row, ROW_SECONDS, npass, nfail + 1);
	if (write(1, buf, (size_t)n) < 0)
		_exit(1);
	_exit(1);
}

/* Open the device; returns the descriptor (held by the row) or -errno. */
static int
dopen(int mode)
{
	int fd;

	if ((fd = open(device, O_RDONLY | mode)) < 0)
		return -errno;
	if (nfds < (int)(sizeof fds / sizeof fds[0]))
		fds[nfds++] = fd;
	return fd;
}

/*
 * Open where EBUSY is not the answer being checked.  Under FUSE the release
 * of a descriptor reaches pfmd after close(2) has returned, so the previous
 * row's close may not have landed yet: retry EBUSY for a while.
 */
static int
sopen(int mode)
{
	struct timespec ts = { 0, 20000000 };
	int fd, i;

	for (i = 0; i < 150; i++) {
		if ((fd = dopen(mode)) != -EBUSY)
			return fd;
		nanosleep(&ts, 0);
	}
	return fd;
}

/* Forget a descriptor the row closed itself. */
static void
dclose(int fd)
{
	int i;

	for (i = 0; i < nfds; i++)
		if (fds[i] == fd) {
			fds[i] = fds[--nfds];
			break;
		}
	close(fd);
}

static int
xioctl(int fd, unsigned long req, void *arg)
{
	return ioctl(fd, req, arg) < 0 ? errno : 0;
}

/* A step that must succeed for the row to mean anything. */
static int
step(int fd, unsigned long req, char *name, void *arg)
{
	int e;

	if ((e = xioctl(fd, req, arg)) != 0)
		fail("0", errname(e), name);
	return e;
}
#define STEP(fd, req, arg)	step(fd, req, #req, arg)

/* Open that must succeed; reports the failure against the row. */
static int
must_open(int mode, char *what)
{
	int fd;

	if ((fd = sopen(mode)) < 0)
		fail("0", errname(-fd), what);
	return fd;
}

static int
bind_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) < 0) {
		fail("0", errname(errno), "sched_setaffinity");
		return -1;
	}
	return 0;
}

static void
unbind(void)
{
	sched_setaffinity(0, sizeof wide, &wide);
}

/*
 * n struct pfcntrs (or pfipls) ending exactly at a PROT_NONE page, so that
 * writing one byte past them faults.  The row holds the mapping.
 */
static void *
guarded(size_t bytes)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t npg = (bytes + pg - 1) / pg + 1;
	char *m;

	m = mmap(0, npg * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		fail("0", errname(errno), "mmap");
		return 0;
	}
	if (mprotect(m + (npg - 1) * pg, pg, PROT_NONE) < 0) {
		fail("0", errname(errno), "mprotect");
		munmap(m, npg * pg);
		return 0;
	}
	map = m;
	maplen = npg * pg;
	return m + (npg - 1) * pg - bytes;
}

/* CPU-bound work: ms milliseconds of this thread's CPU time. */
static void
burn(long ms)
{
	struct timespec t0, t;
	volatile unsigned long x = 1;
	long long ns;
	int i;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	do {
		for (i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
		ns = (long long)(t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec);
	} while (ns < ms * 1000000LL);
}

static void
text_anchor(void)
{
}

/* Does this process hold CAP_PERFMON or CAP_SYS_ADMIN (which allow LOGALL)? */
static int
perf_capable(void)
{
	FILE *f;
	char line[256];
	unsigned long long cap = 0;

	if ((f = fopen("/proc/self/status", "r")) == 0)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "CapEff: %llx", &cap) == 1)
			break;
	fclose(f);
	return (cap >> 38 & 1) || (cap >> 21 & 1);
}

static int allowed;		/* -allowed: in pfmd's --allow-group group */

static int
paranoid(void)
{
	FILE *f;
	int v = 2;

	if ((f = fopen("/proc/sys/kernel/perf_event_paranoid", "r")) != 0) {
		if (fscanf(f, "%d", &v) != 1)
			v = 2;
		fclose(f);
	}
	return v;
}

/* An iccsr image: counter 0 and 1 events, periods, disable bits. */
static struct iccsr
mkiccsr(int mux0, int mux1, int pc0, int pc1, int disable)
{
	struct iccsr r;

	memset(&r, 0, sizeof r);
	r.iccsr_mux0 = mux0;
	r.iccsr_mux1 = mux1;
	r.iccsr_pc0 = pc0;
	r.iccsr_pc1 = pc1;
	r.iccsr_disable = disable;
	return r;
}

/* ------------------------------------------------------------------ */

/* The device did not open (errno e): say why, and what to do when no daemon serves it. */
static void
open_failed(int e)
{
	printf("# the device could not be opened: no other row can run\n");
	fprintf(stderr, "errno_contract: %s: %s%s\n", device, strerror(e),
	    e == ENOENT || e == ENOTCONN || e == ECONNABORTED ?
	    " (is pfmd running? systemctl start pfmd)" : "");
}

/* The device opens and describes itself.  Returns 0 if it can be used. */
static int
info_rows(void)
{
	struct pfm_info pi;
	int fd, e;
	long n;

	if ((n = sysconf(_SC_NPROCESSORS_CONF)) > 0)
		ncpus = (unsigned long)n;

	begin("open_all");
	fd = sopen(PCNTOPENALL);
	expect(0, fd < 0 ? -fd : 0);
	if (fd < 0) {
		open_failed(-fd);
		return -1;
	}

	next("getinfo");
	memset(&info, 0, sizeof info);
	e = xioctl(fd, PCNTGETINFO, &info);
	expect(0, e);
	if (e != 0) {
		printf("# no PCNTGETINFO: assuming EV4 and %lu CPUs\n", ncpus);
		return 0;
	}
	have_info = 1;
	family = info.pi_family;
	if (info.pi_ncpus > 0)
		ncpus = info.pi_ncpus;
	printf("# family %lu impl %lu ncpus %lu ncounters %lu cpu_khz %lu fidelity %lu/%lu\n",
	    info.pi_family, info.pi_impl, info.pi_ncpus, info.pi_ncounters,
	    info.pi_cpu_khz, info.pi_fidelity[0], info.pi_fidelity[1]);

	next("getinfo_version");
	expect_val("pi_version", PFM_INFO_VERSION, info.pi_version);

	next("getinfo_family_known");
	if (info.pi_family <= PFM_FAMILY_EV6)
		pass();
	else
		expect_val("pi_family (0..2)", PFM_FAMILY_EV4, info.pi_family);

	next("getinfo_family_ev4");
	if (info.pi_family == PFM_FAMILY_EV4)
		pass();
	else if (info.pi_family <= PFM_FAMILY_EV6)
		skip("the device emulates another family: EV4 rows skipped, its other-family rows run");
	else
		expect_val("pi_family", PFM_FAMILY_EV4, info.pi_family);

	next("getinfo_impl_matches_family");
	switch (info.pi_family) {
	case PFM_FAMILY_EV4:
		if (info.pi_impl == PFM_IMPL_EV4 || info.pi_impl == PFM_IMPL_EV45)
			pass();
		else
			expect_val("pi_impl (EV4 or EV45)", PFM_IMPL_EV4, info.pi_impl);
		break;
	case PFM_FAMILY_EV5:
		if (info.pi_impl >= PFM_IMPL_EV5 && info.pi_impl <= PFM_IMPL_PCA56)
			pass();
		else
			expect_val("pi_impl (EV5..PCA56)", PFM_IMPL_EV5, info.pi_impl);
		break;
	default:
		if (info.pi_impl == PFM_IMPL_EV6 || info.pi_impl == PFM_IMPL_EV67)
			pass();
		else
			expect_val("pi_impl (EV6 or EV67)", PFM_IMPL_EV6, info.pi_impl);
		break;
	}

	next("getinfo_ncounters");
	expect_val("pi_ncounters", family == PFM_FAMILY_EV5 ? 3 : 2, info.pi_ncounters);

	next("getinfo_ncpus_nonzero");
	if (info.pi_ncpus > 0)
		pass();
	else
		fail("pi_ncpus>0", "0", 0);

	next("getinfo_open_mode_all");
	expect_val("pi_open_mode", PFM_MODE_ALL, info.pi_open_mode);

	next("open_selects_counters_only");
	expect_val("pi_items", PFM_COUNTERS, info.pi_items);

	next("open_disables_and_logs_all");
	expect_val("pi_flags&(ENABLED|LOGSELECT)", 0,
	    info.pi_flags & (PFM_INFO_ENABLED | PFM_INFO_LOGSELECT));

	begin("getinfo_open_mode_each");
	if ((fd = must_open(PCNTOPENEACH, "open EACH")) >= 0) {
		memset(&pi, 0, sizeof pi);
		if (STEP(fd, PCNTGETINFO, &pi) == 0)
			expect_val("pi_open_mode", PFM_MODE_EACH, pi.pi_open_mode);
	}

	begin("getinfo_open_mode_one");
	if (bind_cpu(first_cpu) == 0 && (fd = must_open(PCNTOPENONE, "open ONE")) >= 0) {
		memset(&pi, 0, sizeof pi);
		if (STEP(fd, PCNTGETINFO, &pi) == 0)
			expect_val("pi_open_mode", PFM_MODE_ONE, pi.pi_open_mode);
	}

	begin("no_mode_bits_means_all");
	if ((fd = must_open(0, "open without mode bits")) >= 0) {
		memset(&pi, 0, sizeof pi);
		if (STEP(fd, PCNTGETINFO, &pi) == 0)
			expect_val("pi_open_mode", PFM_MODE_ALL, pi.pi_open_mode);
	}
	return 0;
}

/* Run fn's open in a child process; returns its errno (0: it opened). */
static int
child_open(int mode, int cpu)
{
	cpu_set_t set;
	pid_t pid;
	int status, fd;

	fflush(stdout);
	if ((pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		if (cpu >= 0) {
			CPU_ZERO(&set);
			CPU_SET(cpu, &set);
			if (sched_setaffinity(0, sizeof set, &set) < 0)
				_exit(255);
		}
		if ((fd = open(device, O_RDONLY | mode)) < 0)
			_exit(errno & 0xff);
		close(fd);
		_exit(0);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (!WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

static void
child_row(char *name, int held_mode, int child_mode)
{
	int fd, e;

	begin(name);
	if (held_mode == PCNTOPENONE && bind_cpu(first_cpu) < 0)
		return;
	if ((fd = must_open(held_mode, "first open")) < 0)
		return;
	unbind();
	e = child_open(child_mode, child_mode == PCNTOPENONE ? first_cpu : -1);
	if (e < 0 || e == 255)
		fail("EBUSY", "a child that did not report", 0);
	else
		expect(EBUSY, e);
}

/* Only one holder: a second open needing a held CPU is EBUSY. */
static void
busy_rows(void)
{
	int fd, e;

	begin("ebusy_all_then_all");
	if ((fd = must_open(PCNTOPENALL, "first open")) >= 0) {
		fd = dopen(PCNTOPENALL);
		expect(EBUSY, fd < 0 ? -fd : 0);
	}

	begin("ebusy_all_then_each");
	if ((fd = must_open(PCNTOPENALL, "first open")) >= 0) {
		fd = dopen(PCNTOPENEACH);
		expect(EBUSY, fd < 0 ? -fd : 0);
	}

	begin("ebusy_all_then_one");
	if ((fd = must_open(PCNTOPENALL, "first open")) >= 0 && bind_cpu(first_cpu) == 0) {
		fd = dopen(PCNTOPENONE);
		expect(EBUSY, fd < 0 ? -fd : 0);
	}

	begin("ebusy_one_then_all");
	if (bind_cpu(first_cpu) == 0 && (fd = must_open(PCNTOPENONE, "first open")) >= 0) {
		unbind();
		fd = dopen(PCNTOPENALL);
		expect(EBUSY, fd < 0 ? -fd : 0);
	}

	begin("ebusy_one_then_one_same_cpu");
	if (bind_cpu(first_cpu) == 0 && (fd = must_open(PCNTOPENONE, "first open")) >= 0) {
		fd = dopen(PCNTOPENONE);
		expect(EBUSY, fd < 0 ? -fd : 0);
	}

	child_row("ebusy_all_held_other_process_all", PCNTOPENALL, PCNTOPENALL);
	child_row("ebusy_all_held_other_process_one", PCNTOPENALL, PCNTOPENONE);
	child_row("ebusy_each_held_other_process_each", PCNTOPENEACH, PCNTOPENEACH);
	child_row("ebusy_one_held_other_process_one_same_cpu", PCNTOPENONE, PCNTOPENONE);
	child_row("ebusy_one_held_other_process_all", PCNTOPENONE, PCNTOPENALL);

	/* And once released, the device opens again. */
	begin("open_after_release");
	if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		dclose(fd);
		fd = sopen(PCNTOPENALL);
		expect(0, fd < 0 ? -fd : 0);
	}

	begin("one_other_cpu_same_process_ok");
	if (nwide < 2)
		skip("only one CPU here");
	else if (bind_cpu(first_cpu) == 0 && (fd = must_open(PCNTOPENONE, "first open")) >= 0 &&
	    bind_cpu(second_cpu) == 0) {
		fd = sopen(PCNTOPENONE);
		expect(0, fd < 0 ? -fd : 0);
	}

	begin("einval_one_unbound");
	if (nwide < 2)
		skip("only one CPU here: every thread is bound to exactly one");
	else {
		unbind();
		fd = sopen(PCNTOPENONE);
		e = fd < 0 ? -fd : 0;
		expect(EINVAL, e);
	}

	begin("one_bound_opens");
	if (bind_cpu(first_cpu) == 0) {
		fd = sopen(PCNTOPENONE);
		expect(0, fd < 0 ? -fd : 0);
	}
}

/* PCNTSETMUX validation (contract 5.1). */
static struct muxrow {
	char	*name;
	int	mux0, mux1, pc0, pc1, disable;
	int	ign;		/* which ign field to set to 1 (0: none, 1..4: ign0..ign3) */
	int	want;
} muxrows[] = {
	{ "setmux_cycles_ok",		PF_CYCLES, PF_DCACHE, 1, 0, 2, 0, 0 },
	{ "setmux_cycles_65536_ok",	PF_CYCLES, PF_DCACHE, 0, 0, 2, 0, 0 },
	{ "setmux_disable_3",		PF_CYCLES, PF_DCACHE, 1, 0, 3, 0, EINVAL },
	{ "setmux_ign0_nonzero",	PF_CYCLES, PF_DCACHE, 1, 0, 2, 1, EINVAL },
	{ "setmux_ign1_nonzero",	PF_CYCLES, PF_DCACHE, 1, 0, 2, 2, EINVAL },
	{ "setmux_ign2_nonzero",	PF_CYCLES, PF_DCACHE, 1, 0, 2, 3, EINVAL },
	{ "setmux_ign3_nonzero",	PF_CYCLES, PF_DCACHE, 1, 0, 2, 4, EINVAL },
	{ "setmux_unknown_mux0_0x1",	0x1, PF_DCACHE, 1, 0, 2, 0, EINVAL },
	{ "setmux_unknown_mux0_0x3",	0x3, PF_DCACHE, 1, 0, 2, 0, EINVAL },
	{ "setmux_unknown_mux0_0x5",	0x5, PF_DCACHE, 1, 0, 2, 0, EINVAL },
	{ "setmux_unknown_mux0_0x7",	0x7, PF_DCACHE, 1, 0, 2, 0, EINVAL },
	{ "setmux_unknown_mux0_0x9",	0x9, PF_DCACHE, 1, 0, 2, 0, EINVAL },
	{ "setmux_unknown_mux0_0xd",	0xd, PF_DCACHE, 1, 0, 2, 0, EINVAL },
	{ "setmux_unknown_mux0_0xf",	0xf, PF_DCACHE, 1, 0, 2, 0, EINVAL },
	{ "setmux_unknown_mux0_disabled", 0xf, PF_DCACHE, 1, 0, 1, 0, EINVAL },
	{ "setmux_palmode_eopnotsupp",	PF_PALMODE, PF_DCACHE, 1, 0, 2, 0, EOPNOTSUPP },
	{ "setmux_extpin0_eopnotsupp",	PF_EXTPIN0, PF_DCACHE, 1, 0, 2, 0, EOPNOTSUPP },
	{ "setmux_extpin1_eopnotsupp",	PF_CYCLES, PF_EXTPIN1, 1, 0, 0, 0, EOPNOTSUPP },
	{ "setmux_extpin1_disabled_ok",	PF_CYCLES, PF_EXTPIN1, 1, 0, 2, 0, 0 },
	{ 0, 0, 0, 0, 0, 0, 0, 0 }
};

static void
mux_rows(void)
{
	struct muxrow *m;
	struct iccsr r;
	int fd;

	for (m = muxrows; m->name; m++) {
		begin(m->name);
		if (family != PFM_FAMILY_EV4) {
			skip("PCNTSETMUX is EV4 only");
			continue;
		}
		if ((fd = must_open(PCNTOPENALL, "open")) < 0)
			continue;
		r = mkiccsr(m->mux0, m->mux1, m->pc0, m->pc1, m->disable);
		switch (m->ign) {
		case 1: r.iccsr_ign0 = 1; break;
		case 2: r.iccsr_ign1 = 1; break;
		case 3: r.iccsr_ign2 = 1; break;
		case 4: r.iccsr_ign3 = 1; break;
		}
		expect(m->want, xioctl(fd, PCNTSETMUX, &r));
	}
}

/* The argument an ioctl row passes. */
enum {
	A_NONE,		/* no argument */
	A_LONG0,	/* &(long)0 */
	A_COUNTERS,	/* &(long)PFM_COUNTERS */
	A_ICCSR,	/* &iccsr counting PF_CYCLES, counter 1 off */
	A_ARRAY,	/* &p, p a roomy array */
	A_NULLPTR,	/* &p, p == NULL */
	A_NULL,		/* NULL itself */
	A_GUARD_FULL,	/* &p, p the exact array (1, or ncpus for EACH) ending at a guard page */
	A_GUARD_SHORT,	/* &p, p one element short of that */
	A_UADDR,	/* &struct addr_range over our text */
	A_KADDR,	/* &struct addr_range over kernel text */
	A_URANGE,	/* &addr_range_t over our text, stride 4 */
	A_KRANGE	/* &addr_range_t over kernel text, stride 4 */
};

static struct ioctlrow {
	char		*name;
	int		families;	/* families the row applies to */
	int		mode;		/* open mode */
	long		items;		/* PCNTSETITEMS first if nonzero */
	unsigned long	req;		/* the ioctl under test */
	int		arg;		/* A_* */
	int		want;		/* errno expected, 0 for success */
} ioctlrows[] = {
	{ "setitems_none",		FANY, PCNTOPENALL, 0, PCNTSETITEMS, A_LONG0, EINVAL },
	{ "setitems_counters_ok",	FANY, PCNTOPENALL, 0, PCNTSETITEMS, A_COUNTERS, 0 },
	{ "clearcnt_counters_ok",	FANY, PCNTOPENALL, 0, PCNTCLEARCNT, A_NONE, 0 },
	{ "clearcnt_profiling_only",	FANY, PCNTOPENALL, PFM_PROFILING, PCNTCLEARCNT, A_NONE, EINVAL },
	{ "getcnt_ok",			F4, PCNTOPENALL, 0, PCNTGETCNT, A_ARRAY, 0 },
	{ "getcnt_without_counters",	F4, PCNTOPENALL, PFM_PROFILING, PCNTGETCNT, A_ARRAY, EINVAL },
	{ "getcnt_null_pointer",	F4, PCNTOPENALL, 0, PCNTGETCNT, A_NULLPTR, EFAULT },
	{ "getcnt_null_argument",	F4, PCNTOPENALL, 0, PCNTGETCNT, A_NULL, EFAULT },
	{ "getcnt_all_one_element_ok",	F4, PCNTOPENALL, 0, PCNTGETCNT, A_GUARD_FULL, 0 },
	{ "getcnt_each_full_array_ok",	F4, PCNTOPENEACH, 0, PCNTGETCNT, A_GUARD_FULL, 0 },
	{ "getcnt_each_array_one_short", F4, PCNTOPENEACH, 0, PCNTGETCNT, A_GUARD_SHORT, EFAULT },
	{ "getiplhis_without_ipl",	FANY, PCNTOPENALL, 0, PCNTGETIPLHIS, A_ARRAY, EINVAL },
	{ "setuaddr_without_profiling",	FANY, PCNTOPENALL, 0, PCNTSETUADDR, A_UADDR, EINVAL },
	{ "setkaddr_without_profiling",	FANY, PCNTOPENALL, 0, PCNTSETKADDR, A_KADDR, EINVAL },
	{ "seturange_without_profiling", FANY, PCNTOPENALL, 0, PCNTSETURANGE, A_URANGE, EINVAL },
	{ "setkrange_without_profiling", FANY, PCNTOPENALL, 0, PCNTSETKRANGE, A_KRANGE, EINVAL },
	{ "caller_without_kprofiling",	FANY, PCNTOPENALL, 0, PCNTCALLER, A_NONE, EINVAL },
	{ "caller_profiling_no_krange",	FANY, PCNTOPENALL, PFM_PROFILING, PCNTCALLER, A_NONE, EINVAL },
	{ "unknown_ioctl_P_99",		FANY, PCNTOPENALL, 0, _IO('P', 99), A_NONE, EINVAL },
	{ "other_family_PCNT5MUX",	F4 | F6, PCNTOPENALL, 0, PCNT5MUX, A_LONG0, EINVAL },
	{ "other_family_PCNT5CTXTS",	F4 | F6, PCNTOPENALL, 0, PCNT5CTXTS, A_LONG0, EINVAL },
	{ "other_family_PCNT5GETCNT",	F4 | F6, PCNTOPENALL, 0, PCNT5GETCNT, A_ARRAY, EINVAL },
	{ "other_family_PCNT6MUX",	F4 | F5, PCNTOPENALL, 0, PCNT6MUX, A_LONG0, EINVAL },
	{ "other_family_PCNT6GETCNT",	F4 | F5, PCNTOPENALL, 0, PCNT6GETCNT, A_ARRAY, EINVAL },
	{ "other_family_PCNTSETMUX",	F5 | F6, PCNTOPENALL, 0, PCNTSETMUX, A_ICCSR, EINVAL },
	{ "other_family_PCNTGETCNT",	F5 | F6, PCNTOPENALL, 0, PCNTGETCNT, A_ARRAY, EINVAL },
	{ "getcnt5_ok",			F5, PCNTOPENALL, 0, PCNT5GETCNT, A_ARRAY, 0 },
	{ "getcnt5_without_counters",	F5, PCNTOPENALL, PFM_PROFILING, PCNT5GETCNT, A_ARRAY, EINVAL },
	{ "getcnt5_null_pointer",	F5, PCNTOPENALL, 0, PCNT5GETCNT, A_NULLPTR, EFAULT },
	{ "readcntrs5_ok",		F5, PCNTOPENALL, 0, PCNT5READCNTRS, A_GUARD_FULL, 0 },
	{ "readcntrs5_without_counters", F5, PCNTOPENALL, PFM_PROFILING, PCNT5READCNTRS, A_ARRAY, EINVAL },
	{ "readcntrs5_each_full_ok",	F5, PCNTOPENEACH, 0, PCNT5READCNTRS, A_GUARD_FULL, 0 },
	{ "readcntrs5_each_one_short",	F5, PCNTOPENEACH, 0, PCNT5READCNTRS, A_GUARD_SHORT, EFAULT },
	{ "getcnt5_each_one_short",	F5, PCNTOPENEACH, 0, PCNT5GETCNT, A_GUARD_SHORT, EFAULT },
	{ "getcnt6_ok",			F6, PCNTOPENALL, 0, PCNT6GETCNT, A_ARRAY, 0 },
	{ "getcnt6_without_counters",	F6, PCNTOPENALL, PFM_PROFILING, PCNT6GETCNT, A_ARRAY, EINVAL },
	{ "getcnt6_null_pointer",	F6, PCNTOPENALL, 0, PCNT6GETCNT, A_NULLPTR, EFAULT },
	{ "readcntrs6_ok",		F6, PCNTOPENALL, 0, PCNT6READCNTRS, A_GUARD_FULL, 0 },
	{ "readcntrs6_without_counters", F6, PCNTOPENALL, PFM_PROFILING, PCNT6READCNTRS, A_ARRAY, EINVAL },
	{ "readcntrs6_each_full_ok",	F6, PCNTOPENEACH, 0, PCNT6READCNTRS, A_GUARD_FULL, 0 },
	{ "readcntrs6_each_one_short",	F6, PCNTOPENEACH, 0, PCNT6READCNTRS, A_GUARD_SHORT, EFAULT },
	{ "getcnt6_each_one_short",	F6, PCNTOPENEACH, 0, PCNT6GETCNT, A_GUARD_SHORT, EFAULT },
	{ 0, 0, 0, 0, 0, 0, 0 }
};

/* Bytes of one element of this family's *GETCNT / *READCNTRS array. */
static size_t
element_size(void)
{
	if (family == PFM_FAMILY_EV5)
		return sizeof(struct pfcntrs_ev5);
	if (family == PFM_FAMILY_EV6)
		return sizeof(struct pfcntrs_ev6);
	return sizeof(struct pfcntrs);
}

static void
ioctl_rows(void)
{
	static unsigned long roomy[64 * 16];	/* room for any family's array */
	struct ioctlrow *r;
	struct iccsr iccsr;
	struct addr_range ar;
	addr_range_t art;
	struct pfm_info pi;
	unsigned long text;
	long lval, items;
	void *arg, *p, *big;
	size_t n;
	int fd, bad;

	big = calloc(ncpus, 16 * sizeof(unsigned long));
	text = (unsigned long)&text_anchor & ~15UL;
	for (r = ioctlrows; r->name; r++) {
		begin(r->name);
		if (!(r->families & FAM(family))) {
			skip("not an ioctl check for this family");
			continue;
		}
		if ((fd = must_open(r->mode, "open")) < 0)
			continue;
		if (r->items) {
			items = r->items;
			if (STEP(fd, PCNTSETITEMS, &items))
				continue;
		}
		p = ncpus <= 64 ? (void *)roomy : big;
		arg = &p;
		bad = 0;
		switch (r->arg) {
		case A_NONE:
			arg = 0;
			break;
		case A_LONG0:
			lval = 0;
			arg = &lval;
			break;
		case A_COUNTERS:
			lval = PFM_COUNTERS;
			arg = &lval;
			break;
		case A_ICCSR:
			iccsr = mkiccsr(PF_CYCLES, PF_DCACHE, PF_C0_INT_EVERY_4096, 0, 2);
			arg = &iccsr;
			break;
		case A_ARRAY:
			break;
		case A_NULLPTR:
			p = 0;
			break;
		case A_NULL:
			arg = 0;
			break;
		case A_GUARD_FULL:
		case A_GUARD_SHORT:
			n = 1;
			if (r->mode == PCNTOPENEACH) {
				memset(&pi, 0, sizeof pi);
				if (STEP(fd, PCNTGETINFO, &pi)) {
					bad = 1;
					break;
				}
				n = pi.pi_ncpus;
				if (n == 0) {
					fail("pi_ncpus>0", "0", "PCNTGETINFO");
					bad = 1;
					break;
				}
			}
			if (r->arg == A_GUARD_SHORT)
				n--;
			if ((p = guarded(n * element_size())) == 0)
				bad = 1;
			break;
		case A_UADDR:
		case A_KADDR:
			ar.start = r->arg == A_UADDR ? text : 0xffffffff81000000UL;
			ar.end = ar.start + 4096;
			arg = &ar;
			break;
		case A_URANGE:
		case A_KRANGE:
			art.start = r->arg == A_URANGE ? text : 0xffffffff81000000UL;
			art.end = art.start + 4096;
			art.stride = 4;
			art.res0 = 0;
			arg = &art;
			break;
		}
		if (bad)
			continue;	/* a setup step already failed the row */
		expect(r->want, xioctl(fd, r->req, arg));
	}
	free(big);
}

/*
 * Counting end to end: counts are interrupts (events / period), they stop
 * while disabled, they live in the device across close/reopen, and
 * PCNTCLEARCNT zeroes them.
 */
static void
count_rows(void)
{
	static char *later[] = {
		"count_nonzero", "count_disabled_counter_stays_zero",
		"count_frozen_while_disabled", "count_survives_reopen",
		"clearcnt_zeroes_counts", "clearcnt_sets_pr_cycle",
		"count_each_nonzero", 0
	};
	struct pfcntrs c1, c2, *p, *each;
	struct iccsr mux;
	struct pfm_info pi;
	unsigned long req, sum;
	long items = PFM_COUNTERS;
	char w[64], g[64];
	int fd, i, cleared;

	req = geteuid() == 0 ? PCNTLOGALL : PCNTLOGSELECT;
	begin("count_setup");
	if (family != PFM_FAMILY_EV4 ||
	    (geteuid() != 0 && !perf_capable() && paranoid() > 2)) {
		char *why = family != PFM_FAMILY_EV4 ?
		    "EV4 counting; the device emulates another family" :
		    "perf_event_paranoid > 2 forbids counting your own threads";

		skip(why);
		for (i = 0; later[i]; i++) {
			next(later[i]);
			skip(why);
		}
		return;
	}
	mux = mkiccsr(PF_CYCLES, PF_DCACHE, PF_C0_INT_EVERY_4096, PF_C1_INT_EVERY_4096, 2);
	if ((fd = must_open(PCNTOPENALL, "open")) < 0 ||
	    STEP(fd, PCNTSETITEMS, &items) ||
	    STEP(fd, PCNTSETMUX, &mux) ||
	    step(fd, req, req == PCNTLOGALL ? "PCNTLOGALL" : "PCNTLOGSELECT", 0) ||
	    STEP(fd, PCNTCLEARCNT, 0) ||
	    STEP(fd, PCNTRENABLE, 0))
		goto failed;
	burn(100);
	memset(&c1, 0, sizeof c1);
	p = &c1;
	if (STEP(fd, PCNTRDISABLE, 0) || STEP(fd, PCNTGETCNT, &p))
		goto failed;
	pass();

	next("count_nonzero");
	if (c1.pf_cntr0 > 0)
		pass();
	else
		fail("pf_cntr0>0", "0", "100 ms of PF_CYCLES / 4096");

	next("count_disabled_counter_stays_zero");
	expect_val("pf_cntr1", 0, c1.pf_cntr1);

	next("count_frozen_while_disabled");
	burn(50);
	memset(&c2, 0, sizeof c2);
	p = &c2;
	if (STEP(fd, PCNTGETCNT, &p) == 0)
		expect_val("pf_cntr0", c1.pf_cntr0, c2.pf_cntr0);

	next("count_survives_reopen");
	dclose(fd);
	if ((fd = must_open(PCNTOPENALL, "reopen")) < 0) {
		for (i = 4; later[i] && i < 6; i++) {
			next(later[i]);
			skip("reopen failed");
		}
	} else {
		memset(&c2, 0, sizeof c2);
		p = &c2;
		if (STEP(fd, PCNTGETCNT, &p) == 0)
			expect_val("pf_cntr0", c1.pf_cntr0, c2.pf_cntr0);

		next("clearcnt_zeroes_counts");
		cleared = 0;
		if (STEP(fd, PCNTCLEARCNT, 0) == 0) {
			memset(&c2, 0xff, sizeof c2);
			p = &c2;
			if (STEP(fd, PCNTGETCNT, &p) == 0) {
				cleared = 1;
				expect_val("pf_cntr0+pf_cntr1", 0, c2.pf_cntr0 + c2.pf_cntr1);
			}
		}

		next("clearcnt_sets_pr_cycle");
		if (!cleared)
			skip("PCNTCLEARCNT or PCNTGETCNT failed");
		else if (c2.pr_cycle > c1.pr_cycle)
			pass();
		else {
			snprintf(w, sizeof w, "pr_cycle>%lu", c1.pr_cycle);
			snprintf(g, sizeof g, "%lu", c2.pr_cycle);
			fail(w, g, 0);
		}
	}

	begin("count_each_nonzero");
	if ((fd = must_open(PCNTOPENEACH, "open EACH")) < 0)
		return;
	memset(&pi, 0, sizeof pi);
	if (STEP(fd, PCNTGETINFO, &pi) ||
	    STEP(fd, PCNTSETITEMS, &items) ||
	    STEP(fd, PCNTSETMUX, &mux) ||
	    step(fd, req, req == PCNTLOGALL ? "PCNTLOGALL" : "PCNTLOGSELECT", 0) ||
	    STEP(fd, PCNTCLEARCNT, 0) ||
	    STEP(fd, PCNTRENABLE, 0))
		return;
	burn(100);
	if ((each = calloc(pi.pi_ncpus ? pi.pi_ncpus : 1, sizeof *each)) == 0) {
		fail("0", "ENOMEM", "calloc");
		return;
	}
	p = each;
	if (STEP(fd, PCNTRDISABLE, 0) == 0 && STEP(fd, PCNTGETCNT, &p) == 0) {
		for (sum = 0, i = 0; i < (int)pi.pi_ncpus; i++)
			sum += each[i].pf_cntr0;
		if (sum > 0)
			pass();
		else
			fail("sum of pf_cntr0>0", "0", 0);
	}
	free(each);
	return;

failed:
	for (i = 0; later[i]; i++) {
		next(later[i]);
		skip("count_setup failed");
	}
}

/* ------------------------------------------------------------------ */

/*
 * Sampling (contract 6): PCNTGETRSIZE, strides, ENOMEM, read(2) from byte
 * 0, IPL histograms and their EFAULT rows, PCNTCALLER and its ranges.
 */

static int sampling = -1;	/* 1: the device does PC profiling; 0: skip */
static int kernel_ok;		/* this caller may profile the kernel (8) */
static unsigned long kstext, ketext;	/* kernel text, 0 if unreadable */

/* [_stext, _etext) from /proc/kallsyms; zeros without privilege. */
static void
read_kernel_text(void)
{
	FILE *f;
	char line[512], name[256], type;
	unsigned long a;

	if ((f = fopen("/proc/kallsyms", "r")) == 0)
		return;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%lx %c %255s", &a, &type, name) == 3) {
			if (strcmp(name, "_stext") == 0)
				kstext = a;
			else if (strcmp(name, "_etext") == 0)
				ketext = a;
		}
	fclose(f);
	if (kstext == 0 || ketext <= kstext)
		kstext = ketext = 0;
}

extern char __executable_start, etext;	/* our text (the linker's names) */
#define WHOLE_TEXT	(~0UL)

/*
 * Open with items, LOGSELECT and a user range of len bytes of our text
 * (WHOLE_TEXT: all of it; 0: no range).
 */
static int
profiled_open(int mode, long items, unsigned long len, unsigned long stride)
{
	addr_range_t r;
	int fd;

	if ((fd = must_open(mode, "open")) < 0)
		return -1;
	if (STEP(fd, PCNTSETITEMS, &items) || STEP(fd, PCNTLOGSELECT, 0))
		return -1;
	if (len) {
		memset(&r, 0, sizeof r);
		r.start = (unsigned long)&text_anchor & ~15UL;
		r.end = r.start + len;
		if (len == WHOLE_TEXT) {
			r.start = (unsigned long)&__executable_start;
			r.end = (unsigned long)&etext;
		}
		r.stride = stride;
		if (STEP(fd, PCNTSETURANGE, &r))
			return -1;
	}
	return fd;
}

static void
expect_rsize(int fd, long want)
{
	long n = -1;

	if (STEP(fd, PCNTGETRSIZE, &n) == 0)
		expect_val("PCNTGETRSIZE", (unsigned long)want, (unsigned long)n);
}

/* Is there PC profiling at all?  Decides whether the rows below run. */
static void
sampling_probe(void)
{
	long n = -1;
	int fd, e;

	begin("sampling_probe");
	sampling = 0;
	if (geteuid() != 0 && !perf_capable() && paranoid() > 2) {
		skip("perf_event_paranoid > 2 forbids sampling your own threads: sampling rows skipped");
		return;
	}
	if ((fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 4096, 4)) < 0)
		return;
	if ((e = xioctl(fd, PCNTGETRSIZE, &n)) != 0) {
		printf("# PCNTGETRSIZE after PCNTSETURANGE: %s\n", errname(e));
		skip("the device has no PC profiling: sampling rows skipped");
		return;
	}
	sampling = 1;
	pass();
}

/* The row is skipped when the probe found no profiling. */
static int
no_sampling(void)
{
	if (sampling)
		return 0;
	skip("no PC profiling on this device");
	return 1;
}

/* PCNTSETURANGE with `stride`, then PCNTSETUADDR over 8 KiB: `want` bytes. */
static void
expect_setuaddr_keeps(unsigned long stride, long want)
{
	struct addr_range ar;
	int fd;

	if (no_sampling() || (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 4096, stride)) < 0)
		return;
	ar.start = (unsigned long)&text_anchor & ~15UL;
	ar.end = ar.start + 8192;
	if (STEP(fd, PCNTSETUADDR, &ar) == 0)
		expect_rsize(fd, want);
}

static void
rsize_rows(void)
{
	struct pfm_info pi;
	struct addr_range ar;
	addr_range_t r;
	long items = PFM_PROFILING;
	int fd;

	begin("getrsize_no_range_is_0");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 0, 0)) >= 0)
		expect_rsize(fd, 0);

	begin("getrsize_counters_only_is_0");
	if (!no_sampling() && (fd = must_open(PCNTOPENALL, "open")) >= 0)
		expect_rsize(fd, 0);

	/* A bucket is stride instructions of 4 bytes: 4096 / 16 buckets of 4 bytes. */
	begin("getrsize_stride_4_is_range_over_4");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 4096, 4)) >= 0)
		expect_rsize(fd, 1024);

	begin("getrsize_stride_1");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 4096, 1)) >= 0)
		expect_rsize(fd, 4096);

	begin("getrsize_stride_0_one_bucket");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 4096, 0)) >= 0)
		expect_rsize(fd, 4);

	begin("getrsize_partial_bucket_rounds_up");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 4100, 4)) >= 0)
		expect_rsize(fd, 1028);

	begin("setuaddr_default_stride_4");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 0, 0)) >= 0) {
		ar.start = (unsigned long)&text_anchor & ~15UL;
		ar.end = ar.start + 4096;
		if (STEP(fd, PCNTSETUADDR, &ar) == 0)
			expect_rsize(fd, 1024);
	}

	/* "To set the address range without changing the stride": 0 included. */
	begin("setuaddr_keeps_stride_0");
	expect_setuaddr_keeps(0, 4);
	begin("setuaddr_keeps_stride_8");
	expect_setuaddr_keeps(8, 1024);

	begin("getrsize_each_times_ncpus");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENEACH, PFM_PROFILING, 4096, 4)) >= 0) {
		memset(&pi, 0, sizeof pi);
		if (STEP(fd, PCNTGETINFO, &pi) == 0)
			expect_rsize(fd, 1024 * (long)pi.pi_ncpus);
	}

	begin("seturange_stride_3");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 0, 0)) >= 0) {
		memset(&r, 0, sizeof r);
		r.start = (unsigned long)&text_anchor & ~15UL;
		r.end = r.start + 4096;
		r.stride = 3;
		expect(EINVAL, xioctl(fd, PCNTSETURANGE, &r));
	}

	begin("seturange_stride_6");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 0, 0)) >= 0) {
		memset(&r, 0, sizeof r);
		r.start = (unsigned long)&text_anchor & ~15UL;
		r.end = r.start + 4096;
		r.stride = 6;
		expect(EINVAL, xioctl(fd, PCNTSETURANGE, &r));
	}

	/* 1 TiB at 16 bytes per bucket is 256 GiB of buckets: no device has that. */
	begin("seturange_1tib_enomem");
	if (!no_sampling() && (fd = must_open(PCNTOPENALL, "open")) >= 0 &&
	    STEP(fd, PCNTSETITEMS, &items) == 0) {
		memset(&r, 0, sizeof r);
		r.start = 0x10000;
		r.end = r.start + (1UL << 40);
		r.stride = 4;
		expect(ENOMEM, xioctl(fd, PCNTSETURANGE, &r));
	}

	begin("caller_with_user_profiling");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_PROFILING, 4096, 4)) >= 0)
		expect(EINVAL, xioctl(fd, PCNTCALLER, 0));
}

/*
 * read(2) gives the bucket snapshot from byte 0 on every call, whatever
 * was read before, up to the length asked.
 */
static void
read_rows(void)
{
	static char *later[] = {
		"read_returns_rsize", "read_profile_nonzero", "read_again_from_byte_0",
		"read_short_is_a_prefix", "read_longer_returns_rsize", 0
	};
	struct iccsr mux;
	unsigned int *a = 0, *b = 0;
	unsigned long sum;
	long n = 0, got, i;
	int fd, j;

	begin("read_setup");
	if (family != PFM_FAMILY_EV4) {
		skip("EV4 PCNTSETMUX; the device emulates another family");
		goto skipped;
	}
	if (sampling == 0) {
		skip("no PC profiling on this device");
		goto skipped;
	}
	mux = mkiccsr(PF_CYCLES, PF_DCACHE, PF_C0_INT_EVERY_4096, 0, 2);
	if ((fd = profiled_open(PCNTOPENALL, PFM_COUNTERS | PFM_PROFILING, WHOLE_TEXT, 4)) < 0 ||
	    STEP(fd, PCNTSETMUX, &mux) || STEP(fd, PCNTCLEARCNT, 0) || STEP(fd, PCNTRENABLE, 0))
		goto skipped;
	burn(150);
	if (STEP(fd, PCNTRDISABLE, 0) || STEP(fd, PCNTGETRSIZE, &n))
		goto skipped;
	if (n <= 0 || (a = calloc(1, (size_t)n + 64)) == 0 || (b = calloc(1, (size_t)n + 64)) == 0) {
		fail("rsize>0", errname(0), 0);
		goto skipped;
	}
	pass();

	next("read_returns_rsize");
	got = (long)read(fd, a, (size_t)n);
	expect_val("read", (unsigned long)n, (unsigned long)got);

	next("read_profile_nonzero");
	for (sum = 0, i = 0; i < n / 4; i++)
		sum += a[i];
	if (sum > 0)
		pass();
	else
		fail("buckets>0 after 150 ms in our own text", "0", 0);

	next("read_again_from_byte_0");
	got = (long)read(fd, b, (size_t)n);
	if (got == n && memcmp(a, b, (size_t)n) == 0)
		pass();
	else
		fail("the same snapshot", got == n ? "other bytes" : "a short read", 0);

	next("read_short_is_a_prefix");
	memset(b, 0xff, (size_t)n);
	got = (long)read(fd, b, 8);
	if (got == 8 && memcmp(a, b, 8) == 0)
		pass();
	else
		fail("the first 8 bytes", got == 8 ? "other bytes" : "a short read", 0);

	next("read_longer_returns_rsize");
	got = (long)read(fd, b, (size_t)n + 64);
	expect_val("read", (unsigned long)n, (unsigned long)got);
	free(a);
	free(b);
	return;

skipped:
	free(a);
	free(b);
	for (j = 0; later[j]; j++) {
		next(later[j]);
		skip("read_setup did not run");
	}
}

/* PCNTGETIPLHIS: one pfipls in ALL, one per CPU in EACH; EFAULT short. */
static void
ipl_rows(void)
{
	struct pfm_info pi;
	struct pfipls *h, *p, one;
	struct iccsr mux;
	unsigned long sum;
	int fd, i, k;

	begin("getiplhis_all_one_element_ok");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_IPL, 0, 0)) >= 0 &&
	    (p = guarded(sizeof(struct pfipls))) != 0)
		expect(0, xioctl(fd, PCNTGETIPLHIS, &p));

	begin("getiplhis_null_pointer");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_IPL, 0, 0)) >= 0) {
		p = 0;
		expect(EFAULT, xioctl(fd, PCNTGETIPLHIS, &p));
	}

	begin("getiplhis_null_argument");
	if (!no_sampling() && (fd = profiled_open(PCNTOPENALL, PFM_IPL, 0, 0)) >= 0)
		expect(EFAULT, xioctl(fd, PCNTGETIPLHIS, 0));

	for (k = 0; k < 2; k++) {
		begin(k == 0 ? "getiplhis_each_full_array_ok" : "getiplhis_each_array_one_short");
		if (no_sampling() || (fd = profiled_open(PCNTOPENEACH, PFM_IPL, 0, 0)) < 0)
			continue;
		memset(&pi, 0, sizeof pi);
		if (STEP(fd, PCNTGETINFO, &pi))
			continue;
		if ((p = guarded((pi.pi_ncpus - (unsigned long)k) * sizeof(struct pfipls))) == 0)
			continue;
		expect(k == 0 ? 0 : EFAULT, xioctl(fd, PCNTGETIPLHIS, &p));
	}

	begin("ipl_ticks_then_clearcnt_zeroes");
	if (no_sampling())
		return;
	if (family != PFM_FAMILY_EV4) {
		skip("EV4 PCNTSETMUX; the device emulates another family");
		return;
	}
	mux = mkiccsr(PF_CYCLES, PF_DCACHE, PF_C0_INT_EVERY_4096, 0, 2);
	if ((fd = profiled_open(PCNTOPENALL, PFM_IPL, 0, 0)) < 0 ||
	    STEP(fd, PCNTSETMUX, &mux) || STEP(fd, PCNTCLEARCNT, 0) || STEP(fd, PCNTRENABLE, 0))
		return;
	burn(100);
	h = &one;
	memset(&one, 0, sizeof one);
	if (STEP(fd, PCNTRDISABLE, 0) || STEP(fd, PCNTGETIPLHIS, &h))
		return;
	for (sum = 0, i = 0; i < 9; i++)
		sum += one.ipl[i];
	if (sum == 0) {
		fail("IPL ticks>0 after 100 ms", "0", 0);
		return;
	}
	if (STEP(fd, PCNTCLEARCNT, 0) || STEP(fd, PCNTGETIPLHIS, &h))
		return;
	for (sum = 0, i = 0; i < 9; i++)
		sum += one.ipl[i];
	expect_val("sum of ipl[] after PCNTCLEARCNT", 0, sum);
}

/* Kernel profiling: stride, PCNTCALLER ranges (root or CAP_PERFMON). */
static void
kernel_rows(void)
{
	static char *rows[] = {
		"setkrange_stride_3", "caller_after_krange_ok", "caller_ranges_4_ok",
		"caller_range_5th_enospc", "caller_range_outside_text_efault",
		"caller_range_unaligned_efault", "caller_range_empty_efault", 0
	};
	struct addr_range ar;
	addr_range_t r;
	char *why = 0;
	long items = PFM_PROFILING;
	int fd = -1, i, e;

	if (no_sampling())
		why = "no PC profiling on this device";
	else if (!kernel_ok)
		why = "this caller may not profile the kernel (see the EACCES row)";
	else if (kstext == 0)
		why = "/proc/kallsyms shows no _stext/_etext to this caller";
	if (why) {
		for (i = 0; rows[i]; i++) {
			begin(rows[i]);
			skip(why);
		}
		return;
	}

	begin("setkrange_stride_3");
	if ((fd = must_open(PCNTOPENALL, "open")) >= 0 && STEP(fd, PCNTSETITEMS, &items) == 0) {
		memset(&r, 0, sizeof r);
		r.start = kstext;
		r.end = kstext + 4096;
		r.stride = 3;
		expect(EINVAL, xioctl(fd, PCNTSETKRANGE, &r));
	}

	begin("caller_after_krange_ok");
	if ((fd = must_open(PCNTOPENALL, "open")) < 0 || STEP(fd, PCNTSETITEMS, &items))
		return;
	memset(&r, 0, sizeof r);
	r.start = kstext;
	r.end = ketext;
	r.stride = 64;
	if (STEP(fd, PCNTSETKRANGE, &r))
		return;
	expect(0, xioctl(fd, PCNTCALLER, 0));

	next("caller_ranges_4_ok");
	for (e = 0, i = 0; i < 4 && e == 0; i++) {
		ar.start = kstext + (unsigned long)i * 4096;
		ar.end = ar.start + 256;
		e = xioctl(fd, PCNTSETKADDR, &ar);
	}
	expect(0, e);

	next("caller_range_5th_enospc");
	ar.start = kstext + 8 * 4096;
	ar.end = ar.start + 256;
	expect(ENOSPC, xioctl(fd, PCNTSETKADDR, &ar));

	/* The EFAULT rows on a fresh open: ENOSPC would otherwise come first. */
	begin("caller_range_outside_text_efault");
	if ((fd = must_open(PCNTOPENALL, "open")) < 0 || STEP(fd, PCNTSETITEMS, &items))
		return;
	memset(&r, 0, sizeof r);
	r.start = kstext;
	r.end = ketext;
	r.stride = 64;
	if (STEP(fd, PCNTSETKRANGE, &r) || STEP(fd, PCNTCALLER, 0))
		return;
	ar.start = ketext;
	ar.end = ketext + 256;
	expect(EFAULT, xioctl(fd, PCNTSETKADDR, &ar));

	next("caller_range_unaligned_efault");
	ar.start = kstext + 2;
	ar.end = kstext + 258;
	expect(EFAULT, xioctl(fd, PCNTSETKADDR, &ar));

	next("caller_range_empty_efault");
	ar.start = kstext + 4096;
	ar.end = ar.start;
	expect(EFAULT, xioctl(fd, PCNTSETKADDR, &ar));
}

static void
sampling_rows(void)
{
	int par = paranoid();

	kernel_ok = geteuid() == 0 || par <= 0 || perf_capable() || allowed;
	read_kernel_text();
	sampling_probe();
	rsize_rows();
	read_rows();
	ipl_rows();
	kernel_rows();
}

/*
 * Section 8: system-wide counting needs privilege (an ordinary user only).
 * A user in pfmd's --allow-group is allowed it too: run these rows as
 * someone who is not.
 */
static void
access_rows(void)
{
	int fd, par = paranoid();
	char *why = 0;
	long items = PFM_PROFILING;
	addr_range_t r;

	if (geteuid() == 0)
		why = "running as root: root may count system-wide";
	else if (par <= 0)
		why = "perf_event_paranoid <= 0 allows system-wide counting";
	else if (perf_capable())
		why = "CAP_PERFMON or CAP_SYS_ADMIN allows system-wide counting";
	else if (allowed)
		why = "-allowed: pfmd's --allow-group group allows system-wide counting";

	begin("eacces_logall");
	if (why)
		skip(why);
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0)
		expect(EACCES, xioctl(fd, PCNTLOGALL, 0));

	begin("eacces_renable_under_logall");
	if (why)
		skip(why);
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0)
		expect(EACCES, xioctl(fd, PCNTRENABLE, 0));

	begin("eacces_kernel_profiling");
	if (why)
		skip(why);
	else if (sampling == 0)
		skip("no PC profiling on this device");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0 &&
	    STEP(fd, PCNTSETITEMS, &items) == 0) {
		memset(&r, 0, sizeof r);
		r.start = 0xffffffff81000000UL;
		r.end = r.start + 4096;
		r.stride = 4;
		expect(EACCES, xioctl(fd, PCNTSETKRANGE, &r));
	}

	/* -allowed is checked, not believed: the group's powers must work. */
	begin("allowed_logall");
	if (!allowed)
		skip("not run with -allowed");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		int got = xioctl(fd, PCNTLOGALL, 0);

		expect(0, got);
		if (got == EACCES)
			printf("# -allowed, but the daemon refused system-wide counting: "
			    "is pfmd started with --allow-group naming a group this "
			    "process is in (id -G)?\n");
	}

	begin("allowed_renable_under_logall");
	if (!allowed)
		skip("not run with -allowed");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0)
		expect(0, xioctl(fd, PCNTRENABLE, 0));

	begin("logselect_renable_ok");
	if (geteuid() == 0)
		skip("running as root: count_setup covers it");
	else if (par > 2)
		skip("perf_event_paranoid > 2 forbids counting");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0 &&
	    STEP(fd, PCNTLOGSELECT, 0) == 0)
		expect(0, xioctl(fd, PCNTRENABLE, 0));
}

/*
 * The EV5 and EV6/EV67 rows that need more than one ioctl: periods that need
 * privilege, undefined mux codes, EV67's pairs, profile-me statistics, and
 * events no host counts.
 */
static void
family_rows(void)
{
	long v;
	int fd, ev67 = have_info && info.pi_impl == PFM_IMPL_EV67;

	begin("pcnt5freq_256_needs_privilege");
	if (family != PFM_FAMILY_EV5)
		skip("not an EV5");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		v = PF5_C0_INT_EVERY_256;
		expect(geteuid() == 0 || perf_capable() || allowed ? 0 : EPERM,
		    xioctl(fd, PCNT5FREQ, &v));
	}

	begin("pcnt5mux_undefined_code");
	if (family != PFM_FAMILY_EV5)
		skip("not an EV5");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		v = 0x1;	/* counter 2 code 1 is no event */
		expect(EINVAL, xioctl(fd, PCNT5MUX, &v));
	}

	begin("pcnt5mux_unavailable_event");
	if (family != PFM_FAMILY_EV5)
		skip("not an EV5");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		v = PF5_MUX1_SPLIT_ISSUE_CYCLES;	/* no host event counts it */
		expect(EOPNOTSUPP, xioctl(fd, PCNT5MUX, &v));
	}

	begin("pcnt6mux_unavailable_event");
	if (family != PFM_FAMILY_EV6 || ev67)
		skip("not an EV6");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		v = PF6_MUX1_RET_DTB_DOUBLE_MISSES;	/* no host event counts it */
		expect(EOPNOTSUPP, xioctl(fd, PCNT6MUX, &v));
	}

	begin("pcnt6mux_ev67_only_pairs");
	if (!ev67)
		skip("not an EV67");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		v = PF6_MUX1_RET_COND_BRANCHES;	/* an EV6 code, no EV67 pair */
		expect(EINVAL, xioctl(fd, PCNT6MUX, &v));
	}

	begin("setitems_profile_me_needs_ev67");
	if (ev67)
		skip("the device is an EV67");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		v = PFM_COUNTERS | ((long)PF67_PM_RETIRE << PFM_PROFME_MODE_SHIFT);
		expect(EINVAL, xioctl(fd, PCNTSETITEMS, &v));
	}

	begin("setitems_profile_me_retire_ok");
	if (!ev67)
		skip("not an EV67");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		v = PFM_COUNTERS | ((long)PF67_PM_RETIRE << PFM_PROFME_MODE_SHIFT);
		expect(0, xioctl(fd, PCNTSETITEMS, &v));
	}

	begin("setitems_profile_me_unsupported");
	if (!ev67)
		skip("not an EV67");
	else if ((fd = must_open(PCNTOPENALL, "open")) >= 0) {
		/* No host sampling hardware reports arithmetic traps. */
		v = PFM_COUNTERS | ((long)PF67_PM_ARITH_TRAP << PFM_PROFME_MODE_SHIFT);
		expect(EOPNOTSUPP, xioctl(fd, PCNTSETITEMS, &v));
	}
}

int
main(int argc, char **argv)
{
	struct sigaction sa;
	int i;

	if (argc == 2 && strcmp(argv[1], "-allowed") == 0)
		allowed = 1;
	else if (argc > 1) {
		fprintf(stderr, "usage: errno_contract [-allowed]\n"
		    "  -allowed  the caller is in the group of pfmd --allow-group "
		    "(privileged, as root is)\n");
		return 2;
	}

	if ((device = getenv("PFM_DEVICE")) == 0 || *device == '\0')
		device = "/dev/pfcntr";
	setvbuf(stdout, 0, _IOLBF, 0);

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, 0);

	/* Widen the affinity to every CPU, so "unbound" means unbound. */
	CPU_ZERO(&wide);
	sched_getaffinity(0, sizeof wide, &wide);
	if (CPU_COUNT(&wide) < 2) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		cpu_set_t all;

		CPU_ZERO(&all);
		for (i = 0; i < n && i < CPU_SETSIZE; i++)
			CPU_SET(i, &all);
		if (sched_setaffinity(0, sizeof all, &all) == 0)
			sched_getaffinity(0, sizeof wide, &wide);
	}
	nwide = CPU_COUNT(&wide);
	for (first_cpu = 0; first_cpu < CPU_SETSIZE; first_cpu++)
		if (CPU_ISSET(first_cpu, &wide))
			break;
	for (second_cpu = first_cpu + 1; second_cpu < CPU_SETSIZE; second_cpu++)
		if (CPU_ISSET(second_cpu, &wide))
			break;
	printf("# device %s, %d CPUs usable, uid %d%s\n", device, nwide, (int)geteuid(),
	    allowed ? " (-allowed)" : "");

	if (info_rows() == 0) {
		busy_rows();
		mux_rows();
		ioctl_rows();
		count_rows();
		sampling_rows();
		family_rows();
		access_rows();
	}
	cleanup();
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
