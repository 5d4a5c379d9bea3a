/*
 * holder DEVICE [profile] -- a client that holds the device open, in use,
 * while its daemon is killed or restarted (tests/restart.rs, tests/cuse_vm.rs).
 * Needs task_clock_ns() (tests/common TASK_CLOCK_C) before it.
 *
 * Opens DEVICE in ALL mode and counts its own thread's cycles (PCNTLOGSELECT,
 * PF_CYCLES, an interrupt every 4096); with "profile" it also samples a PC
 * profile of 1 MiB of its own text. Then rounds until a call fails: burn
 * ~2 ms of its CPU, PCNTGETCNT (and with "profile" a read(2) of the
 * buckets); rounds 1 to 3 and every 100th print "round N cntr0=C buckets=B".
 *
 * When a call fails: "failed CALL errno=NAME". Then the same call again,
 * every 10 ms, until it fails with ENOTCONN (the connection plainly gone;
 * calls made while the kernel tears it down may end otherwise first): each
 * other errno as "again CALL errno=NAME" when it changes, then "settled
 * CALL errno=ENOTCONN calls=N" (or "again ok" if a call succeeds, or
 * "unsettled" after 30 s worth of tries). The descriptor stays open,
 * holding what it holds (a detached FUSE mount, a removed CUSE device), and
 * the holder waits for SIGUSR1 (blocked from the start, so an early one is
 * kept). Then it closes the descriptor, opens DEVICE again, sets the same up,
 * and counts ~100 ms of its own CPU between PCNTRENABLE and PCNTRDISABLE:
 * "reopened cntr0=C task_ns=T buckets=B", where T is its task-clock across
 * the enabled window (the reference the counts are checked against), and
 * exits 0. A failure after the reopen: "reopen CALL errno=NAME", exit 1.
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *
errno_name(int e)
{
	switch (e) {
	case ENOTCONN: return "ENOTCONN";
	case ECONNABORTED: return "ECONNABORTED";
	case ECANCELED: return "ECANCELED";
	case ENODEV: return "ENODEV";
	case ENXIO: return "ENXIO";
	case ENOENT: return "ENOENT";
	case EIO: return "EIO";
	case EBUSY: return "EBUSY";
	case EINTR: return "EINTR";
	case EAGAIN: return "EAGAIN";
	case EFAULT: return "EFAULT";
	case EINVAL: return "EINVAL";
	case EBADF: return "EBADF";
	default: {
		static char other[32];
		snprintf(other, sizeof other, "errno%d", e);
		return other;
	}
	}
}

static int profile;
static long rsize;
static unsigned int *buckets;
static volatile unsigned long sink;

/* Burns `ms` ms of this thread's CPU. */
static void
burn(long long ms)
{
	long long end = task_clock_ns() + ms * 1000000LL;
	unsigned long x = sink + 1;

	do {
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
	} while (task_clock_ns() < end);
	sink = x;
}

/* Items, mux, LOGSELECT and (profiling) the range over our own text; the
 * name of the call that failed, or NULL. */
static const char *
setup(int fd)
{
	long items = PFM_COUNTERS | (profile ? PFM_PROFILING : 0);
	struct iccsr mux;
	struct addr_range r;

	memset(&mux, 0, sizeof mux);
	mux.iccsr_mux0 = PF_CYCLES;
	mux.iccsr_pc0 = PF_C0_INT_EVERY_4096;
	mux.iccsr_disable = 2;
	if (ioctl(fd, PCNTSETITEMS, &items) < 0)
		return "PCNTSETITEMS";
	if (ioctl(fd, PCNTSETMUX, &mux) < 0)
		return "PCNTSETMUX";
	if (ioctl(fd, PCNTLOGSELECT, 0) < 0)
		return "PCNTLOGSELECT";
	if (profile) {
		r.start = ((unsigned long)&burn) & ~0xfffffUL;
		r.end = r.start + (1UL << 20);
		if (ioctl(fd, PCNTSETUADDR, &r) < 0)
			return "PCNTSETUADDR";
		if (ioctl(fd, PCNTGETRSIZE, &rsize) < 0)
			return "PCNTGETRSIZE";
		free(buckets);
		if ((buckets = calloc(1, rsize)) == NULL) {
			perror("calloc");
			exit(2);
		}
	}
	return NULL;
}

/* PCNTGETCNT into *c and (profiling) a read of the buckets into *sum; the
 * name of the call that failed, or NULL. */
static const char *
sample(int fd, struct pfcntrs *c, unsigned long *sum)
{
	struct pfcntrs *array = c;

	*sum = 0;
	if (ioctl(fd, PCNTGETCNT, &array) < 0)
		return "PCNTGETCNT";
	if (profile) {
		ssize_t n = read(fd, buckets, rsize);
		if (n < 0)
			return "read";
		for (long i = 0; i < n / 4; i++)
			*sum += buckets[i];
	}
	return NULL;
}

static int
open_device(const char *dev)
{
	return open(dev, O_RDONLY | PCNTOPENALL);
}

int
main(int argc, char **argv)
{
	const char *dev, *failed;
	struct pfcntrs c;
	unsigned long sum;
	sigset_t usr1;
	int fd, sig, round;

	if (argc < 2) {
		fprintf(stderr, "usage: holder DEVICE [profile]\n");
		return 2;
	}
	dev = argv[1];
	profile = argc > 2 && strcmp(argv[2], "profile") == 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, NULL);
	task_clock_ns();

	if ((fd = open_device(dev)) < 0) {
		printf("open %s errno=%s\n", dev, errno_name(errno));
		return 1;
	}
	if ((failed = setup(fd)) != NULL || ioctl(fd, PCNTRENABLE, 0) < 0) {
		printf("setup %s errno=%s\n", failed ? failed : "PCNTRENABLE", errno_name(errno));
		return 1;
	}
	for (round = 1;; round++) {
		burn(2);
		if ((failed = sample(fd, &c, &sum)) != NULL)
			break;
		if (round <= 3 || round % 100 == 0)
			printf("round %d cntr0=%lu buckets=%lu\n", round, c.pf_cntr0, sum);
	}
	printf("failed %s errno=%s\n", failed, errno_name(errno));
	for (int n = 1, last = errno;; n++) {
		if (n > 3000) {
			printf("unsettled\n");
			break;
		}
		usleep(10000);
		if ((failed = sample(fd, &c, &sum)) == NULL) {
			printf("again ok\n");
			break;
		}
		if (errno == ENOTCONN) {
			printf("settled %s errno=ENOTCONN calls=%d\n", failed, n);
			break;
		}
		if (errno != last)
			printf("again %s errno=%s\n", failed, errno_name(errno));
		last = errno;
	}

	/* Held until the test has a new daemon serving. */
	if (sigwait(&usr1, &sig) != 0)
		return 2;
	close(fd);
	if ((fd = open_device(dev)) < 0) {
		printf("reopen open errno=%s\n", errno_name(errno));
		return 1;
	}
	if ((failed = setup(fd)) != NULL) {
		printf("reopen %s errno=%s\n", failed, errno_name(errno));
		return 1;
	}
	long long t0 = task_clock_ns();
	if (ioctl(fd, PCNTRENABLE, 0) < 0) {
		printf("reopen PCNTRENABLE errno=%s\n", errno_name(errno));
		return 1;
	}
	burn(100);
	if (ioctl(fd, PCNTRDISABLE, 0) < 0) {
		printf("reopen PCNTRDISABLE errno=%s\n", errno_name(errno));
		return 1;
	}
	long long t1 = task_clock_ns();
	if ((failed = sample(fd, &c, &sum)) != NULL) {
		printf("reopen %s errno=%s\n", failed, errno_name(errno));
		return 1;
	}
	printf("reopened cntr0=%lu task_ns=%lld buckets=%lu\n", c.pf_cntr0, t1 - t0, sum);
	close(fd);
	return 0;
}
