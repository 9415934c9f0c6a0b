"""What a rank's supervisor does in its child before the exec: tie the child's life to its own. Standard library
only (the rank wrapper runs before any heavy import)."""

from __future__ import annotations

import ctypes
import os
import platform
import signal

PR_SET_PDEATHSIG = 1


def die_with(parent: int) -> None:
    """In the rank's child, before exec: SIGKILL when the wrapper dies. A launcher that ends a rank with SIGKILL
    (a pod script's kill-on-bad-exit, mpirun's cleanup over ssh) reaches the wrapper, not its child; without
    this the child -- waiting at the rendezvous, say -- outlived it, adopted by init."""
    if platform.system() == "Linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the wrapper died before the line above
        os._exit(137)
