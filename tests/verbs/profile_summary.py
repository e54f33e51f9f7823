#!/usr/bin/env python3
"""profile_summary.py - busy samples of a profile_guest.sh recording, by
where they entered the kernel (system call, page fault, interrupt, kernel
thread) or user space. Reads `perf script -F comm,tid,ip,sym` of a record
made with PERF_G=-g (call chains) on stdin:

  perf script -i OUT/prof/pp.data --kallsyms OUT/prof/kallsyms \\
      -F comm,tid,ip,sym | python3 tests/verbs/profile_summary.py

Under QEMU TCG the cpu-clock sample rate follows emulated work, not wall
time: compare sample counts of runs that moved the same bytes, not
percentages of idle.
"""
import collections
import sys


def classify(stack):
    """stack: [header, frame (callee first), ...] -> category string."""
    comm = stack[0].split()[0]
    syms = [f.split()[1] if len(f.split()) > 1 else "?" for f in stack[1:]]
    if any("native_safe_halt" in s for s in syms[:2]):
        return None  # idle
    for i, s in enumerate(syms):
        if s.startswith("do_syscall_64"):
            for s2 in reversed(syms[:i]):
                if s2.startswith(("__x64_sys_", "ksys_", "__do_sys_")):
                    return "syscall " + s2
            return "syscall " + (syms[i - 1] if i > 0 else "?")
        if s.startswith("asm_exc_page_fault"):
            return "page fault"
        if s.startswith(("asm_sysvec_", "asm_common_interrupt")):
            return "interrupt (" + comm + ")"
        if s.startswith("ret_from_fork"):
            return "kernel thread " + comm
    return "other (" + comm + ")"


def main():
    counts = collections.Counter()
    total = idle = 0
    stack = []
    for line in list(sys.stdin) + [""]:
        if line.strip():
            stack.append(line.strip())
            continue
        if stack:
            total += 1
            c = classify(stack)
            if c is None:
                idle += 1
            else:
                counts[c] += 1
        stack = []
    busy = total - idle
    print(f"samples {total} idle {idle} busy {busy}")
    for k, v in counts.most_common(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
        print(f"{v:6d} {100.0 * v / max(busy, 1):5.1f}%  {k}")


if __name__ == "__main__":
    main()
