"""Why a rank failed, read from its failure record: its own error, a hard signal, or a peer that went away; and a
program's stderr tail with its error first.

A rank that lost a peer fails too, often within the same millisecond: causes sort before consequences, and a
PyTorchJob's rank that only lost a peer exits with a retryable code (core/kinds.py, PodExit).
"""

from __future__ import annotations

import os
import re
from typing import Any

from hpcqa import fsutil
from hpcqa.record.jobfiles.failure import Failure
from hpcqa.record.jobfiles.fields import Damaged

HARD_SIGNALS = ("SIGKILL", "SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE")
PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "remote worker",
    "broken pipe",
    "gloo/transport",
    # c10d's TCPStore when its host (rank 0) went away first, e.g. after its own rendezvous timeout:
    # "DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server
    # shutdown or crash?" (torch 2.13, seen with 2 of 3 gloo ranks started)
    "connection was likely closed",
)
# "timed out" alone is also a hub download's or the program's own timeout: a peer only when a collective or the
# rendezvous store timed out (gloo: "Timed out waiting ... for recv", c10d: "DistStoreError ... timed out")
TIMED_OUT_IN = (
    "gloo",
    "c10d",
    "diststore",
    "collective",
    "watchdog",
    "recv",
    "send",
    "allreduce",
    "all_reduce",
    "barrier",
    "process group",
    "processgroup",
    "distnetwork",
    "client socket",
)
# before the process group forms, a peer that never arrived reads (torch 2.13, seen with 2 of 3 gloo ranks started):
#   the waiting ranks   "DistStoreError: wait timeout after 8000ms, keys: /default_pg/0//cpu//0/0"
#   the store's host    "DistStoreError: Timed out after 9 seconds waiting for clients. 2/3 clients joined."
#   an unreachable host "DistNetworkError: The client socket has timed out after 8000ms while trying to connect to"
#   hpcqa's watchdog    "RankError: the rendezvous at HOST:PORT did not complete in N s"
RENDEZVOUS = (("diststore", "wait timeout"), ("rendezvous at", "did not complete"))


def names_peer_loss(line: str) -> bool:
    """An error line that says a peer went away, or never arrived: a collective or the rendezvous waited for one
    past its timeout."""
    low = line.lower()
    return (
        any(p in low for p in PEER_LOST)
        or ("timed out" in low and any(m in low for m in TIMED_OUT_IN))
        or any(a in low and b in low for a, b in RENDEZVOUS)
    )


def lost_peer(record: Failure | Damaged | None) -> bool:
    """A rank's failure record says it failed because a peer went away (not of its own error)."""
    return isinstance(record, Failure) and consequence(record.error) == 2


def lost_peer_in_log(path: Any, max_bytes: int = 64 << 10) -> bool:
    """A rank that left no failure record (it died outside the trainer's handler: in a collective's C++ error path,
    at import, in a library's own exit) but whose log ends in an error that names a peer going away. The error
    line read is the last one that names an exception (error_first), in the log's last `max_bytes`."""
    try:
        with os.fdopen(fsutil.open_regular(path), "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - max_bytes))
            tail = [
                RANK_PREFIX.sub("", line)
                for line in f.read().decode("utf-8", "replace").splitlines()[-200:]
            ]
    except OSError:
        return False
    first = error_first(tail)
    return (
        bool(first) and EXCEPTION.match(first[0].strip()) is not None and names_peer_loss(first[0])
    )


def by_an_interrupt(error: str) -> bool:
    """A rank's end that a cancel or an interrupt causes: Ctrl-C / SIGINT (KeyboardInterrupt), or killed by
    SIGINT/TERM/KILL."""
    return error.startswith("KeyboardInterrupt") or any(
        f"killed by {s}" in error for s in ("SIGINT", "SIGTERM", "SIGKILL")
    )


def consequence(error: str) -> int:
    """A rank's error: 0: died of a hard signal (the OOM killer, kill -9, a crash); 1: its own error; 2: lost a
    peer."""
    if any(f"killed by {s}" in error for s in HARD_SIGNALS):
        return 0
    return 2 if names_peer_loss(error) else 1


# How much earlier than its record a hard signal may have struck: a rank killed outright is recorded when its wrapper
# sees it gone, a moment after; its peers' own errors within that moment are its consequences.
HARD_SIGNAL_LEAD_S = 1.0


def cause_order(record: Failure) -> tuple[bool, float, int]:
    """Sort key of failure records, the likely cause first. A rank that only lost a peer is never the cause. Among
    the rest the earliest is: a hard signal counts from a second before its record (the OOM killer's victim is
    found after its peers' first errors), but a rank SIGKILLed seconds after another rank's own error was killed by
    the teardown that error began (Slurm ends the step: SIGTERM, then SIGKILL after KillWait), not the reverse."""
    kind = consequence(record.error)
    return (
        kind == 2,
        (record.time or 0.0) - (HARD_SIGNAL_LEAD_S if kind == 0 else 0.0),
        record.rank,
    )


RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")  # torch's prefix on a rank's uncaught error lines
CARETS = re.compile(r"^[\s^~]+$")  # Python 3.11's markers under a traceback's source line
EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b(?::|$)"
)


def error_first(tail: list[str]) -> list[str]:
    """A program's stderr tail as a person reads it: the exception line first (the last line that names one), then
    the rest in order; Python's caret-only marker lines left out. Empty lines are dropped too."""
    lines = [str(x) for x in tail if str(x).strip() and not CARETS.match(str(x))]
    at = next((i for i in range(len(lines) - 1, -1, -1) if EXCEPTION.match(lines[i].strip())), None)
    return lines if at is None else [lines[at], *lines[:at], *lines[at + 1 :]]
