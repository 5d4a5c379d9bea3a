/*
 * pfm_fuzz -- an out-of-process fuzzer of the pfm device (/dev/pfcntr as
 * served by pfmd), in plain C against <sys/pfcntr.h>.
 *
 *	pfm_fuzz DEVICE SECONDS SEED [WORKERS [THREADS]]
 *
 * Run as root.  It forks WORKERS processes (default 4; every other one drops
 * to uid/gid 65534) of THREADS threads each (default 3).  Each thread draws
 * random operations on the device for SECONDS:
 *
 *   - open(2) with random access modes, mode bits and flags, after binding
 *     itself to one CPU or none; close, close-then-reopen, dup;
 *   - ioctl(2) with the known numbers and their arguments (valid words,
 *     boundary values, garbage), known numbers with other directions and
 *     sizes, other 'P' numbers, and random numbers of other types;
 *     argument pointers that are valid, NULL, unmapped, read-only,
 *     misaligned, straddling a guard page, kernel addresses, random; for the
 *     pointer-typed ioctls the same for the array pointer;
 *   - read, pread, write with the same pointers and random sizes; mmap
 *     shared and private;
 *   - fork: the child works on the inherited descriptors (and sets its PME
 *     bit), and is killed with SIGKILL a few milliseconds later, mid-call;
 *   - short-lived threads that call PCNTLOGSELECT and exit.
 *
 * Every call has a deadline (PFM_FUZZ_DEADLINE seconds, default 20): a
 * watchdog in the first process reports a call still running past it as a
 * hang, kills everything and fails.  alarm(2) backs it up in each worker.
 *
 * Every errno is checked against what the call may return:
 *
 *   ioctl   the device's table (docs/device.md §9): EBUSY EINVAL EFAULT
 *           ENOMEM ENOSPC EOPNOTSUPP EPERM EACCES; ENOTTY only for numbers
 *           of other types than 'P' (the kernel's answer for types it knows).
 *   open    EBUSY (CPUs held), EINVAL (ONE not bound to one CPU); EACCES
 *           (the kernel: write access or O_TRUNC on the 0444 node by
 *           nobody), EPERM (the kernel: O_NOATIME by nobody, who does not
 *           own the node); ENOTDIR for O_DIRECTORY and EEXIST for
 *           O_CREAT|O_EXCL, each only for those flags; an O_PATH open
 *           succeeds and its ioctls are EBADF (the kernel's: such a
 *           descriptor never reaches pfmd).
 *   read    EFAULT (bad buffer); EBADF on a descriptor not open for
 *           reading; pread ESPIPE (the file is not seekable).
 *   write   EINVAL (the device has no write method), EFAULT; EBADF on a
 *           descriptor not open for writing.
 *   mmap    shared: ENODEV (FUSE direct I/O files), EACCES (descriptor
 *           mode); private: success, EACCES; EPERM for PROT_EXEC (the
 *           mount is noexec).  A shared mapping that succeeds is a failure.
 *
 * Where DEVICE is a character device (CUSE) the kernel answers two of these
 * differently, and the checks follow: pread is a read at an offset (CUSE
 * opens take no FOPEN_NONSEEKABLE), and a mapping of either kind is ENODEV
 * or EACCES (a character device without an mmap method).
 *
 * EIO (a request that hit a bug in pfmd: a panic) and ENOTCONN (the daemon
 * is gone) are failures wherever they appear, and so is anything else.
 * Kernel numbers the VFS answers itself (FIOCLEX, FIONBIO, FIFREEZE,
 * FICLONE, FS_IOC_*, ...) are never sent: they do not reach pfmd, and some
 * would act on the mount.
 *
 * PFM_FUZZ_SKIP (a list of operation names: read, write, mmap, dup,
 * fork, thread, kernel-open) leaves those out, to tell which one a finding
 * needs.  "exec" forks, then execve /bin/true in the child, whose
 * close-on-exec copies of the descriptors are closed during the exec (a
 * FLUSH from inside execve once deadlocked pfmd); PFM_FUZZ_EXEC=0 leaves
 * it out.
 *
 * Output: one "UNEXPECTED ..." or "HANG ..." line per finding (at most 50),
 * errno histograms per operation, and last
 *
 *	SUMMARY inputs=N ok_ioctls=N unexpected=N eio=N enotconn=N hangs=N
 *
 * Exit status 0 iff unexpected, eio, enotconn and hangs are all 0.
 */
#define _GNU_SOURCE
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS	8
#define MAX_THREADS	6
#define NSLOTS		(MAX_WORKERS * MAX_THREADS)
#define NERR		140
#define MAX_REPORTS	50
#define TABLE		6		/* descriptors a worker keeps at most */
#define PAGE		4096UL
#define RW_PAGES	16		/* arena: RW pages, a guard, a read-only page */

enum op {
	OP_OPEN, OP_CLOSE, OP_IOCTL, OP_READ, OP_PREAD, OP_WRITE, OP_MMAP,
	OP_DUP, OP_FORK, OP_THREAD, OP_KERNEL_OPEN, OP_EXEC, OP_COUNT
};
static const char *op_names[OP_COUNT] = {
	"open", "close", "ioctl", "read", "pread", "write", "mmap",
	"dup", "fork", "thread", "kernel-open", "exec"
};

/* A call in flight, watched by the watchdog. */
struct slot {
	volatile long start_ns;		/* 0: idle */
	volatile int op;
	volatile int tid;
	volatile unsigned long cmd;
};

/* Shared by every process (MAP_SHARED before the forks). */
struct shared {
	volatile int stop;
	unsigned long inputs, ok_ioctls, unexpected, eio, enotconn, hangs;
	unsigned long forks, kills, threads, reports;
	unsigned long errs[OP_COUNT][NERR];
	struct slot slots[NSLOTS];
};

static struct shared *sh;
static char *device;
static int seconds, deadline_s = 20;
static int ncpus = 1;
static int am_root;
static unsigned long ktext_start, ktext_end;
static unsigned skip;			/* PFM_FUZZ_SKIP: operations not drawn */
static int chardev;			/* DEVICE is a character device (CUSE) */
static int with_exec;			/* unless PFM_FUZZ_EXEC=0 */

#define SKIP(op)	(skip & (1u << (op)))

/* ---- async-signal-safe output (children of threaded processes print) ---- */

struct buf {
	char s[400];
	size_t n;
};

static void
put(struct buf *b, const char *s)
{
	while (*s && b->n < sizeof b->s - 2)
		b->s[b->n++] = *s++;
}

static void
put_hex(struct buf *b, unsigned long v)
{
	char tmp[20];
	int i = 0;

	put(b, "0x");
	do {
		tmp[i++] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	while (i > 0 && b->n < sizeof b->s - 2)
		b->s[b->n++] = tmp[--i];
}

static void
put_dec(struct buf *b, long v)
{
	char tmp[24];
	int i = 0;

	if (v < 0) {
		put(b, "-");
		v = -v;
	}
	do {
		tmp[i++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (i > 0 && b->n < sizeof b->s - 2)
		b->s[b->n++] = tmp[--i];
}

static void
emit(struct buf *b)
{
	b->s[b->n++] = '\n';
	if (write(1, b->s, b->n) < 0)
		_exit(3);
	b->n = 0;
}

static const char *
errname(int e)
{
	switch (e) {
	case 0:		return "0";
	case EPERM:	return "EPERM";
	case ENOENT:	return "ENOENT";
	case ESRCH:	return "ESRCH";
	case EINTR:	return "EINTR";
	case EIO:	return "EIO";
	case ENXIO:	return "ENXIO";
	case E2BIG:	return "E2BIG";
	case EBADF:	return "EBADF";
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
	case ESPIPE:	return "ESPIPE";
	case EROFS:	return "EROFS";
	case ERANGE:	return "ERANGE";
	case ENOSYS:	return "ENOSYS";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENOTCONN:	return "ENOTCONN";
	case ECONNABORTED: return "ECONNABORTED";
	case ETIMEDOUT:	return "ETIMEDOUT";
	}
	return "E?";
}

static long
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void
add(unsigned long *counter, unsigned long n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

/* ---- per-thread state ---- */

struct thr {
	unsigned long rng;
	char *arena;			/* RW_PAGES RW, 1 PROT_NONE, 1 PROT_READ */
	struct slot *slot;		/* 0 in forked children */
	int worker;
};

static unsigned long
rnd(struct thr *t)
{
	t->rng ^= t->rng << 13;
	t->rng ^= t->rng >> 7;
	t->rng ^= t->rng << 17;
	return t->rng;
}

static unsigned long
below(struct thr *t, unsigned long n)
{
	return n ? rnd(t) % n : 0;
}

static int
chance(struct thr *t, int percent)
{
	return (int)below(t, 100) < percent;
}

/* The worker's descriptors: used under a read lock, closed under a write lock. */
static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static int table_fd[TABLE], table_acc[TABLE], table_n;

static void
begin(struct thr *t, int op, unsigned long cmd)
{
	if (!t->slot)
		return;
	t->slot->op = op;
	t->slot->cmd = cmd;
	__atomic_store_n(&t->slot->start_ns, now_ns(), __ATOMIC_RELEASE);
}

static void
end(struct thr *t)
{
	if (t->slot)
		__atomic_store_n(&t->slot->start_ns, 0, __ATOMIC_RELEASE);
}

/*
 * Records the outcome of one call: `e` its errno (0 for success), `ok`
 * whether `e` is one the call may return.  EIO and ENOTCONN are failures
 * of their own, whatever `ok` says.
 */
static void
outcome(struct thr *t, int op, unsigned long cmd, unsigned long detail, int e, int ok)
{
	struct buf b;

	add(&sh->inputs, 1);
	add(&sh->errs[op][e >= 0 && e < NERR ? e : NERR - 1], 1);
	if (op == OP_IOCTL && e == 0)
		add(&sh->ok_ioctls, 1);
	if (e == EIO)
		add(&sh->eio, 1);
	else if (e == ENOTCONN)
		add(&sh->enotconn, 1);
	else if (ok)
		return;
	else
		add(&sh->unexpected, 1);
	if (__atomic_fetch_add(&sh->reports, 1, __ATOMIC_RELAXED) >= MAX_REPORTS)
		return;
	b.n = 0;
	put(&b, "UNEXPECTED op=");
	put(&b, op_names[op]);
	put(&b, " cmd=");
	put_hex(&b, cmd);
	put(&b, " detail=");
	put_hex(&b, detail);
	put(&b, " errno=");
	put(&b, errname(e));
	put(&b, "(");
	put_dec(&b, e);
	put(&b, ") uid=");
	put_dec(&b, (long)geteuid());
	put(&b, " worker=");
	put_dec(&b, t->worker);
	put(&b, t->slot ? "" : " (forked child)");
	emit(&b);
}

/* ---- pointers ---- */

static char *
rw_base(struct thr *t)
{
	return t->arena;
}

static char *
guard_page(struct thr *t)
{
	return t->arena + RW_PAGES * PAGE;
}

static char *
ro_page(struct thr *t)
{
	return t->arena + (RW_PAGES + 1) * PAGE;
}

/*
 * An address for `size` bytes: valid (room for them in the RW pages),
 * misaligned, straddling the guard page, NULL, the guard page, the read-only
 * page, kernel or non-canonical addresses, random.  *valid says whether the
 * whole of it is writable.
 */
static char *
pointer(struct thr *t, size_t size, int *valid)
{
	size_t room = RW_PAGES * PAGE;
	unsigned long r = below(t, 100);

	*valid = 0;
	if (size > room)
		size = room;
	if (r < 60) {
		*valid = 1;
		return rw_base(t) + (below(t, (room - size) / 8 + 1) * 8);
	}
	if (r < 70) {
		*valid = 1;
		return rw_base(t) + below(t, room - size + 1);
	}
	if (r < 78)			/* the end crosses into the guard page */
		return size > 1 ? guard_page(t) - 1 - below(t, size - 1) : guard_page(t);
	if (r < 84)
		return 0;
	if (r < 90)
		return guard_page(t) + below(t, PAGE);
	if (r < 95)
		return ro_page(t) + below(t, PAGE / 2) * 2;
	switch (below(t, 5)) {
	case 0:  return (char *)(0xffff800000000000UL | (rnd(t) & 0xffffffffUL));
	case 1:  return (char *)(~0UL - below(t, 64));
	case 2:  return (char *)(1UL << 47);
	case 3:  return (char *)0x7ffffffff000UL;
	default: return (char *)rnd(t);
	}
}

/* ---- ioctl numbers and arguments ---- */

enum kind {
	K_NONE, K_ITEMS, K_SEL, K_CTXT, K_MUX5, K_FREQ, K_MUX6, K_PM5, K_PM6,
	K_ICCSR, K_RANGE, K_RANGET, K_ARRAY, K_INFO, K_RSIZE
};

struct known {
	unsigned long cmd;
	int kind;
	int elem;			/* K_ARRAY: bytes per element */
};

static const struct known known[] = {
	{ PCNTRDISABLE, K_NONE, 0 },	{ PCNTRENABLE, K_NONE, 0 },
	{ PCNTLOGALL, K_NONE, 0 },	{ PCNTLOGSELECT, K_NONE, 0 },
	{ PCNTCLEARCNT, K_NONE, 0 },	{ PCNTCLEARPCBPME, K_NONE, 0 },
	{ PCNTCALLER, K_NONE, 0 },	{ PCNTGETRSIZE, K_RSIZE, 0 },
	{ PCNTGETIPLHIS, K_ARRAY, sizeof(struct pfipls) },
	{ PCNTSETITEMS, K_ITEMS, 0 },	{ PCNTSETUADDR, K_RANGE, 0 },
	{ PCNTSETKADDR, K_RANGE, 0 },	{ PCNTSETURANGE, K_RANGET, 0 },
	{ PCNTSETKRANGE, K_RANGET, 0 },	{ PCNTSETMUX, K_ICCSR, 0 },
	{ PCNTGETCNT, K_ARRAY, sizeof(struct pfcntrs) },
	{ PCNT5CTXTS, K_CTXT, 0 },	{ PCNT5MUX, K_MUX5, 0 },
	{ PCNT5FREQ, K_FREQ, 0 },	{ PCNT5DISABLE, K_SEL, 0 },
	{ PCNT5ENABLE, K_SEL, 0 },	{ PCNT5CLEAR, K_SEL, 0 },
	{ PCNT5RESTART, K_SEL, 0 },	{ PCNT5SETCNTRS, K_PM5, 0 },
	{ PCNT5GETCNTRS, K_PM5, 0 },
	{ PCNT5GETCNT, K_ARRAY, sizeof(struct pfcntrs_ev5) },
	{ PCNT5READCNTRS, K_ARRAY, sizeof(struct pfcntrs_ev5) },
	{ PCNT6MUX, K_MUX6, 0 },	{ PCNT6ENABWRITE, K_PM6, 0 },
	{ PCNT6DISABLE, K_SEL, 0 },	{ PCNT6ENABLE, K_SEL, 0 },
	{ PCNT6CLEAR, K_SEL, 0 },	{ PCNT6RESTART, K_SEL, 0 },
	{ PCNT6SETCNTRS, K_PM6, 0 },	{ PCNT6GETCNTRS, K_PM6, 0 },
	{ PCNT6GETCNT, K_ARRAY, sizeof(struct pfcntrs_ev6) },
	{ PCNT6READCNTRS, K_ARRAY, sizeof(struct pfcntrs_ev6) },
	{ PCNTGETINFO, K_INFO, 0 },
};
#define NKNOWN	(sizeof known / sizeof known[0])

/* Numbers the VFS answers without asking the file system (never sent). */
static int
vfs_number(unsigned long cmd)
{
	unsigned long type = _IOC_TYPE(cmd), nr = _IOC_NR(cmd);

	switch (cmd & 0xffffffffUL) {
	case FIOCLEX: case FIONCLEX: case FIONBIO: case FIOASYNC: case FIOQSIZE:
	case FIONREAD:
		return 1;
	}
	/* FIBMAP, FIGETBSZ; 'X' FIFREEZE/FITHAW/FS_IOC_FS*XATTR; 'f' FS_IOC_*;
	 * 0x94 FICLONE/FICLONERANGE/FIDEDUPERANGE; 0x15 FS_IOC_GETFS*. */
	if (type == 0 && (nr == 1 || nr == 2))
		return 1;
	return type == 'X' || type == 'f' || type == 0x94 || type == 0x15;
}

/* Stores a word at a possibly misaligned address. */
static void
store(char *at, unsigned long value)
{
	memcpy(at, &value, sizeof value);
}

static unsigned long
pick(struct thr *t, const unsigned long *values, size_t n)
{
	return values[below(t, n)];
}

#define PICK(t, a)	pick(t, a, sizeof a / sizeof a[0])

/* A 64-bit word for a known ioctl of kind `kind`. */
static unsigned long
word(struct thr *t, int kind)
{
	static const unsigned long items[] = { 1, 2, 3, 4, 5, 6, 7, 0, 8, 0x105, 0x1201,
		0x2801, 0x2b05, 0x2c01, 0xff07, 0x10000 };
	static const unsigned long ctxts[] = { 0, 1, 2, 3 };
	static const unsigned long modes[] = { 0, 0x100, 0x200, 0x300, 0x40000000,
		0x40000100, 0x40000200, 0x40000300, 0x400, 0x80000000 };
	static const unsigned long freqs[] = { 0, 1, 2, 3 };
	static const unsigned long mux6[] = { 0x00, 0x10, 0x01, 0x02, 0x03, 0x04, 0x05,
		0x06, 0x07, 0x11, 0x17, 0x08, 0x0c, 0x14, 0x20, 0x1f };
	unsigned long w;

	if (chance(t, 10))
		return chance(t, 50) ? rnd(t) : rnd(t) & 0xffff;
	switch (kind) {
	case K_ITEMS:
		return chance(t, 20) ? 1 | (below(t, 50) << 8) : PICK(t, items);
	case K_SEL:
		return below(t, 9);
	case K_CTXT:
		return PICK(t, ctxts) | PICK(t, modes);
	case K_MUX5:
		w = chance(t, 50) ? 0x80000000UL : 0;
		w |= below(t, 16) << 4;
		w |= below(t, 16);
		if ((w & 0xf0) == 0xf0)
			w |= below(t, 8) << 51;
		if ((w & 0xf) == 0xf)
			w |= below(t, 8) << 54;
		return w;
	case K_FREQ:
		return PICK(t, freqs) << 8 | PICK(t, freqs) << 6 | PICK(t, freqs) << 4;
	case K_MUX6:
		return PICK(t, mux6);
	case K_PM5: {
		union pmctrs_ev5 u;

		u.pmctrs_ev5_long = rnd(t);
		u.pmctrs_ev5_select = below(t, 8);
		u.pmctrs_ev5_cpu = chance(t, 30) ? PMCTRS_ALL_CPUS : below(t, (unsigned long)ncpus + 2);
		return u.pmctrs_ev5_long;
	}
	case K_PM6: {
		union pmctrs_ev6 u;

		u.pmctrs_ev6_long = rnd(t);
		u.pmctrs_ev6_select = below(t, 4);
		u.pmctrs_ev6_cpu = chance(t, 30) ? PMCTRS_ALL_CPUS : below(t, (unsigned long)ncpus + 2);
		return u.pmctrs_ev6_long;
	}
	case K_ICCSR: {
		struct iccsr m;

		memset(&m, 0, sizeof m);
		m.iccsr_mux0 = below(t, 16);
		m.iccsr_mux1 = below(t, 8);
		m.iccsr_pc0 = below(t, 2);
		m.iccsr_pc1 = below(t, 2);
		m.iccsr_disable = below(t, 4);
		if (chance(t, 5))
			m.iccsr_ign2 = below(t, 1 << 20);
		memcpy(&w, &m, sizeof w);
		return w;
	}
	}
	return rnd(t);
}

/* A profile range: user text, huge, kernel text, empty, random. */
static void
range(struct thr *t, unsigned long *start, unsigned long *end)
{
	unsigned long r = below(t, 100);

	if (r < 40) {
		*start = 0x400000UL + below(t, 1 << 20) * 4;
		*end = *start + 1 + below(t, 1UL << below(t, 26));
	} else if (r < 55) {
		*start = 0x400000UL;
		*end = *start + (1UL << (20 + below(t, 24)));	/* up to 8 TiB: ENOMEM */
	} else if (r < 75 && ktext_end > ktext_start) {
		*start = ktext_start + below(t, ktext_end - ktext_start);
		*end = *start + below(t, 1 << 16);
		if (chance(t, 70)) {
			*start &= ~3UL;
			*end &= ~3UL;
		}
	} else if (r < 85) {
		*start = 0x500000UL;
		*end = *start - below(t, 2);
	} else {
		*start = rnd(t);
		*end = rnd(t);
	}
}

static unsigned long
stride(struct thr *t)
{
	static const unsigned long strides[] = { 0, 1, 2, 4, 4, 8, 64, 1UL << 30,
		1UL << 63, 3, 5, 12 };

	return chance(t, 10) ? rnd(t) : PICK(t, strides);
}

/*
 * Fills the ioctl argument for `cmd` at `arg` (when writable) and returns
 * what to pass: a pointer, or for _IO numbers anything.
 */
static void *
argument(struct thr *t, unsigned long cmd, const struct known *k, unsigned long *detail)
{
	size_t size = _IOC_SIZE(cmd), i;
	int valid, valid2;
	char *arg;

	*detail = 0;
	if (_IOC_DIR(cmd) == _IOC_NONE && chance(t, 70))
		return (void *)rnd(t);		/* nobody reads it */
	arg = pointer(t, size < 8 ? 8 : size, &valid);
	*detail = (unsigned long)arg;
	if (!valid)
		return arg;
	for (i = 0; i + 8 <= size && i < 512; i += 8)
		store(arg + i, chance(t, 50) ? 0 : rnd(t));
	if (!k || size < 8)
		return arg;
	switch (k->kind) {
	case K_RANGE:
	case K_RANGET: {
		unsigned long r[4];

		if (size < 16)
			break;
		range(t, &r[0], &r[1]);
		r[2] = stride(t);
		r[3] = chance(t, 90) ? 0 : rnd(t);
		memcpy(arg, r, size >= 32 ? 32 : 16);
		*detail = r[1] - r[0];
		break;
	}
	case K_ARRAY: {
		/* The array: room for 1 .. ncpus+1 elements, or a bad one. */
		size_t want = (size_t)k->elem * (1 + below(t, (unsigned long)ncpus + 1));
		char *array = pointer(t, want, &valid2);

		store(arg, (unsigned long)array);
		*detail = (unsigned long)array;
		break;
	}
	case K_INFO:
	case K_RSIZE:
		break;
	default:
		*detail = word(t, k->kind);
		store(arg, *detail);
		break;
	}
	return arg;
}

static unsigned long
ioctl_number(struct thr *t, const struct known **k)
{
	static const unsigned long sizes[] = { 0, 4, 8, 16, 24, 32, 248, 256, 4096, 16383 };
	unsigned long cmd, r = below(t, 100);

	*k = 0;
	do {
		if (r < 60) {
			*k = &known[below(t, NKNOWN)];
			return (*k)->cmd;
		}
		if (r < 75) {		/* a known number, other direction or size */
			cmd = known[below(t, NKNOWN)].cmd;
			cmd = _IOC(below(t, 4), 'P', _IOC_NR(cmd),
			    chance(t, 50) ? _IOC_SIZE(cmd) : PICK(t, sizes));
		} else if (r < 90) {	/* another 'P' number */
			cmd = _IOC(below(t, 4), 'P', below(t, 256),
			    chance(t, 50) ? PICK(t, sizes) : below(t, 1 << 14));
		} else {		/* anything */
			cmd = rnd(t) & 0xffffffffUL;
			if (chance(t, 50))
				cmd = _IOC(_IOC_DIR(cmd), _IOC_TYPE(cmd), _IOC_NR(cmd),
				    PICK(t, sizes));
		}
		r = 60 + below(t, 40);
	} while (vfs_number(cmd));
	return cmd;
}

static int
ioctl_errno_ok(unsigned long cmd, int e)
{
	switch (e) {
	case 0: case EBUSY: case EINVAL: case EFAULT: case ENOMEM: case ENOSPC:
	case EOPNOTSUPP: case EPERM: case EACCES:
		return 1;
	case ENOTTY:
		return _IOC_TYPE(cmd) != 'P';
	}
	return 0;
}

/* ---- operations ---- */

/* A random descriptor of the table (read-locked by the caller), or -1. */
static int
any_fd(struct thr *t, int *acc)
{
	int i;

	if (table_n == 0)
		return -1;
	i = (int)below(t, (unsigned long)table_n);
	*acc = table_acc[i];
	return table_fd[i];
}

static void
do_ioctl(struct thr *t, int fd)
{
	const struct known *k;
	unsigned long cmd = ioctl_number(t, &k), detail;
	void *arg = argument(t, cmd, k, &detail);
	int e;

	begin(t, OP_IOCTL, cmd);
	e = ioctl(fd, cmd, arg) < 0 ? errno : 0;
	end(t);
	outcome(t, OP_IOCTL, cmd, detail, e, ioctl_errno_ok(cmd, e));
}

static void
do_read(struct thr *t, int fd, int acc, int positional)
{
	size_t size = chance(t, 20) ? 0 : below(t, RW_PAGES * PAGE + 8192);
	int valid, e;
	char *p = pointer(t, size, &valid);
	ssize_t n;

	begin(t, positional ? OP_PREAD : OP_READ, size);
	n = positional ? pread(fd, p, size, (off_t)below(t, 1 << 20)) : read(fd, p, size);
	e = n < 0 ? errno : 0;
	end(t);
	if (positional && !chardev)	/* not seekable: before any other check */
		outcome(t, OP_PREAD, size, (unsigned long)p, e, e == ESPIPE);
	else if (acc == O_WRONLY || acc == O_ACCMODE)
		outcome(t, positional ? OP_PREAD : OP_READ, size, (unsigned long)p, e, e == EBADF);
	else
		outcome(t, positional ? OP_PREAD : OP_READ, size, (unsigned long)p, e,
		    e == 0 || e == EFAULT);
}

static void
do_write(struct thr *t, int fd, int acc)
{
	size_t size = below(t, 3 * PAGE);
	int valid, e;
	char *p = pointer(t, size, &valid);

	begin(t, OP_WRITE, size);
	e = write(fd, p, size) < 0 ? errno : 0;
	end(t);
	if (acc == O_RDONLY || acc == O_ACCMODE)
		outcome(t, OP_WRITE, size, (unsigned long)p, e, e == EBADF);
	else
		outcome(t, OP_WRITE, size, (unsigned long)p, e,
		    e == EINVAL || e == EFAULT || (e == 0 && size == 0));
}

static void
do_mmap(struct thr *t, int fd)
{
	int shared = chance(t, 50), prot = PROT_READ, e, ok;
	size_t len = PAGE * (1 + below(t, 4));
	void *p;

	if (chance(t, 30))
		prot |= PROT_WRITE;
	if (chance(t, 10))
		prot |= PROT_EXEC;
	begin(t, OP_MMAP, (unsigned long)shared);
	p = mmap(0, len, prot, shared ? MAP_SHARED : MAP_PRIVATE, fd,
	    (off_t)(below(t, 4) * PAGE));
	e = p == MAP_FAILED ? errno : 0;
	end(t);
	if (p != MAP_FAILED)
		munmap(p, len);		/* never touched: the file is empty (SIGBUS) */
	if (shared || chardev)
		ok = e == ENODEV || e == EACCES || (e == EPERM && (prot & PROT_EXEC));
	else
		ok = e == 0 || e == EACCES || (e == EPERM && (prot & PROT_EXEC));
	outcome(t, OP_MMAP, (unsigned long)shared, (unsigned long)prot, e, ok);
}

static void
bind_randomly(struct thr *t)
{
	cpu_set_t set;
	int i;

	CPU_ZERO(&set);
	if (chance(t, 60)) {
		CPU_SET((int)below(t, (unsigned long)ncpus), &set);
	} else {
		for (i = 0; i < ncpus; i++)
			CPU_SET(i, &set);
	}
	sched_setaffinity(0, sizeof set, &set);
}

/* Random open flags; *acc gets the access mode. */
static int
open_flags(struct thr *t, int *acc)
{
	static const int modes[] = { PCNTOPENONE, PCNTOPENEACH, PCNTOPENALL, 0 };
	static const int extra[] = { O_NONBLOCK, O_CLOEXEC, O_NOCTTY, O_TRUNC, O_NOFOLLOW,
		O_ASYNC, O_NOATIME, O_SYNC, O_LARGEFILE, O_CREAT, O_DIRECT };
	int flags, i;

	*acc = chance(t, 85) ? O_RDONLY : (int)below(t, 4);
	flags = *acc | modes[below(t, 4)];
	for (i = 0; i < (int)(sizeof extra / sizeof extra[0]); i++)
		if (chance(t, 3))
			flags |= extra[i];
	return flags;
}

static int
open_errno_ok(int flags, int e)
{
	switch (e) {
	case 0: case EBUSY: case EINVAL:
		return 1;
	case EACCES:		/* the kernel: nobody asking for write access */
		return !am_root &&
		    ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC));
	case EPERM:		/* the kernel: O_NOATIME on a file nobody does not own */
		return !am_root && (flags & O_NOATIME);
	}
	return 0;
}

static void
do_open(struct thr *t, int flags, int acc)
{
	int fd, e;

	begin(t, OP_OPEN, (unsigned long)flags);
	fd = open(device, flags, 0644);
	e = fd < 0 ? errno : 0;
	end(t);
	outcome(t, OP_OPEN, (unsigned long)flags, 0, e, open_errno_ok(flags, e));
	if (fd < 0) {
		if (e == EBUSY) {	/* poll again in a while, as a tool would */
			struct timespec ts = { 0, (long)below(t, 5000000) };

			nanosleep(&ts, 0);
		}
		return;
	}
	pthread_rwlock_wrlock(&table_lock);
	if (table_n < TABLE) {
		table_fd[table_n] = fd;
		table_acc[table_n] = acc;
		table_n++;
		fd = -1;
	}
	pthread_rwlock_unlock(&table_lock);
	if (fd >= 0)
		close(fd);
}

/* Closes a random descriptor; with `reopen`, opens again at once. */
static void
do_close(struct thr *t, int reopen)
{
	int i, fd, acc, flags, e;

	pthread_rwlock_wrlock(&table_lock);
	if (table_n == 0) {
		pthread_rwlock_unlock(&table_lock);
		return;
	}
	i = (int)below(t, (unsigned long)table_n);
	fd = table_fd[i];
	acc = table_acc[i];
	table_fd[i] = table_fd[table_n - 1];
	table_acc[i] = table_acc[table_n - 1];
	table_n--;
	pthread_rwlock_unlock(&table_lock);
	flags = fcntl(fd, F_GETFL);
	begin(t, OP_CLOSE, (unsigned long)fd);
	e = close(fd) < 0 ? errno : 0;
	end(t);
	outcome(t, OP_CLOSE, (unsigned long)fd, 0, e, e == 0);
	if (reopen && flags >= 0)
		do_open(t, (flags & ~(O_CREAT | O_TRUNC)) | acc, acc);
}

static void
do_dup(struct thr *t)
{
	int fd, acc = O_RDONLY, copy, e;

	pthread_rwlock_rdlock(&table_lock);
	fd = any_fd(t, &acc);
	copy = fd < 0 ? -1 : dup(fd);
	e = copy < 0 ? errno : 0;
	pthread_rwlock_unlock(&table_lock);
	if (fd < 0)
		return;
	outcome(t, OP_DUP, (unsigned long)fd, 0, e, e == 0);
	if (copy < 0)
		return;
	pthread_rwlock_wrlock(&table_lock);
	if (table_n < TABLE) {
		table_fd[table_n] = copy;
		table_acc[table_n] = acc;
		table_n++;
		copy = -1;
	}
	pthread_rwlock_unlock(&table_lock);
	if (copy >= 0)
		close(copy);
}

/* Opens the kernel answers itself: each errno exactly. */
static void
do_kernel_open(struct thr *t)
{
	int fd, e, which = (int)below(t, 3), ok;

	begin(t, OP_KERNEL_OPEN, (unsigned long)which);
	switch (which) {
	case 0:
		fd = open(device, O_RDONLY | O_DIRECTORY);
		break;
	case 1:
		fd = open(device, O_RDONLY | O_CREAT | O_EXCL, 0644);
		break;
	default:
		fd = open(device, O_PATH);
		break;
	}
	e = fd < 0 ? errno : 0;
	end(t);
	ok = which == 0 ? e == ENOTDIR : which == 1 ? e == EEXIST : e == 0;
	outcome(t, OP_KERNEL_OPEN, (unsigned long)which, 0, e, ok);
	if (fd < 0)
		return;
	if (which == 2) {	/* an O_PATH descriptor never reaches pfmd */
		begin(t, OP_KERNEL_OPEN, PCNTRDISABLE);
		e = ioctl(fd, PCNTRDISABLE, 0) < 0 ? errno : 0;
		end(t);
		outcome(t, OP_KERNEL_OPEN, PCNTRDISABLE, 3, e, e == EBADF);
	}
	close(fd);
}

static void random_op(struct thr *t, int in_child);

/*
 * A forked child works on the inherited descriptors (PCNTLOGSELECT first,
 * half the time) and is killed mid-call, or, a quarter of the time, exits.
 */
static void
do_fork(struct thr *t)
{
	struct timespec ts;
	pid_t pid;
	int status, i, fd, acc, killit = chance(t, 75);
	unsigned long seed = rnd(t);

	/* The table as it is now: the child uses its copies without locks. */
	pthread_rwlock_rdlock(&table_lock);
	pid = fork();
	if (pid == 0) {
		struct thr child = *t;

		child.slot = 0;
		child.rng = seed | 1;
		if (table_n && chance(&child, 50)) {
			fd = any_fd(&child, &acc);
			ioctl(fd, PCNTLOGSELECT, 0);
		}
		for (i = 0; i < 1 + (int)below(&child, 12); i++)
			random_op(&child, 1);
		_exit(0);
	}
	pthread_rwlock_unlock(&table_lock);
	if (pid < 0)
		return;
	add(&sh->forks, 1);
	if (killit) {
		ts.tv_sec = 0;
		ts.tv_nsec = (long)below(t, 5000000);
		nanosleep(&ts, 0);
		kill(pid, SIGKILL);
		add(&sh->kills, 1);
	}
	begin(t, OP_FORK, (unsigned long)pid);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	end(t);
	add(&sh->inputs, 1);
}

/* fork and exec /bin/true: the exec closes the close-on-exec descriptors. */
static void
do_exec(struct thr *t)
{
	pid_t pid;
	int status, e;

	pthread_rwlock_rdlock(&table_lock);
	begin(t, OP_EXEC, 0);
	pid = fork();
	if (pid == 0) {
		execl("/bin/true", "true", (char *)0);
		_exit(127);
	}
	pthread_rwlock_unlock(&table_lock);
	e = pid < 0 ? errno : 0;
	if (pid > 0)
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	end(t);
	outcome(t, OP_EXEC, 0, 0, e, e == 0);
}

/* A thread that takes the PME bit, makes a few calls and exits. */
struct brief {
	struct thr *parent;
	unsigned long seed;
};

static void *
brief_thread(void *arg)
{
	struct brief *b = arg;
	struct thr t = *b->parent;
	int fd, acc, e, i;

	t.slot = 0;
	t.rng = b->seed | 1;
	pthread_rwlock_rdlock(&table_lock);
	fd = any_fd(&t, &acc);
	if (fd >= 0) {
		e = ioctl(fd, PCNTLOGSELECT, 0) < 0 ? errno : 0;
		outcome(&t, OP_IOCTL, PCNTLOGSELECT, 2, e, ioctl_errno_ok(PCNTLOGSELECT, e));
		for (i = 0; i < 3; i++)
			do_ioctl(&t, fd);
	}
	pthread_rwlock_unlock(&table_lock);
	return 0;
}

static void
do_thread(struct thr *t)
{
	struct brief b = { t, rnd(t) };
	pthread_t th;

	if (pthread_create(&th, 0, brief_thread, &b) != 0)
		return;
	begin(t, OP_THREAD, 0);
	pthread_join(th, 0);
	end(t);
	add(&sh->threads, 1);
}

/*
 * An open in a forked child: closed again at once, the table untouched (the
 * child's copy of its lock may be held by a thread it does not have).
 */
static void
child_open(struct thr *t)
{
	int acc, flags = open_flags(t, &acc), fd, e;

	fd = open(device, flags, 0644);
	e = fd < 0 ? errno : 0;
	outcome(t, OP_OPEN, (unsigned long)flags, 0, e, open_errno_ok(flags, e));
	if (fd >= 0)
		close(fd);
}

/* One operation on a descriptor of the table (read-locked by the caller). */
static void
fd_op(struct thr *t, int fd, int acc)
{
	unsigned long r = below(t, 100);

	if (r < 80 || (r < 88 && SKIP(OP_READ)) || (r < 93 && SKIP(OP_WRITE)) ||
	    (r >= 93 && SKIP(OP_MMAP)))
		do_ioctl(t, fd);
	else if (r < 88)
		do_read(t, fd, acc, r < 86 ? 0 : 1);
	else if (r < 93)
		do_write(t, fd, acc);
	else
		do_mmap(t, fd);
}

/*
 * One random operation.  A worker without a descriptor mostly opens; one
 * with descriptors mostly uses them, and now and then closes, reopens,
 * dups, forks or starts a brief thread.  A forked child only uses the
 * descriptors it inherited and opens (and closes again) its own.
 */
static void
random_op(struct thr *t, int in_child)
{
	unsigned long r = below(t, 1000);
	int fd, acc = O_RDONLY, flags, have = __atomic_load_n(&table_n, __ATOMIC_RELAXED);

	if (in_child) {
		if (r < 50 || !have) {
			bind_randomly(t);
			child_open(t);
		} else {
			fd = any_fd(t, &acc);
			if (fd >= 0)
				fd_op(t, fd, acc);
		}
		return;
	}
	if (!have)
		r = r < 700 ? 0 : r < 760 ? 800 : r < 800 ? 990 : r < 830 ? 880 : r < 860 ? 900 : 0;
	if (r < 60) {
		bind_randomly(t);
		flags = open_flags(t, &acc);
		do_open(t, flags, acc);
	} else if (r < 760) {
		pthread_rwlock_rdlock(&table_lock);
		fd = any_fd(t, &acc);
		if (fd >= 0)
			fd_op(t, fd, acc);
		pthread_rwlock_unlock(&table_lock);
	} else if (r < 800) {
		do_close(t, 0);
	} else if (r < 840) {
		do_close(t, 1);
	} else if (r < 860) {
		if (!SKIP(OP_DUP))
			do_dup(t);
	} else if (r < 875) {
		if (!SKIP(OP_KERNEL_OPEN))
			do_kernel_open(t);
	} else if (r < 900) {
		if (!SKIP(OP_FORK))
			do_fork(t);
	} else if (r < 920) {
		if (!SKIP(OP_THREAD))
			do_thread(t);
	} else if (r < 930 && with_exec) {
		do_exec(t);
	} else if (r < 940) {
		bind_randomly(t);
	} else {
		pthread_rwlock_rdlock(&table_lock);
		fd = any_fd(t, &acc);
		if (fd >= 0)
			do_ioctl(t, fd);
		pthread_rwlock_unlock(&table_lock);
	}
}

/* ---- workers ---- */

static void *
worker_thread(void *arg)
{
	struct thr *t = arg;

	while (!__atomic_load_n(&sh->stop, __ATOMIC_RELAXED))
		random_op(t, 0);
	return 0;
}

static void
worker(int w, int threads, unsigned long seed)
{
	struct thr t[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	size_t len = (RW_PAGES + 2) * PAGE;
	int i;

	alarm((unsigned)(seconds + 2 * deadline_s + 30));
	if (w % 2 == 1) {	/* every other worker is nobody */
		if (setgroups(0, 0) || setgid(65534) || setuid(65534)) {
			perror("pfm_fuzz: drop to nobody");
			_exit(2);
		}
	}
	am_root = geteuid() == 0;
	for (i = 0; i < threads; i++) {
		t[i].arena = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (t[i].arena == MAP_FAILED) {
			perror("pfm_fuzz: mmap");
			_exit(2);
		}
		mprotect(guard_page(&t[i]), PAGE, PROT_NONE);
		mprotect(ro_page(&t[i]), PAGE, PROT_READ);
		t[i].rng = (seed ^ ((unsigned long)w << 32) ^ ((unsigned long)i << 48)) * 2654435761UL | 1;
		t[i].slot = &sh->slots[w * MAX_THREADS + i];
		t[i].worker = w;
		if (pthread_create(&th[i], 0, worker_thread, &t[i])) {
			perror("pfm_fuzz: pthread_create");
			_exit(2);
		}
	}
	for (i = 0; i < threads; i++)
		pthread_join(th[i], 0);
	for (i = 0; i < table_n; i++)
		close(table_fd[i]);
	_exit(0);
}

static void
kernel_text(void)
{
	char line[256], name[128], type;
	unsigned long addr;
	FILE *f = fopen("/proc/kallsyms", "r");

	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, "%lx %c %127s", &addr, &type, name) != 3)
			continue;
		if (!strcmp(name, "_stext"))
			ktext_start = addr;
		else if (!strcmp(name, "_etext"))
			ktext_end = addr;
		if (ktext_start && ktext_end)
			break;
	}
	fclose(f);
}

static void
histogram(void)
{
	int op, e;

	for (op = 0; op < OP_COUNT; op++) {
		unsigned long total = 0;

		for (e = 0; e < NERR; e++)
			total += sh->errs[op][e];
		if (!total)
			continue;
		printf("errno %-11s", op_names[op]);
		for (e = 0; e < NERR; e++)
			if (sh->errs[op][e])
				printf(" %s=%lu", errname(e), sh->errs[op][e]);
		printf("\n");
	}
}

int
main(int argc, char **argv)
{
	pid_t pids[MAX_WORKERS];
	int workers = 4, threads = 3, w, i, status, alive;
	unsigned long seed;
	long start, limit;
	char *env;

	if (argc < 4) {
		fprintf(stderr, "usage: pfm_fuzz DEVICE SECONDS SEED [WORKERS [THREADS]]\n");
		return 2;
	}
	setvbuf(stdout, 0, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	device = argv[1];
	seconds = atoi(argv[2]);
	seed = strtoul(argv[3], 0, 0);
	if (argc > 4)
		workers = atoi(argv[4]);
	if (argc > 5)
		threads = atoi(argv[5]);
	if (workers < 1 || workers > MAX_WORKERS || threads < 1 || threads > MAX_THREADS) {
		fprintf(stderr, "pfm_fuzz: 1..%d workers of 1..%d threads\n", MAX_WORKERS, MAX_THREADS);
		return 2;
	}
	if ((env = getenv("PFM_FUZZ_DEADLINE")) && atoi(env) > 0)
		deadline_s = atoi(env);
	with_exec = !((env = getenv("PFM_FUZZ_EXEC")) && atoi(env) == 0);
	{
		struct stat st;

		chardev = stat(argv[1], &st) == 0 && S_ISCHR(st.st_mode);
	}
	if ((env = getenv("PFM_FUZZ_SKIP")))
		for (i = 0; i < OP_COUNT; i++)
			if (strstr(env, op_names[i]))
				skip |= 1u << i;
	if (geteuid() != 0) {
		fprintf(stderr, "pfm_fuzz: run as root (half the workers become nobody)\n");
		return 2;
	}
	ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpus < 1)
		ncpus = 1;
	kernel_text();
	sh = mmap(0, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("pfm_fuzz: mmap");
		return 2;
	}
	printf("pfm_fuzz: device %s, %d s, seed %lu, %d workers x %d threads, %d CPUs, "
	    "deadline %d s, kernel text %#lx..%#lx\n", device, seconds, seed, workers, threads,
	    ncpus, deadline_s, ktext_start, ktext_end);
	for (w = 0; w < workers; w++) {
		pids[w] = fork();
		if (pids[w] < 0) {
			perror("pfm_fuzz: fork");
			return 2;
		}
		if (pids[w] == 0)
			worker(w, threads, seed);
	}

	/* The watchdog: every call in flight, against its deadline. */
	start = now_ns();
	limit = start + (long)seconds * 1000000000L;
	for (;;) {
		struct timespec tick = { 0, 50000000 };
		long now = now_ns();

		for (i = 0; i < NSLOTS; i++) {
			long began = __atomic_load_n(&sh->slots[i].start_ns, __ATOMIC_ACQUIRE);

			if (began && now - began > (long)deadline_s * 1000000000L) {
				printf("HANG op=%s cmd=%#lx worker=%d thread=%d running for %ld s\n",
				    op_names[sh->slots[i].op], sh->slots[i].cmd, i / MAX_THREADS,
				    i % MAX_THREADS, (now - began) / 1000000000L);
				sh->hangs++;
				sh->slots[i].start_ns = 0;
			}
		}
		if (sh->hangs) {
			for (w = 0; w < workers; w++)
				kill(pids[w], SIGKILL);
			break;
		}
		if (now >= limit)
			__atomic_store_n(&sh->stop, 1, __ATOMIC_RELAXED);
		alive = 0;
		for (w = 0; w < workers; w++) {
			if (pids[w] <= 0)
				continue;
			if (waitpid(pids[w], &status, WNOHANG) == pids[w]) {
				if (WIFSIGNALED(status)) {
					printf("HANG worker %d killed by signal %d (its alarm: a call never returned)\n",
					    w, WTERMSIG(status));
					sh->hangs++;
				} else if (WEXITSTATUS(status) != 0) {
					printf("pfm_fuzz: worker %d failed with status %d\n", w,
					    WEXITSTATUS(status));
					return 2;
				}
				pids[w] = 0;
			} else {
				alive++;
			}
		}
		if (!alive)
			break;
		nanosleep(&tick, 0);
	}
	for (w = 0; w < workers; w++)
		if (pids[w] > 0)
			waitpid(pids[w], &status, 0);

	printf("ops");
	for (i = 0; i < OP_COUNT; i++) {
		unsigned long n = 0;
		int e;

		for (e = 0; e < NERR; e++)
			n += sh->errs[i][e];
		printf(" %s=%lu", op_names[i], n);
	}
	printf(" forks=%lu killed=%lu threads=%lu\n", sh->forks, sh->kills, sh->threads);
	histogram();
	printf("SUMMARY inputs=%lu ok_ioctls=%lu unexpected=%lu eio=%lu enotconn=%lu hangs=%lu\n",
	    sh->inputs, sh->ok_ioctls, sh->unexpected, sh->eio, sh->enotconn, sh->hangs);
	return sh->unexpected || sh->eio || sh->enotconn || sh->hangs ? 1 : 0;
}
