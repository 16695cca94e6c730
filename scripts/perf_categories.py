#!/usr/bin/env python3
"""A `perf record` profile's samples grouped by kind of work, for scripts/profile.sh.

    python3 scripts/perf_categories.py PERF_DATA [SECONDS]

Prints each group's share of the samples and, given the recording's length, the CPU time it
stands for per second of wall time. A symbol goes to the first group whose pattern it matches;
kernel symbols ([k]) only to the kernel groups.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys

GROUPS = [
    ("kernel: scheduling, wake-ups, futex", True,
     r"finish_task_switch|_raw_spin_unlock|schedule|futex|try_to_wake|enqueue|dequeue|update_curr|"
     r"pick_next|select_task|psi_|ttwu|wake_up|__switch_to|sched"),
    ("kernel: TCP/IP, sockets, copies", True,
     r"tcp|inet|ip_|skb|sock|dev_|net_|__netif|loopback|softirq|napi|nf_|_copy_to_iter|"
     r"_copy_from_iter|copy_user|sk_|ipv4|rcv"),
    ("kernel: epoll, syscall entry and exit", True,
     r"ep_|epoll|syscall|entry_|irqentry|do_writev|vfs_|fdget|__fget|writev|readv|ksys|"
     r"rw_verify|fsnotify|security_|__x64|sys_|exit_to_user"),
    ("kernel: other", True, r"."),
    ("allocation (mimalloc)", False, r"\bmi_|_mi_|__rust_alloc|__rust_dealloc|raw_vec"),
    ("memcpy, memmove", False, r"memmove|memcpy|memset|memcmp"),
    ("JSON (serde_json)", False, r"serde_json|serde::"),
    ("HTTP (hyper, http, http-body)", False, r"hyper|h2::|http::|httparse|http_body"),
    ("tokio: scheduler, wakers, I/O driver, clock", False,
     r"tokio|atomic_waker|mio::|futures_|Notif|parking|std::sys::sync|condvar|clock_gettime|vdso|"
     r"epoll_wait|\bsyscall\b|Instant"),
    ("tracing (span enter and exit)", False, r"tracing"),
    ("relay: upstream", False, r"responses_relay::upstream"),
    ("relay: transcode, fold, log, emitter, SSE", False,
     r"responses_relay::(run|api|eventlog|http::sse)"),
    ("relay: other", False, r"responses_relay"),
    ("other (async-stream, bytes, fmt, ...)", False, r"."),
]


def main() -> None:
    data = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else None
    report = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio"],
        capture_output=True, text=True, check=True,
    ).stdout
    samples = re.search(r"Event count \(approx\.\): (\d+)", report)
    cpu_s = int(samples.group(1)) / 1e9 if samples else None
    shares: collections.Counter[str] = collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4)
        for name, kernel, pattern in GROUPS:
            if kernel == (kind == "k") and re.search(pattern, f"{dso} {sym}"):
                shares[name] += pct
                break
    for name, pct in shares.most_common():
        per_s = f"  {cpu_s * pct / 100 / seconds * 1000:7.1f} ms CPU per s" if cpu_s and seconds else ""
        print(f"{pct:6.1f}%{per_s}  {name}")
    if cpu_s and seconds:
        print(f"total {cpu_s / seconds * 1000:.0f} ms CPU per s of wall time")


if __name__ == "__main__":
    main()
