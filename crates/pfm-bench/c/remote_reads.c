/*
 * remote_reads: what the kernel itself charges for reading one CPU-wide
 * counter on every CPU, without pfmd: the floor under PCNTGETCNT in ALL and
 * EACH mode (issue 17). Run as root, bound to CPU 0:
 *
 *   gcc -O2 -pthread -o remote_reads crates/pfm-bench/c/remote_reads.c
 *   ./remote_reads [SWEEPS]
 *
 * Rows (p50 / p90 ns of one sweep over every online CPU, SWEEPS sweeps):
 *   serial   the caller read()s each CPU's counter in turn (one IPI each,
 *            what pfmd --parallel-reads 0 does)
 *   woken    a thread bound to each other CPU sleeps on a futex; the caller
 *            wakes them all with one FUTEX_WAKE, each reads its own CPU's
 *            counter locally, the last one wakes the caller (what pfmd's
 *            reader threads do)
 *   spinning the same threads spin between sweeps instead of sleeping: the
 *            lower bound of any design, bought with every CPU busy (which
 *            a PCNTOPENALL caller would count)
 *   syscall  getppid(), for scale
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_CPUS 1024

static int fds[MAX_CPUS], cpus[MAX_CPUS], ncpus;
static _Atomic uint32_t generation, pending, done_word;
static _Atomic int spin_mode, quit;

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static long
futex(_Atomic uint32_t *word, int op, uint32_t val)
{
	return syscall(SYS_futex, (uint32_t *)word, op, val, NULL, NULL, 0);
}

static void
bind(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		perror("sched_setaffinity");
		exit(1);
	}
}

static void
read_counter(int i)
{
	uint64_t v;
	if (read(fds[i], &v, sizeof(v)) != sizeof(v)) {
		perror("read");
		exit(1);
	}
}

static void *
reader(void *arg)
{
	int i = (int)(intptr_t)arg;
	uint32_t seen = 0;
	bind(cpus[i]);
	for (;;) {
		uint32_t g = atomic_load(&generation);
		if (g == seen) {
			if (atomic_load(&quit))
				return NULL;
			if (!atomic_load(&spin_mode))
				futex(&generation, FUTEX_WAIT_PRIVATE, g);
			continue;
		}
		seen = g;
		read_counter(i);
		if (atomic_fetch_sub(&pending, 1) == 1) {
			atomic_store(&done_word, 1);
			futex(&done_word, FUTEX_WAKE_PRIVATE, 1);
		}
	}
}

static void
sweep_threads(void)
{
	atomic_store(&done_word, 0);
	atomic_store(&pending, ncpus - 1);
	atomic_fetch_add(&generation, 1);
	if (!atomic_load(&spin_mode))
		futex(&generation, FUTEX_WAKE_PRIVATE, INT32_MAX);
	read_counter(0);
	while (!atomic_load(&done_word)) {
		if (!atomic_load(&spin_mode))
			futex(&done_word, FUTEX_WAIT_PRIVATE, 0);
	}
}

static void
sweep_serial(void)
{
	for (int i = 0; i < ncpus; i++)
		read_counter(i);
}

static void
sweep_syscall(void)
{
	getppid();
}

static int
cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void
row(const char *name, void (*sweep)(void), int n)
{
	uint64_t *t = calloc(n, sizeof(*t));
	for (int i = 0; i < n / 10; i++)
		sweep();
	for (int i = 0; i < n; i++) {
		uint64_t s = now_ns();
		sweep();
		t[i] = now_ns() - s;
	}
	qsort(t, n, sizeof(*t), cmp);
	printf("remote_reads cpus=%d row=%s sweeps=%d p50_ns=%llu p90_ns=%llu\n",
	       ncpus, name, n, (unsigned long long)t[n / 2],
	       (unsigned long long)t[n * 9 / 10]);
	free(t);
}

int
main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	pthread_t th[MAX_CPUS];

	bind(0);
	for (int c = 0; c < MAX_CPUS; c++) {
		char path[64];
		int on = 1;
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d", c);
		if (access(path, F_OK))
			break;
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/online", c);
		FILE *f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%d", &on) != 1)
				on = 1;
			fclose(f);
		}
		if (!on)
			continue;
		struct perf_event_attr attr = {
			.type = PERF_TYPE_SOFTWARE,
			.size = sizeof(attr),
			.config = PERF_COUNT_SW_CPU_CLOCK,
		};
		int fd = syscall(SYS_perf_event_open, &attr, -1, c, -1, 0);
		if (fd < 0) {
			fprintf(stderr, "perf_event_open cpu %d: %s\n", c, strerror(errno));
			return 1;
		}
		cpus[ncpus] = c;
		fds[ncpus++] = fd;
	}
	row("syscall", sweep_syscall, n);
	row("serial", sweep_serial, n);
	for (int i = 1; i < ncpus; i++)
		pthread_create(&th[i], NULL, reader, (void *)(intptr_t)i);
	row("woken", sweep_threads, n);
	/* The sleeping readers wake once to see the mode and spin from now. */
	atomic_store(&spin_mode, 1);
	futex(&generation, FUTEX_WAKE_PRIVATE, INT32_MAX);
	row("spinning", sweep_threads, n);
	atomic_store(&quit, 1);
	atomic_fetch_add(&generation, 1);
	futex(&generation, FUTEX_WAKE_PRIVATE, INT32_MAX);
	for (int i = 1; i < ncpus; i++)
		pthread_join(th[i], NULL);
	return 0;
}
