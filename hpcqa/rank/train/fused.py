"""The fused CPU attention for training (model.attention = "fused", and "auto"'s choice where it loads): the passes
between attention's two matmuls -- scale, padding mask, softmax, dropout -- in one C++ pass per row, forward and
backward, the dropout mask drawn from a counter-based hash so the backward draws it again instead of storing it
(csrc/fused_attention.cpp says how).

Shipping: the kernel is compiled on the node that first uses it (scripts/install.sh builds it ahead), with torch's own
extension builder (ninja and a C++ compiler), for the node's vector ISA (AVX-512, AVX2 or plain), into the per-user
cache (caches.kernel_dir), once per source, torch version, ISA and Python: a node without a compiler loads what a
node of its kind built. Concurrent ranks take a lock (flock: released by the kernel when a holder dies) and one
builds, in a temporary folder renamed into place whole; the temporary folders of a build killed mid-way are cleared by
the next. A cached library is loaded only when it is a regular file of this user's, writable by nobody else, whose
SHA-256 is the one its build recorded. A damaged build (the digest differs or is missing) in folders only this user
writes is built again where a compiler is; a foreign or unsafe one is never built into. Where it cannot be built or
loaded (no compiler, an unsafe cache, a failed build), `load` says why, once, and the caller runs hpcqa's unfused
attention (recorded in results.json).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

import torch
from torch.autograd.function import once_differentiable

from hpcqa import fsutil

try:  # torch's builder runs the `ninja` on PATH: the package's own, where a venv's bin is not on PATH
    import ninja
except ImportError:  # a node without it loads what another built, or says why not
    ninja = None  # type: ignore[assignment]
from hpcqa.record import caches

SOURCE = Path(__file__).resolve().parent / "csrc" / "fused_attention.cpp"
LIB = "hpcqa_fused.so"
MAX_LIB = 64 << 20
ISAS: tuple[
    tuple[str, set[str], list[str], list[str]], ...
] = (  # (name, cpuinfo flags it needs, compiler flags, ATen's vector macros)
    (
        "avx512",
        {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma", "avx2"},
        ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mavx2", "-mf16c"],
        ["-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512"],
    ),
    (
        "avx2",
        {"avx2", "fma", "f16c"},
        ["-mavx2", "-mfma", "-mf16c"],
        ["-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"],
    ),
    ("plain", set(), [], ["-DCPU_CAPABILITY=DEFAULT"]),
)

_state: dict[str, Any] = {}


def isa(flags: set[str]) -> tuple[str, list[str]]:
    """The widest vector ISA the node's CPU flags allow -> (its name, the compiler flags)."""
    for name, needs, cflags, macros in ISAS:
        if needs <= flags:
            return name, cflags + macros
    raise AssertionError("the plain entry needs nothing")


def build_key(source: bytes, isa_name: str) -> str:
    """What decides the library: its source, torch's version (its ABI), the ISA and Python. Not the compiler: a
    node without one loads what a node with one built."""
    h = hashlib.sha256(source)
    for part in (torch.__version__, isa_name, sys.version.split()[0]):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:20]


def _trusted(path: Path) -> str | None:
    """None when `path` is a regular file of this user's that nobody else may write, else why not."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return fsutil.failure(e, path)
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return (
            f"{path} is not this user's alone (owner {st.st_uid}, mode {stat.filemode(st.st_mode)})"
        )
    return None


def _private(folder: Path) -> str | None:
    """None when nobody but this user can write into `folder` (so the library checked is the one loaded)."""
    try:
        st = os.stat(folder)
    except OSError as e:
        return fsutil.failure(e, folder)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return f"{folder} is not this user's alone (owner {st.st_uid}, mode {stat.filemode(st.st_mode)})"
    return None


def _verified(folder: Path) -> str | None:
    """None when folder's library is the one its build recorded, in folders only this user writes, else why not."""
    lib, digest = folder / LIB, folder / (LIB + ".sha256")
    why = _private(folder.parent) or _private(folder) or _trusted(lib) or _trusted(digest)
    if why:
        return why
    try:
        want = fsutil.read_text(digest, 200).strip()
        got = hashlib.sha256(fsutil.read_bytes(lib, MAX_LIB)).hexdigest()
    except OSError as e:
        return fsutil.failure(e)
    if got != want:
        return f"{lib} is not what was built (SHA-256 differs): damaged"
    return None


def _rebuildable(folder: Path) -> bool:
    """May a damaged `folder` be built again in place? Only a real folder of this user's that nobody else may write,
    in a cache folder the same, whose library and digest are each missing or this user's alone: a foreign or unsafe
    entry is refused as it is, never built into (what others could write, they could swap after the check)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or _private(folder.parent) or _private(folder):
        return False
    files = (folder / LIB, folder / (LIB + ".sha256"))
    return all(not os.path.lexists(p) or _trusted(p) is None for p in files)


def _temp_prefix(folder: Path) -> str:
    """A build's temporary folders beside `folder` (its build, a damaged build set aside): named by their maker."""
    return f".{folder.name}.build-{os.getpid()}@{socket.gethostname()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _clear_stale(folder: Path, locked_at: float) -> list[str]:
    """Under the build lock: remove the temporary folders earlier builds of `folder` left behind (a build killed
    mid-way, SIGKILL, runs no clean-up) -- this user's, made before the lock was taken, by a process that is gone
    (of this host: not running; of another: it holds no lock, so builds nothing). -> the names removed."""
    head, here = f".{folder.name}.build-", socket.gethostname()
    removed: list[str] = []
    for p in sorted(folder.parent.glob(f"{head}*")):
        pid, _, host = p.name[len(head) :].rsplit(".", 1)[0].partition("@")
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mtime >= locked_at:
            continue
        if host == here and (not pid.isdigit() or _alive(int(pid))):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p.name)
    return removed


def _load_verified(folder: Path, isa_name: str) -> tuple[bool, str]:
    why = _verified(folder)
    if why:
        return False, why
    try:
        torch.ops.load_library(str(folder / LIB))
    except (OSError, RuntimeError) as e:  # built against another glibc/libstdc++, or not a library
        return False, f"{folder / LIB} does not load ({e}); remove {folder} to build it again"
    if not registered():
        return False, f"{folder / LIB} loaded but defines no fused attention; remove {folder}"
    return True, f"the fused kernel ({isa_name}, {folder})"


def _build(folder: Path, cflags: list[str], name: str) -> None:
    """Compile the kernel into `folder` (made whole: built aside, renamed; a damaged build there set aside first)."""
    from torch.utils import cpp_extension

    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(folder), dir=folder.parent))
    old: Path | None = None
    path = os.environ.get("PATH", "")
    try:
        os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, path]) if ninja else path
        cpp_extension.load(
            name=name,
            sources=[str(SOURCE)],
            extra_cflags=["-O3", *cflags],
            build_directory=str(tmp),
            is_python_module=False,
            verbose=False,
        )
        data = fsutil.read_bytes(tmp / f"{name}.so", MAX_LIB)
        fsutil.atomic_write_bytes(tmp / LIB, data, mode=0o700)
        fsutil.atomic_write_text(tmp / (LIB + ".sha256"), hashlib.sha256(data).hexdigest() + "\n")
        for p in tmp.iterdir():
            if p.name not in (LIB, LIB + ".sha256"):
                (shutil.rmtree if p.is_dir() else os.unlink)(p)
        os.chmod(tmp, 0o700)
        if os.path.lexists(folder):  # a damaged build (_rebuildable): set aside, removed below
            old = Path(tempfile.mkdtemp(prefix=_temp_prefix(folder), dir=folder.parent))
            os.rename(folder, old)
        os.rename(tmp, folder)
    finally:
        os.environ["PATH"] = path
        for left in (tmp, old):
            if left is not None:
                shutil.rmtree(left, ignore_errors=True)


def _first_error(e: Exception) -> str:
    lines = str(e).splitlines() or [type(e).__name__]
    return next(
        (ln.strip() for ln in lines if " error" in ln or ln.startswith("error")), lines[-1]
    )[:300]


def kernel_folder(
    flags: set[str], env: Mapping[str, str] | None = None
) -> tuple[str, list[str], Path]:
    """-> (the ISA it is built for, the compiler flags, the cache folder of that build)."""
    isa_name, cflags = isa(flags)
    source = fsutil.read_bytes(SOURCE, 1 << 20)
    return isa_name, cflags, caches.kernel_dir(env) / f"fused-{build_key(source, isa_name)}"


def _load(flags: set[str], env: Mapping[str, str] | None) -> tuple[bool, str]:
    if os.environ.get("HPCQA_FUSED") == "0":
        return False, "HPCQA_FUSED=0"
    if registered():
        return True, "the fused kernel (already loaded)"
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    try:
        isa_name, cflags, folder = kernel_folder(flags, env)
    except OSError as e:
        return False, f"its source: {fsutil.failure(e)}"
    damage = _verified(folder) if os.path.lexists(folder) or compiler is None else None
    if compiler is None or (os.path.lexists(folder) and not (damage and _rebuildable(folder))):
        ok, why = _load_verified(folder, isa_name)  # a build to load, or what is wrong with it
        if not ok and compiler is None:
            return False, f"no C++ compiler on this node to build it ({why})"
        return ok, why
    if ninja is None:
        return False, "ninja is not installed to build it (pip install ninja)" + (
            f"; {damage}" if damage else ""
        )
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    unsafe = _private(folder.parent)
    if unsafe:
        return False, f"not built into a folder others can write: {unsafe}"
    return _build_locked(folder, isa_name, cflags)


def _build_locked(folder: Path, isa_name: str, cflags: list[str]) -> tuple[bool, str]:
    """Build `folder` under its lock, once: ranks that start together wait for the one building and load its build.
    A damaged build of ours there is built again; the temporary folders of a build killed mid-way are cleared."""
    key = folder.name.removeprefix("fused-")
    with open(folder.parent / f".fused-{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _clear_stale(folder, time.time())
        damage = _verified(folder) if os.path.lexists(folder) else None
        if os.path.lexists(folder) and not (damage and _rebuildable(folder)):
            return _load_verified(folder, isa_name)  # another rank built (or rebuilt) it meanwhile
        try:
            _build(folder, cflags, f"hpcqa_fused_{key}")  # the build loads what it built
        except Exception as e:  # a compiler error, a full disk: the unfused path runs
            return False, f"building it failed: {_first_error(e)}" + (
                f" (building it again: {damage})" if damage else ""
            )
    what = f"rebuilt into {folder}: {damage}" if damage else f"built into {folder}"
    return True, f"the fused kernel ({isa_name}, {what})"


def registered() -> bool:
    """Are the kernel's ops in this process already? (Loading a second copy aborts the process.)"""
    try:
        torch.ops.hpcqa_fused.softmax_dropout_fwd
    except (AttributeError, RuntimeError):
        return False
    return True


def load(flags: set[str], env: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Build (once) and load the kernel. -> (loaded, what ran or why not). Said once per process."""
    if "result" not in _state:
        try:
            _state["result"] = _load(flags, env)
        except OSError as e:  # the cache folder is a file, unwritable, full: the unfused path runs
            _state["result"] = (False, f"its cache: {fsutil.failure(e)}")
        if not _state["result"][0]:
            sys.stderr.write(f"hpcqa: the fused attention is not used: {_state['result'][1]}\n")
    return _state["result"]


class FusedAttention(torch.autograd.Function):
    """q, k, v [batch, heads, seq, head_dim] -> dropout(softmax(scale q k^T, mask)) v, in the inputs' dtype."""

    @staticmethod
    def forward(ctx: Any, q, k, v, mask, scale: float, p: float):  # type: ignore[override]
        seed = int(torch.randint(-(2**63), 2**63 - 1, (1,), dtype=torch.int64).item())
        scores = torch.matmul(q, k.transpose(-1, -2))
        dropped = torch.ops.hpcqa_fused.softmax_dropout_fwd(scores, mask, scale, p, seed)
        ctx.save_for_backward(q, k, v, scores, dropped)
        ctx.scale, ctx.p, ctx.seed = scale, p, seed
        return torch.matmul(dropped, v)

    @staticmethod
    @once_differentiable  # the backward's own backward is not written: an error, never wrong numbers
    def backward(ctx: Any, grad):  # type: ignore[override]
        q, k, v, probs, dropped = ctx.saved_tensors
        grad = grad.contiguous()
        d_dropped = torch.matmul(grad, v.transpose(-1, -2))
        dv = torch.matmul(dropped.transpose(-1, -2), grad)
        torch.ops.hpcqa_fused.softmax_dropout_bwd(d_dropped, probs, ctx.scale, ctx.p, ctx.seed)
        dq = torch.matmul(d_dropped, k)
        dk = torch.matmul(d_dropped.transpose(-1, -2), q)
        return dq, dk, dv, None, None, None


class FusedDropout(torch.autograd.Function):
    """x * keep / keep_probability, the mask a hash of (seed, index): drawn again in the backward, never stored."""

    @staticmethod
    def forward(ctx: Any, x, p: float):  # type: ignore[override]
        ctx.seed = int(torch.randint(-(2**63), 2**63 - 1, (1,), dtype=torch.int64).item())
        ctx.p = p
        return torch.ops.hpcqa_fused.dropout(x.contiguous(), p, ctx.seed)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad):  # type: ignore[override]
        return torch.ops.hpcqa_fused.dropout(grad.contiguous(), ctx.p, ctx.seed), None


def fused_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """The hidden dropout in one pass each way (load() must have succeeded; float32 or bfloat16 on the CPU)."""
    _probability(p)
    return FusedDropout.apply(x, p)


def _probability(p: float) -> None:
    if not 0.0 <= p <= 1.0:  # NaN too, as torch's dropout
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def uncovered(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> str | None:
    """Why the fused kernel cannot take these (hpcqa's unfused attention runs them), or None when it can."""
    if q.dim() != 4 or not q.shape[:2] == k.shape[:2] == v.shape[:2]:
        return "q, k and v differ in batch or heads (grouped queries)"
    if not q.dtype == k.dtype == v.dtype or q.dtype not in (torch.float32, torch.bfloat16):
        return f"dtype {q.dtype} (float32 and bfloat16 only)"
    if q.device.type != "cpu":
        return f"device {q.device}"
    if mask is not None and (mask.dtype != torch.bool or mask.dim() != 4):
        return f"a {mask.dim()}-d {mask.dtype} mask (a 4-d bool one only)"
    return None


def covers(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Can the fused kernel take these? When it cannot, says why once per process (results.json still names the
    fused attention: these calls run hpcqa's)."""
    why = uncovered(q, k, v, mask)
    if why is not None and why not in _state.setdefault("uncovered", set()):
        _state["uncovered"].add(why)
        sys.stderr.write(
            f"hpcqa: the fused attention does not cover {why}: hpcqa's attention runs those calls\n"
        )
    return why is None


def fused_attention(q, k, v, mask, scale: float, p: float) -> torch.Tensor:
    """The fused attention (load() must have succeeded). mask: bool, True = attend, broadcastable to
    [batch, heads, q, k], or None."""
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError("fused attention takes a bool mask")
    _probability(p)
    return FusedAttention.apply(q, k, v, mask, scale, p)


if (
    __name__ == "__main__"
):  # scripts/install.sh builds it ahead of the first job: python -m hpcqa.rank.train.fused
    from hpcqa.rank.train.facts import cpu_flags

    loaded, what = load(cpu_flags())
    print(("ready: " if loaded else "not used: ") + what)
    raise SystemExit(0 if loaded else 1)
