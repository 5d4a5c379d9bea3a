/*
 * <sys/pfcntr.h> -- the pfm performance-counter pseudo-device, /dev/pfcntr.
 *
 * The OSF/1 / Digital UNIX / Tru64 interface (names, structures and constants
 * of the Tru64 header, revision 1.1.47.1) as served on Linux by pfmd.  See
 * pfm(7) and docs/device.md of the pfmd sources.  Differences from the
 * Alpha header:
 *
 *   - the PCNTOPEN* mode bits are re-encoded onto O_DSYNC / O_APPEND (the
 *     Tru64 bits are O_LARGEFILE and O_DIRECTORY on Linux);
 *   - ioctl numbers are Linux _IO/_IOR/_IOW/_IOWR('P', nr, type) with LP64
 *     sizes of the Tru64 declarations;
 *   - `ulong' is spelled `unsigned long' (same LP64 layout);
 *   - PCNTGETINFO and struct pfm_info are a pfmd extension.
 *
 * Kernel-only names of the original (PFM_CLOSED, PFM_KSAMPLES, the WRPERFMON
 * function codes, the *_KMASK masks) are deliberately absent.
 *
 * Argument conventions, as on Tru64: every ioctl that declares a type takes
 * the ADDRESS of an object of that type.  For the pointer-typed ones
 * (PCNTGETCNT, PCNT5GETCNT, PCNT6GETCNT, PCNT5READCNTRS, PCNT6READCNTRS,
 * PCNTGETIPLHIS) that object is itself a pointer to the caller's array:
 *
 *	struct pfcntrs cntrs[NCPUS];
 *	struct pfcntrs *pfcntrs = cntrs;
 *	ioctl(fd, PCNTGETCNT, &pfcntrs);
 */

#ifndef _SYS_PFCNTR_H_
#define _SYS_PFCNTR_H_
#define _PFCNTR_H_		/* the Tru64 header's include guard */

/*
 * As the Tru64 header, include <sys/types.h> first: legacy sources use
 * ulong, u_int and caddr_t having included only <sys/pfcntr.h>.
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <fcntl.h>

/*
 * glibc declares those BSD names only in its default and GNU dialects
 * (__USE_MISC).  Tru64 always had them, so under strict ISO C (-std=c99)
 * they are declared here, as the same types.
 */
#if defined(__GLIBC__) && !defined(__USE_MISC)
typedef unsigned char	u_char;
typedef unsigned short	u_short;
typedef unsigned int	u_int;
typedef unsigned long	u_long;
typedef unsigned short	ushort;
typedef unsigned int	uint;
typedef unsigned long	ulong;
typedef char		*caddr_t;
#endif

/* Bit-fields of type unsigned long are an extension in ISO C89/C++98. */
#if defined(__GNUC__)
#define _PFM_EXT	__extension__
#else
#define _PFM_EXT
#endif

/*
 * Open modes, OR'd into the open(2) flags (O_RDONLY is sufficient).
 * No mode bits at all means PCNTOPENALL.
 */
#if defined(O_DSYNC)
#define _PFM_O_ONE	O_DSYNC
#elif defined(__O_DSYNC)
#define _PFM_O_ONE	__O_DSYNC	/* glibc, strict ISO C mode */
#else
#define _PFM_O_ONE	010000		/* O_DSYNC on x86-64 and aarch64 */
#endif

#define PCNTOPENONE	(_PFM_O_ONE)			/* only the CPU the caller is bound to */
#define PCNTOPENEACH	(O_APPEND)			/* all CPUs, data kept per CPU */
#define PCNTOPENALL	(_PFM_O_ONE | O_APPEND)		/* all CPUs, aggregated */
#define PCNTOPENMASK	(_PFM_O_ONE | O_APPEND)		/* mask of the mode bits */

/*
 * Items collected at each counter interrupt; OR them into the PCNTSETITEMS
 * argument.
 */
#define PFM_COUNTERS	1		/* interrupt counters (the default) */
#define PFM_IPL		2		/* IPL histogram */
#define PFM_PROFILING	4		/* user or kernel PC profiling */

/* EV67 profile-me statistic (PF67_PM_*) carried in the PCNTSETITEMS word. */
#define PFM_PROFME_MODE_MASK	0xff00
#define PFM_PROFME_MODE_SHIFT	8

/*
 * Structures.  All fields are unsigned long (64 bits).
 */

/* EV4 ICCSR image for PCNTSETMUX; bit-fields from bit 0.  ign* must be 0. */
struct iccsr {
	_PFM_EXT unsigned long	iccsr_pc1:1,		/* counter 1 period (PF_C1_INT_EVERY_*) */
			iccsr_ign0:2,		/* must be zero */
			iccsr_pc0:1,		/* counter 0 period (PF_C0_INT_EVERY_*) */
			iccsr_ign1:4,		/* must be zero */
			iccsr_mux0:4,		/* counter 0 event (PF_ISSUES ...) */
			iccsr_ign2:20,		/* must be zero */
			iccsr_mux1:3,		/* counter 1 event (PF_DCACHE ...) */
			iccsr_disable:2,	/* 1: counter 0 off, 2: counter 1 off; 3 is EINVAL */
			iccsr_ign3:27;		/* must be zero */
};

/* EV4 driver counts (interrupts, not events), for PCNTGETCNT. */
struct pfcntrs {
	unsigned long	pf_cntr0;	/* counter 0 interrupts */
	unsigned long	pf_cntr1;	/* counter 1 interrupts */
	unsigned long	pr_cycle;	/* host cycle counter at the last interrupt */
};

/* EV5 driver counts, for PCNT5GETCNT and PCNT5READCNTRS. */
struct pfcntrs_ev5 {
	unsigned long	pr_cycle;	/* host cycle counter at the last interrupt */
	unsigned long	pf_cntr0;	/* counter 0 */
	unsigned long	pf_cntr1;	/* counter 1 */
	unsigned long	pf_cntr2;	/* counter 2 */
};

/* EV6/EV67 driver counts, for PCNT6GETCNT and PCNT6READCNTRS. */
struct pfcntrs_ev6 {
	unsigned long	pr_cycle;	/* host cycle counter at the last interrupt */
	unsigned long	pf_cntr0;	/* counter 0 */
	unsigned long	pf_cntr1;	/* counter 1 */
};

/*
 * IPL histogram of one CPU, for PCNTGETIPLHIS: 0..5 IPL0..IPL5, 6 unused,
 * 7 idle ticks, 8 user-mode ticks.
 */
struct pfipls {
	unsigned long	ipl[9];
};

/* Text range to profile, for PCNTSETUADDR and PCNTSETKADDR: [start, end). */
struct addr_range {
	unsigned long	start;		/* first text address */
	unsigned long	end;		/* end of the range (exclusive) */
};

/* Text range with a stride, for PCNTSETURANGE and PCNTSETKRANGE. */
typedef struct {
	unsigned long	start;		/* first text address */
	unsigned long	end;		/* end of the range (exclusive) */
	unsigned long	stride;		/* instructions per bucket: 0 or a power of two */
	unsigned long	res0;		/* reserved, zero */
} addr_range_t;

/* Value of the pmctrs_ev5_cpu / pmctrs_ev6_cpu field meaning every CPU. */
#define PMCTRS_ALL_CPUS		0xFF

/*
 * EV5 counter word for PCNT5SETCNTRS / PCNT5GETCNTRS (and the select bits of
 * the other PCNT5* calls): pass &u.pmctrs_ev5_long.
 */
union pmctrs_ev5 {
	unsigned long	pmctrs_ev5_long;
	struct {
		_PFM_EXT unsigned long	pmctrs_ev5_s_sel:3,	/* PF5_SEL_COUNTER_* bits */
				:5,
				pmctrs_ev5_s_cpu:8,	/* CPU, or PMCTRS_ALL_CPUS */
				pmctrs_ev5_s_c2:14,	/* counter 2 */
				:2,
				pmctrs_ev5_s_c1:16,	/* counter 1 */
				pmctrs_ev5_s_c0:16;	/* counter 0 */
	} pmctrs_ev5_struct;
};

#define pmctrs_ev5_select	pmctrs_ev5_struct.pmctrs_ev5_s_sel
#define pmctrs_ev5_cpu		pmctrs_ev5_struct.pmctrs_ev5_s_cpu
#define pmctrs_ev5_cntr0	pmctrs_ev5_struct.pmctrs_ev5_s_c0
#define pmctrs_ev5_cntr1	pmctrs_ev5_struct.pmctrs_ev5_s_c1
#define pmctrs_ev5_cntr2	pmctrs_ev5_struct.pmctrs_ev5_s_c2

/*
 * EV6 counter word for PCNT6ENABWRITE / PCNT6SETCNTRS / PCNT6GETCNTRS:
 * pass &u.pmctrs_ev6_long.
 */
union pmctrs_ev6 {
	unsigned long	pmctrs_ev6_long;
	struct {
		_PFM_EXT unsigned long	pmctrs_ev6_s_sel:2,	/* PF6_SEL_COUNTER_* bits */
				:4,
				pmctrs_ev6_s_c1:20,	/* counter 1 */
				:2,
				pmctrs_ev6_s_c0:20,	/* counter 0 */
				:8,
				pmctrs_ev6_s_cpu:8;	/* CPU, or PMCTRS_ALL_CPUS */
	} pmctrs_ev6_struct;
};

#define pmctrs_ev6_select	pmctrs_ev6_struct.pmctrs_ev6_s_sel
#define pmctrs_ev6_cpu		pmctrs_ev6_struct.pmctrs_ev6_s_cpu
#define pmctrs_ev6_cntr0	pmctrs_ev6_struct.pmctrs_ev6_s_c0
#define pmctrs_ev6_cntr1	pmctrs_ev6_struct.pmctrs_ev6_s_c1

/*
 * Ioctls.  Type 'P', the Tru64 numbers, LP64 sizes of the Tru64 types.
 */

/* Family independent. */
#define PCNTRDISABLE	_IO('P', 0)				/* stop counter interrupts */
#define PCNTRENABLE	_IO('P', 1)				/* start counter interrupts */
#define PCNTLOGALL	_IO('P', 3)				/* count all system activity */
#define PCNTLOGSELECT	_IO('P', 4)				/* count only threads with the PME bit */
#define PCNTCLEARCNT	_IO('P', 5)				/* clear the driver counts */
#define PCNTCLEARPCBPME	_IO('P', 7)				/* clear this thread's PME bit */
#define PCNTCALLER	_IO('P', 8)				/* kernel profiling: charge callers */
#define PCNTGETRSIZE	_IOR('P', 10, long)			/* bytes read(2) returns */
#define PCNTGETIPLHIS	_IOW('P', 11, struct pfipls *)		/* copy the IPL histogram(s) */
#define PCNTSETITEMS	_IOW('P', 31, long)			/* select items (PFM_*) */
#define PCNTSETUADDR	_IOW('P', 32, struct addr_range)	/* user PC profiling range */
#define PCNTSETKADDR	_IOW('P', 33, struct addr_range)	/* kernel PC profiling range */
#define PCNTSETURANGE	_IOW('P', 34, addr_range_t)		/* user range with stride */
#define PCNTSETKRANGE	_IOW('P', 35, addr_range_t)		/* kernel range with stride */

/* EV4 (21064, 21064A, 21066, 21068). */
#define PCNTSETMUX	_IOW('P', 2, struct iccsr)		/* select events and periods */
#define PCNTGETCNT	_IOW('P', 6, struct pfcntrs *)		/* copy the driver counts */

/* EV5 (21164, EV56, PCA56). */
#define PCNT5CTXTS	_IOW('P', 40, long)			/* contexts to count in (PF5_CTXT_*) */
#define PCNT5MUX	_IOW('P', 41, long)			/* events of counters 0, 1, 2 */
#define PCNT5FREQ	_IOW('P', 42, long)			/* interrupt periods */
#define PCNT5DISABLE	_IOW('P', 43, long)			/* disable selected counters */
#define PCNT5ENABLE	_IOW('P', 44, long)			/* enable selected counters */
#define PCNT5CLEAR	_IOW('P', 45, long)			/* zero selected counters */
#define PCNT5RESTART	_IOW('P', 46, long)			/* zero and enable selected counters */
#define PCNT5SETCNTRS	_IOW('P', 47, long)			/* write selected counters */
#define PCNT5GETCNTRS	_IOWR('P', 48, long)			/* read the counters of one CPU */
#define PCNT5GETCNT	_IOW('P', 49, struct pfcntrs_ev5 *)	/* copy the driver counts */
#define PCNT5READCNTRS	_IOW('P', 50, struct pfcntrs_ev5 *)	/* (interrupts << width) + raw */

/* EV6 (21264) and EV67. */
#define PCNT6MUX	_IOW('P', 51, long)			/* events (PF6_MUX*, PF67_*) */
#define PCNT6ENABWRITE	_IOW('P', 52, long)			/* write then enable selected counters */
#define PCNT6DISABLE	_IOW('P', 53, long)			/* disable selected counters */
#define PCNT6ENABLE	_IOW('P', 54, long)			/* enable selected counters */
#define PCNT6CLEAR	_IOW('P', 55, long)			/* zero selected counters */
#define PCNT6RESTART	_IOW('P', 56, long)			/* zero and enable selected counters */
#define PCNT6SETCNTRS	_IOW('P', 57, long)			/* write selected counters */
#define PCNT6GETCNTRS	_IOWR('P', 58, long)			/* read the counters of one CPU */
#define PCNT6GETCNT	_IOW('P', 59, struct pfcntrs_ev6 *)	/* copy the driver counts */
#define PCNT6READCNTRS	_IOW('P', 60, struct pfcntrs_ev6 *)	/* (interrupts << width) + raw */

/* pfmd extension. */
#define PCNTGETINFO	_IOR('P', 100, struct pfm_info)		/* describe the device */

/*
 * EV4 events.  Counter 0 (iccsr_mux0):
 */
#define PF_ISSUES	0x0	/* total issues / 2 */
#define PF_PIPEDRY	0x2	/* cycles with no valid I-stream data */
#define PF_LOADI	0x4	/* load instructions */
#define PF_PIPEFROZEN	0x6	/* cycles frozen by resource conflicts */
#define PF_BRANCHI	0x8	/* branch instructions */
#define PF_CYCLES	0xa	/* cycles */
#define PF_PALMODE	0xb	/* cycles in PALmode */
#define PF_NONISSUES	0xc	/* total non-issues / 2 */
#define PF_EXTPIN0	0xe	/* external pin 0 (platform specific) */

/* Counter 1 (iccsr_mux1): */
#define PF_DCACHE	0x0	/* D-cache misses */
#define PF_ICACHE	0x1	/* I-cache misses */
#define PF_DUAL		0x2	/* dual-issue cycles */
#define PF_BRANCHMISS	0x3	/* branch mispredictions */
#define PF_FPINST	0x4	/* floating-point operate instructions */
#define PF_INTOPS	0x5	/* integer operate instructions */
#define PF_STOREI	0x6	/* store instructions */
#define PF_EXTPIN1	0x7	/* external pin 1 (platform specific) */

/* iccsr_pc0 and iccsr_pc1: events per interrupt. */
#define PF_C0_INT_EVERY_65536	0
#define PF_C0_INT_EVERY_4096	1
#define PF_C1_INT_EVERY_4096	0
#define PF_C1_INT_EVERY_256	1

/*
 * EV5 contexts (PCNT5CTXTS): one of the first four, OR'd with NO_* bits or
 * with exactly one of the combinations.  Digital UNIX user mode is the chip's
 * Executive mode, so "user only" on real hardware is PF5_CTXT_EXEC_AND_SUPER;
 * pfmd treats PF5_CTXT_USER and PF5_CTXT_EXEC_AND_SUPER both as user mode.
 */
#define PF5_CTXT_ALL_PROC	0		/* count all processes */
#define PF5_CTXT_SEL_PROC	1		/* only processes with the PME bit */
#define PF5_CTXT_PME_THIS	2		/* set the PME bit of this process */
#define PF5_CTXT_THIS_PROC	3		/* this process (PME and selective) */

#define PF5_CTXT_NO_USER	0x40000000	/* ignore user mode */
#define PF5_CTXT_NO_PAL		0x200		/* ignore PAL mode */
#define PF5_CTXT_NO_KERNEL	0x100		/* ignore kernel/executive/supervisor */

#define PF5_CTXT_USER		0x300		/* user only */
#define PF5_CTXT_PAL		0x40000100	/* PAL only */
#define PF5_CTXT_USER_AND_PAL	0x100		/* user and PAL */
#define PF5_CTXT_KERNEL		0x40000200	/* kernel only */
#define PF5_CTXT_USER_AND_KERNEL 0x200		/* user and kernel */
#define PF5_CTXT_PAL_AND_KERNEL	0x40000000	/* PAL and kernel */
#define PF5_CTXT_ALL_MODES	0		/* every mode */
#define PF5_CTXT_EXEC_AND_SUPER	0x40000300	/* executive and supervisor only */

/* EV5 counter 0 (PCNT5MUX bit 31). */
#define PF5_MUX0_CYCLES		0		/* cycles */
#define PF5_MUX0_ISSUES		0x80000000UL	/* instructions */

/* EV5 counter 1 (PCNT5MUX bits 4..7; Cbox events in bits 51..53). */
#define PF5_MUX1_NON_ISSUE_CYCLES	0x00	/* non-issue cycles */
#define PF5_MUX1_SPLIT_ISSUE_CYCLES	0x10	/* split-issue cycles */
#define PF5_MUX1_PIPELINE_DRY		0x20	/* pipe-dry cycles */
#define PF5_MUX1_REPLAY_TRAP		0x30	/* replay traps */
#define PF5_MUX1_SINGLE_ISSUE_CYCLES	0x40	/* cycles issuing one */
#define PF5_MUX1_DUAL_ISSUE_CYCLES	0x50	/* cycles issuing two */
#define PF5_MUX1_TRIPLE_ISSUE_CYCLES	0x60	/* cycles issuing three */
#define PF5_MUX1_QUAD_ISSUE_CYCLES	0x70	/* cycles issuing four */
#define PF5_MUX1_FLOW_CHANGE		0x80	/* branches, jumps, returns */
#define PF5_MUX1_INTEGER_OPERATE	0x90	/* integer operations */
#define PF5_MUX1_C_FP_INSTRUCTIONS	0xA0	/* floating-point operations */
#define PF5_MUX1_C_LOAD_INSTRUCTIONS	0xB0	/* loads */
#define PF5_MUX1_C_STORE_INSTRUCTIONS	0xC0	/* stores */
#define PF5_MUX1_C_ICACHE_ACCESS	0xD0	/* I-cache accesses */
#define PF5_MUX1_C_DCACHE_ACCESS	0xE0	/* D-cache accesses */
#define PF5_MUX1_C_BCACHE_VICTIM	0x300000000000F0UL	/* B-cache victims */
/* EV5 and EV56 only: */
#define PF5_MUX1_C_SCACHE_ACCESS	0xF0			/* S-cache accesses */
#define PF5_MUX1_C_SCACHE_READ		0x80000000000F0UL	/* S-cache reads */
#define PF5_MUX1_C_SCACHE_WRITE		0x100000000000F0UL	/* S-cache writes */
#define PF5_MUX1_C_SCACHE_VICTIM	0x180000000000F0UL	/* S-cache victims */
#define PF5_MUX1_C_BCACHE_REF		0x280000000000F0UL	/* B-cache references */
#define PF5_MUX1_C_SYS_REQ		0x380000000000F0UL	/* system requests */
/* PCA56 only: */
#define PF5_MUX1_C_BCACHE_READ		0xF0			/* B-cache reads */
#define PF5_MUX1_C_BCACHE_DREAD_HIT	0x80000000000F0UL	/* B-cache D-read hits */
#define PF5_MUX1_C_BCACHE_DREAD_FILL	0x100000000000F0UL	/* B-cache D-read fills */
#define PF5_MUX1_C_BCACHE_WRITE		0x180000000000F0UL	/* B-cache writes */
#define PF5_MUX1_C_BCACHE_CLN_WRT_HIT	0x280000000000F0UL	/* clean write hits */
#define PF5_MUX1_C_READ_MISS_2		0x380000000000F0UL	/* read miss 2 launched */

/* EV5 counter 2 (PCNT5MUX bits 0..3; Cbox events in bits 54..56). */
#define PF5_MUX2_C_LONG_STALLS		0	/* long (> 12 cycle) stalls */
#define PF5_MUX2_C_PC_MISPR		2	/* PC mispredicts */
#define PF5_MUX2_C_BRANCH_MISPREDICTS	3	/* branch mispredicts */
#define PF5_MUX2_C_ICACHE_MISSES	4	/* I-cache / refill buffer misses */
#define PF5_MUX2_C_ITB_MISS		5	/* ITB misses */
#define PF5_MUX2_C_DCACHE_MISSES	6	/* D-cache load misses */
#define PF5_MUX2_C_DTB_MISS		7	/* DTB misses */
#define PF5_MUX2_C_LOADS_MERGED		8	/* loads merged in the MAF */
#define PF5_MUX2_C_LDU_REPLAYS		9	/* LDU replays */
#define PF5_MUX2_C_WB_MAF_FULL_REPLAYS	0xA	/* WB/MAF full replays */
#define PF5_MUX2_C_EXTERNAL		0xB	/* external perf_mon input */
#define PF5_MUX2_C_CYCLES		0xC	/* cycles */
#define PF5_MUX2_C_MEM_BARRIER		0xD	/* memory barriers */
#define PF5_MUX2_C_LOAD_LOCKED		0xE	/* load-locked instructions */
/* EV5 and EV56 only: */
#define PF5_MUX2_C_SCACHE_MISS		0xF			/* S-cache misses */
#define PF5_MUX2_C_SCACHE_READ_MISS	0x4000000000000FUL	/* S-cache read misses */
#define PF5_MUX2_C_SCACHE_WRITE_MISS	0x8000000000000FUL	/* S-cache write misses */
#define PF5_MUX2_C_SCACHE_SH_WRITE	0xC000000000000FUL	/* S-cache shared writes */
#define PF5_MUX2_C_SCACHE_WRITE		0x10000000000000FUL	/* S-cache writes */
#define PF5_MUX2_C_BCACHE_MISS		0x14000000000000FUL	/* B-cache misses */
#define PF5_MUX2_C_SYS_INV		0x18000000000000FUL	/* system invalidates */
#define PF5_MUX2_C_SYS_READ_REQ		0x1C000000000000FUL	/* system read requests */
/* PCA56 only: */
#define PF5_MUX2_C_BCACHE_DREAD		0xF			/* B-cache D-reads */
#define PF5_MUX2_C_BCACHE_READ_HIT	0x4000000000000FUL	/* B-cache read hits */
#define PF5_MUX2_C_BCACHE_READ_FILL	0x8000000000000FUL	/* B-cache read fills */
#define PF5_MUX2_C_BCACHE_WRITE_HIT	0xC000000000000FUL	/* B-cache write hits */
#define PF5_MUX2_C_BCACHE_WRITE_FILL	0x10000000000000FUL	/* B-cache write fills */
#define PF5_MUX2_C_SYS_READ_FLUSH_HIT	0x14000000000000FUL	/* system read/flush hits */
#define PF5_MUX2_C_SYS_READ_FLUSH_MISS	0x18000000000000FUL	/* system read/flush misses */
#define PF5_MUX2_C_READ_MISS_3		0x1C000000000000FUL	/* read miss 3 launched */

/* EV5 periods (PCNT5FREQ); the 256 periods need privilege. */
#define PF5_C0_INT_EVERY_256	0x300
#define PF5_C0_INT_EVERY_65536	0x200
#define PF5_C1_INT_EVERY_256	0xC0
#define PF5_C1_INT_EVERY_65536	0x80
#define PF5_C2_INT_EVERY_256	0x30
#define PF5_C2_INT_EVERY_16384	0x20

/* EV5 counter widths in bits. */
#define PF5_C0_WIDTH	16
#define PF5_C1_WIDTH	16
#define PF5_C2_WIDTH	14

/* EV5 counter select bits (PCNT5DISABLE ... and pmctrs_ev5_select). */
#define PF5_SEL_COUNTER_0	1
#define PF5_SEL_COUNTER_1	2
#define PF5_SEL_COUNTER_2	4

/* EV6 counter 0 (PCNT6MUX): */
#define PF6_MUX0_CYCLES			0x00	/* cycles */
#define PF6_MUX0_RET_INSTRUCTIONS	0x10	/* retired instructions */

/* EV6 counter 1 (PCNT6MUX): */
#define PF6_MUX1_CYCLES			0x0	/* cycles */
#define PF6_MUX1_RET_COND_BRANCHES	0x1	/* retired conditional branches */
#define PF6_MUX1_RET_BRANCH_MISPREDICTS	0x2	/* (counts cycles on real EV6) */
#define PF6_MUX1_RET_DTB_SINGLE_MISSES	0x3	/* retired DTB single misses */
#define PF6_MUX1_RET_DTB_DOUBLE_MISSES	0x4	/* retired DTB double misses */
#define PF6_MUX1_RET_ITB_MISSES		0x5	/* retired ITB misses */
#define PF6_MUX1_RET_UNALIGNED_TRAPS	0x6	/* retired unaligned traps */
#define PF6_MUX1_REPLAY_TRAP		0x7	/* replay traps */

/* EV6 periods (2^20 events per interrupt). */
#define PF6_C0_INT_EVERY_1048576	0x0
#define PF6_C1_INT_EVERY_1048576	0x1

/* EV6 counter select bits (PCNT6DISABLE ... and pmctrs_ev6_select). */
#define PF6_SEL_COUNTER_0	1
#define PF6_SEL_COUNTER_1	2

/* EV6 counter widths in bits. */
#define PF6_C0_WIDTH	20
#define PF6_C1_WIDTH	20

/* EV67 aggregate counter pairs (PCNT6MUX): counter 0 / counter 1. */
#define PF67_RET_INST_AND_CYCLES	0x00	/* retired instructions / cycles */
#define PF67_CYCLES_AND_UNDEFINED	0x04	/* cycles / undefined */
#define PF67_RET_INST_AND_BCACHE_MISS	0x08	/* retired instructions / B-cache misses */
#define PF67_CYCLES_AND_REPLAY_TRAPS	0x0C	/* cycles / Mbox replay traps */

/* EV67 profile-me mode (PCNT6MUX). */
#define PF67_PROFILE_ME_MODE		0x10	/* use profile-me mode */
#define PF67_CYCLES_AND_RET_DELAY	0x04	/* cycles / retire-pointer delay */

/* EV67 profile-me statistics, in PCNTSETITEMS bits 8..15 (PFM_PROFME_MODE_*). */
enum {
	PF67_PM_DISABLED,		/* must be first, value 0 */
	PF67_PM_ABORT,
	PF67_PM_ABORT_PER_RET,
	PF67_PM_ARITH_TRAP,
	PF67_PM_CBR_TAKEN,
	PF67_PM_CBR_TAKEN_PER_RET,
	PF67_PM_CYCLES,
	PF67_PM_CYCLES_PER_RET,
	PF67_PM_DELAY,
	PF67_PM_DELAY_PER_RET,
	PF67_PM_DSTREAM_FAULT,
	PF67_PM_DTB_MISS,
	PF67_PM_DTB_MISS_PER_RET,
	PF67_PM_DTB_MISS3,
	PF67_PM_DTB_MISS4,
	PF67_PM_EARLY_KILL,
	PF67_PM_EARLY_KILL_PER_RET,
	PF67_PM_FP_DISABLED,
	PF67_PM_FREQ,
	PF67_PM_ICACHE_MISS,
	PF67_PM_ICACHE_MISS_PER_RET,
	PF67_PM_ICACHE_PARITY,
	PF67_PM_INFLT_BCACHE_MISS,
	PF67_PM_INFLT_REPLAYS,
	PF67_PM_INFLT_RETIRES,
	PF67_PM_INTERRUPT,
	PF67_PM_ISTREAM_ACCVIO,
	PF67_PM_ITB_MISS,
	PF67_PM_LDST_ALIGN_TRAP,
	PF67_PM_LDST_ORDER_TRAP,
	PF67_PM_MAP_STALL,
	PF67_PM_MAP_STALL_PER_RET,
	PF67_PM_MCHK_TRAP,
	PF67_PM_MISPREDICT,
	PF67_PM_MISPREDICT_PER_RET,
	PF67_PM_MT_FPCR_TRAP,
	PF67_PM_OPCDEC_TRAP,
	PF67_PM_REPLAY_TRAP,
	PF67_PM_REPLAY_TRAP_PER_RET,
	PF67_PM_RESET,
	PF67_PM_RETIRE,
	PF67_PM_TRAP,
	PF67_PM_TRAP_PER_RET,
	PF67_PM_VALID
};

/* EV67 I_STAT register image; bit-fields from bit 0. */
typedef union ev67_istat_reg {
	unsigned long	qval;
	struct {
		_PFM_EXT unsigned long	res_0:29;	/* reserved */
		_PFM_EXT unsigned long	par:1;		/* I-cache parity error */
		_PFM_EXT unsigned long	ovr:3;		/* counter 0 overcount */
		_PFM_EXT unsigned long	icm:1;		/* I-cache miss */
		_PFM_EXT unsigned long	ttype:4;	/* trap type */
		_PFM_EXT unsigned long	lso:1;		/* load-store order trap */
		_PFM_EXT unsigned long	trp:1;		/* trap */
		_PFM_EXT unsigned long	mis:1;		/* mispredict trap (with trp) */
		_PFM_EXT unsigned long	res_1:23;	/* reserved */
	} fields;
} ev67_istat_reg_t;

/* EV67 PCTR_CTL register image; bit-fields from bit 0. */
typedef union ev67_pctr_ctl_reg {
	unsigned long	qval;
	struct {
		_PFM_EXT unsigned long	tak:1;		/* conditional branch taken */
		_PFM_EXT unsigned long	val:1;		/* instruction valid */
		_PFM_EXT unsigned long	sl1:2;		/* counter 1 selector */
		_PFM_EXT unsigned long	sl0:1;		/* counter 0 selector */
		_PFM_EXT unsigned long	res_0:1;	/* reserved */
		_PFM_EXT unsigned long	pctr1:20;	/* counter 1 */
		_PFM_EXT unsigned long	kb4map:1;	/* killed during or before map */
		_PFM_EXT unsigned long	mstall:1;	/* stalled between fetch and map */
		_PFM_EXT unsigned long	pctr0:20;	/* counter 0 */
		_PFM_EXT unsigned long	sext:16;	/* sign extension of pctr0 */
	} fields;
} ev67_pctr_ctl_reg_t;

/*
 * pfmd extension: PCNTGETINFO.  Ports call it where Tru64 code called
 * getsysinfo(GSI_PROC_TYPE); legacy code never needs it.
 */
#define PFM_INFO_VERSION	1	/* pi_version of this layout */
#define PFM_INFO_MAX_COUNTERS	3	/* length of the per-counter arrays */

/* pi_family: the emulated family, i.e. which ioctl family answers. */
#define PFM_FAMILY_EV4		0	/* PCNTSETMUX, PCNTGETCNT */
#define PFM_FAMILY_EV5		1	/* PCNT5* */
#define PFM_FAMILY_EV6		2	/* PCNT6* */

/* pi_impl: the emulated implementation. */
#define PFM_IMPL_EV4		0	/* 21064 */
#define PFM_IMPL_EV45		1	/* 21064A */
#define PFM_IMPL_EV5		2	/* 21164 */
#define PFM_IMPL_EV56		3	/* 21164A */
#define PFM_IMPL_PCA56		4	/* 21164PC */
#define PFM_IMPL_EV6		5	/* 21264 */
#define PFM_IMPL_EV67		6	/* 21264A */

/* pi_open_mode: how this file was opened. */
#define PFM_MODE_ONE		1	/* PCNTOPENONE */
#define PFM_MODE_EACH		2	/* PCNTOPENEACH */
#define PFM_MODE_ALL		3	/* PCNTOPENALL (or no mode bits) */

/* pi_fidelity[]: how the host counts each counter's selected event. */
#define PFM_FIDELITY_NONE		0	/* no event selected / counter absent */
#define PFM_FIDELITY_EXACT		1	/* same meaning as on the chip */
#define PFM_FIDELITY_APPROX		2	/* documented formula over host events */
#define PFM_FIDELITY_UNAVAILABLE	3	/* the host cannot count it */

/* pi_flags bits. */
#define PFM_INFO_SHARED		1	/* host counters shared with another tool (scaled) */
#define PFM_INFO_LOGSELECT	2	/* PCNTLOGSELECT in force (else LOGALL) */
#define PFM_INFO_ENABLED	4	/* counter interrupts enabled */
#define PFM_INFO_USER_ONLY	8	/* only user mode is counted for this caller */
#define PFM_INFO_URING		16	/* served over a FUSE io_uring queue of the caller's CPU */

/* PCNTGETINFO result. */
struct pfm_info {
	unsigned long	pi_version;		/* PFM_INFO_VERSION */
	unsigned long	pi_family;		/* PFM_FAMILY_* */
	unsigned long	pi_impl;		/* PFM_IMPL_* */
	unsigned long	pi_ncpus;		/* CPUs: array length for PCNTOPENEACH */
	unsigned long	pi_ncounters;		/* counters of the family (2 or 3) */
	unsigned long	pi_open_mode;		/* PFM_MODE_* of this open */
	unsigned long	pi_items;		/* selected items (PCNTSETITEMS word) */
	unsigned long	pi_flags;		/* PFM_INFO_* */
	unsigned long	pi_cpu_khz;		/* nominal clock pr_cycle is scaled to */
	unsigned long	pi_width[PFM_INFO_MAX_COUNTERS];	/* counter widths, bits */
	unsigned long	pi_fidelity[PFM_INFO_MAX_COUNTERS];	/* PFM_FIDELITY_* */
	unsigned long	pi_period[PFM_INFO_MAX_COUNTERS];	/* events per interrupt */
	unsigned long	pi_sample_period[PFM_INFO_MAX_COUNTERS]; /* Alpha events per sample (period x weight), 0 if off or never sampled */
	unsigned long	pi_lost_samples;	/* samples the host lost */
	unsigned long	pi_throttled;		/* times the host throttled sampling */
	unsigned long	pi_online;		/* CPUs online now */
	unsigned long	pi_reopened;		/* host events opened anew on PME threads already followed */
	unsigned long	pi_reserved[6];		/* zero */
};

#endif /* _SYS_PFCNTR_H_ */
