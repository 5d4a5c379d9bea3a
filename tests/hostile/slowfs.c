/*
 * slowfs -- the attacker's filesystem of tests/hostile.rs: a one-file FUSE
 * filesystem spoken over raw /dev/fuse whose READs are held, unanswered,
 * until it gets SIGUSR1.  A page of its file mapped MAP_PRIVATE and never
 * touched faults in only when slowfs answers, so a write into it from
 * anywhere (process_vm_writev included) waits for slowfs.
 *
 *	slowfs MOUNTPOINT
 *
 * Mounts (mount(2): run it as root; allow_other lets every user in), prints
 * "ready" and, for each READ it holds, "held N".  SIGUSR1 answers every held
 * READ and each later one at once ("released N").  SIGTERM or SIGINT ends
 * it: closing /dev/fuse aborts the connection, so whatever still waits for
 * a READ gets an error.  The file is "f", 1 MiB of zeros.
 */
#define _GNU_SOURCE
#include <linux/fuse.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_SIZE	(1 << 20)
#define MAX_HELD	256

static volatile sig_atomic_t released, stopping;
static int dev;
static uint64_t held[MAX_HELD];
static uint32_t held_size[MAX_HELD];
static int nheld;

static void
on_signal(int sig)
{
	if (sig == SIGUSR1)
		released = 1;
	else
		stopping = 1;
}

static void
reply(uint64_t unique, int error, const void *data, size_t len)
{
	static char buf[FILE_SIZE + sizeof(struct fuse_out_header)];
	struct fuse_out_header h;

	h.len = sizeof h + len;
	h.error = error ? -error : 0;
	h.unique = unique;
	memcpy(buf, &h, sizeof h);
	if (len)
		memcpy(buf + sizeof h, data, len);
	/* ENOENT: the request was interrupted and already answered. */
	if (write(dev, buf, h.len) < 0 && errno != ENOENT)
		perror("slowfs: write");
}

static void
attr(struct fuse_attr *a, uint64_t ino)
{
	memset(a, 0, sizeof *a);
	a->ino = ino;
	a->mode = ino == 1 ? S_IFDIR | 0755 : S_IFREG | 0644;
	a->nlink = ino == 1 ? 2 : 1;
	a->size = ino == 1 ? 0 : FILE_SIZE;
	a->blocks = a->size / 512;
	a->blksize = 4096;
}

static void
answer_read(uint64_t unique, uint32_t size)
{
	static char zeros[FILE_SIZE];

	reply(unique, 0, zeros, size > FILE_SIZE ? FILE_SIZE : size);
}

static void
release_held(void)
{
	int i;

	for (i = 0; i < nheld; i++)
		answer_read(held[i], held_size[i]);
	printf("released %d\n", nheld);
	fflush(stdout);
	nheld = 0;
}

int
main(int argc, char **argv)
{
	static char buf[FILE_SIZE + 4096];
	struct sigaction sa;
	char opts[128];
	ssize_t n;

	if (argc != 2) {
		fprintf(stderr, "usage: slowfs MOUNTPOINT\n");
		return 2;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;	/* no SA_RESTART: read(2) returns EINTR */
	sigaction(SIGUSR1, &sa, 0);
	sigaction(SIGTERM, &sa, 0);
	sigaction(SIGINT, &sa, 0);
	dev = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		perror("slowfs: /dev/fuse");
		return 2;
	}
	snprintf(opts, sizeof opts,
	    "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", dev);
	if (mount("slowfs", argv[1], "fuse.slowfs", MS_NOSUID | MS_NODEV, opts) < 0) {
		perror("slowfs: mount");
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	while (!stopping) {
		struct fuse_in_header *h = (void *)buf;
		void *body = buf + sizeof *h;

		if (released && nheld)
			release_held();
		n = read(dev, buf, sizeof buf);
		if (n < 0) {
			if (errno == EINTR || errno == ENOENT || errno == EAGAIN)
				continue;
			break;		/* ENODEV: unmounted */
		}
		switch (h->opcode) {
		case FUSE_INIT: {
			struct fuse_init_in *in = body;
			struct fuse_init_out out;

			memset(&out, 0, sizeof out);
			out.major = FUSE_KERNEL_VERSION;
			out.minor = in->minor < 31 ? in->minor : 31;
			out.max_readahead = in->max_readahead;
			out.max_write = 4096;
			/* No FUSE_ASYNC_READ: a fault waits for its own READ. */
			reply(h->unique, 0, &out, sizeof out);
			break;
		}
		case FUSE_LOOKUP: {
			struct fuse_entry_out out;

			if (h->nodeid != 1 || strcmp(body, "f")) {
				reply(h->unique, ENOENT, 0, 0);
				break;
			}
			memset(&out, 0, sizeof out);
			out.nodeid = 2;
			out.entry_valid = out.attr_valid = 3600;
			attr(&out.attr, 2);
			reply(h->unique, 0, &out, sizeof out);
			break;
		}
		case FUSE_GETATTR: {
			struct fuse_attr_out out;

			memset(&out, 0, sizeof out);
			out.attr_valid = 3600;
			attr(&out.attr, h->nodeid);
			reply(h->unique, 0, &out, sizeof out);
			break;
		}
		case FUSE_OPEN:
		case FUSE_OPENDIR: {
			struct fuse_open_out out;

			memset(&out, 0, sizeof out);
			out.fh = 1;
			reply(h->unique, 0, &out, sizeof out);
			break;
		}
		case FUSE_READ: {
			struct fuse_read_in *in = body;

			if (released || nheld == MAX_HELD) {
				answer_read(h->unique, in->size);
				break;
			}
			held[nheld] = h->unique;
			held_size[nheld++] = in->size;
			printf("held %d\n", nheld);
			fflush(stdout);
			break;
		}
		case FUSE_RELEASE:
		case FUSE_RELEASEDIR:
		case FUSE_FLUSH:
			reply(h->unique, 0, 0, 0);
			break;
		case FUSE_FORGET:
		case FUSE_BATCH_FORGET:
		case FUSE_INTERRUPT:
			break;
		default:
			reply(h->unique, ENOSYS, 0, 0);
		}
	}
	umount2(argv[1], MNT_DETACH);
	return 0;
}
