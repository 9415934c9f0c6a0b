"""Run a command on a real pseudo-terminal of a given size, as a user's terminal would show it.

The console tests use this instead of a pipe: rich (and the CLI) decide width, colour and progress bars from the
terminal, and a pipe would show another view."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.conftest import as_foreground

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def run(
    args: list[str],
    cols: int = 80,
    rows: int = 60,
    env: dict | None = None,
    cwd: str | Path | None = None,
    timeout: float = 600,
    interrupt_after: float | None = None,
) -> tuple[int, str]:
    """(exit code, the screen's text: ANSI sequences removed, carriage-return rewrites resolved per line).
    interrupt_after: press Ctrl-C (SIGINT to the command) after that many seconds."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLUMNS", "LINES", "NO_COLOR", "CI")
        and not k.startswith(("SLURM_", "SUBMITIT_"))
    }
    full_env.update({"TERM": "xterm-256color", **(env or {})})
    proc = subprocess.Popen(
        args,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=as_foreground,
    )
    os.close(slave)
    chunks = []
    start = time.time()
    deadline = start + timeout
    while True:
        if (
            interrupt_after is not None
            and time.time() - start > interrupt_after
            and proc.poll() is None
        ):
            proc.send_signal(2)
            interrupt_after = None
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the slave side closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
        if time.time() > deadline:
            proc.kill()
            raise TimeoutError(" ".join(args))
    os.close(master)
    code = proc.wait()
    return code, screen(b"".join(chunks).decode("utf-8", "replace"))


def screen(raw: str) -> str:
    """What stays on the screen: a line rewritten with \\r (a progress bar) keeps its last state."""
    text = ANSI.sub("", raw).replace("\r\n", "\n")
    return "\n".join(line.split("\r")[-1] for line in text.split("\n"))


def hpcqa(*args: str, **kw) -> tuple[int, str]:
    return run([sys.executable, "-m", "hpcqa", *args], **kw)
