/* SPDX-License-Identifier: GPL-2.0 */
/*
 * arch.bpf.h: the architecture the object is built for (agent/build.rs passes
 * -D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64 from the Rust target), and the one type both
 * architectures' headers fill.
 */
#ifndef PA_ARCH_BPF_H
#define PA_ARCH_BPF_H

#include <linux/types.h>

/* The user registers a task saved entering the kernel, what the programs use of them: the
 * portable build's copy (the default build reads bpf_task_pt_regs' typed pointer in place,
 * through the PA_PT_* accessors). */
struct pa_user_regs {
	__u64 fp;
	/* the first two arguments of the system call, and its number (-1: none) */
	__u64 arg1;
	__u64 arg0;
	long syscall;
	__u64 ip;
	__u64 sp;
};

#if defined(__TARGET_ARCH_x86)
#include "arch_x86.bpf.h"
#elif defined(__TARGET_ARCH_arm64)
#include "arch_arm64.bpf.h"
#else
#error "build with -D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64"
#endif

#endif /* PA_ARCH_BPF_H */
