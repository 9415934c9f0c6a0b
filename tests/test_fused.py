"""The fused CPU attention (hpcqa.rank.train.fused and csrc/fused_attention.cpp): checked against the unfused
reference (values without dropout, gradients against autograd and by finite differences, with and without dropout),
its dropout masks' statistics, and how it is built, cached, verified and refused (in processes of their own: a
library of ops loads once per process)."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hpcqa.rank.train import fused
from hpcqa.rank.train.facts import cpu_flags
from tests.conftest import tiny_bert

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
def kernel():
    loaded, what = fused.load(cpu_flags())
    assert loaded, (
        what
    )  # this machine has a compiler (CI installs build-essential): the kernel must build


def _inputs(b, h, s, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=g).to(dtype).requires_grad_() for _ in range(3))
    lens = torch.randint(1, s + 1, (b,), generator=g)
    lens[0] = s
    mask = (torch.arange(s)[None, :] < lens[:, None])[:, None, None, :].expand(b, 1, s, s)
    return q, k, v, mask


def _reference(q, k, v, mask, scale):
    """The unfused attention in fp32: masked_fill with the dtype's lowest, softmax, product."""
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, torch.finfo(torch.float32).min)
    return torch.softmax(s, -1) @ v.float()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("s,d", [(1, 32), (7, 32), (33, 64), (130, 64)])
def test_without_dropout_it_is_the_reference_forward_and_backward(dtype, tol, s, d):
    """Odd lengths, padding (one sequence full, the others cut), heads of 32 and 64: the output and the three
    gradients are the fp32 reference's (to bf16's rounding in bf16)."""
    q, k, v, mask = _inputs(3, 2, s, d, dtype)
    out = fused.fused_attention(q, k, v, mask, d**-0.5, 0.0)
    assert out.dtype == dtype
    qq, kk, vv = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = _reference(qq, kk, vv, mask, d**-0.5)
    grad = torch.randn_like(ref)
    out.backward(grad.to(dtype))
    ref.backward(grad)
    for got, want in ((out, ref), (q.grad, qq.grad), (k.grad, kk.grad), (v.grad, vv.grad)):
        err = (got.float() - want).abs().max() / want.abs().max().clamp_min(1e-6)
        assert err < tol


def test_a_general_mask_is_honoured():
    """A causal mask (any bool mask broadcastable to [b, h, q, k]), not only padding."""
    q, k, v, _ = _inputs(2, 3, 9, 32, torch.float32)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()[None, None]
    out = fused.fused_attention(q, k, v, causal, 0.3, 0.0)
    assert torch.allclose(out, _reference(q, k, v, causal, 0.3), atol=1e-5)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
def test_gradients_are_the_finite_differences_of_the_same_draw(p):
    """With dropout the mask follows torch's generator: two forwards after the same manual_seed are the same draw,
    so central differences of the loss along a random direction must equal the gradient's projection -- which
    checks that the backward regenerated the forward's mask."""
    q, k, v, mask = _inputs(2, 2, 11, 32, torch.float32, seed=3)
    w = torch.randn(2, 2, 11, 32, generator=torch.Generator().manual_seed(9))

    def loss(q, k, v):
        torch.manual_seed(1234)
        return (fused.fused_attention(q, k, v, mask, 0.2, p) * w).sum()

    loss(q, k, v).backward()
    h = 1e-2
    for t in (q, k, v):
        direction = torch.randn_like(t)
        with torch.no_grad():
            plus = loss(*[x + h * direction if x is t else x for x in (q, k, v)])
            minus = loss(*[x - h * direction if x is t else x for x in (q, k, v)])
        numeric = (plus - minus) / (2 * h)
        analytic = (t.grad * direction).sum()
        assert abs(numeric - analytic) <= 2e-2 * max(1.0, abs(analytic))


def test_the_draw_follows_torchs_generator():
    q, k, v, mask = _inputs(1, 2, 16, 32, torch.float32)
    with torch.no_grad():
        outs = []
        for seed in (5, 5, 6):
            torch.manual_seed(seed)
            outs.append(fused.fused_attention(q, k, v, mask, 0.2, 0.3))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5])
def test_dropout_keeps_the_models_share_and_the_expected_value(p):
    """Over 4.7 M elements the kept share is 1 - p to 5 standard deviations; a kept value is probs / keep exactly;
    the four 16-bit lanes of one hash (adjacent columns) are uncorrelated; and averaged over 200 draws the dropped
    probabilities are the probabilities (dropout's expected value is its input)."""
    scores = torch.randn(4, 4, 384, 384)
    probs = scores.clone()
    with torch.no_grad():
        dropped = torch.ops.hpcqa_fused.softmax_dropout_fwd(probs, None, 1.0, p, 77)
    kept = dropped != 0
    n = kept.numel()
    share = kept.float().mean().item()
    assert abs(share - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5
    keep = (65536 - round(p * 65536)) / 65536
    assert torch.allclose(dropped[kept], probs[kept] / keep, rtol=1e-6)
    lanes = kept.view(-1, 4).float()
    corr = torch.corrcoef(lanes.T)
    assert (corr - torch.eye(4)).abs().max() < 0.01
    small = torch.randn(1, 2, 8, 24)
    acc = torch.zeros_like(small)
    for seed in range(200):
        pr = small.clone()
        acc += torch.ops.hpcqa_fused.softmax_dropout_fwd(pr, None, 1.0, p, seed)
    assert torch.allclose(acc / 200, pr, atol=6 * (p / (1 - p) / 200) ** 0.5 * pr.max().item())


def test_dropout_one_drops_everything_and_zero_drops_nothing():
    q, k, v, mask = _inputs(1, 1, 8, 32, torch.float32)
    with torch.no_grad():
        assert fused.fused_attention(q, k, v, mask, 0.2, 1.0).abs().sum() == 0
        assert torch.allclose(
            fused.fused_attention(q, k, v, mask, 0.2, 0.0),
            _reference(q, k, v, mask, 0.2),
            atol=1e-5,
        )


def test_what_it_does_not_cover_is_left_to_the_unfused_path():
    q = torch.randn(1, 4, 8, 32)
    kv = torch.randn(1, 2, 8, 32)  # grouped queries
    assert fused.covers(q, q, q, None)
    assert not fused.covers(q, kv, kv, None)
    assert not fused.covers(q.half(), q.half(), q.half(), None)
    assert not fused.covers(q, q, q, torch.zeros(1, 1, 8, 8))  # an additive float mask


def _fused_cli(kernel_dir: Path, *argv: str, **env) -> subprocess.CompletedProcess:
    """`python -m hpcqa.rank.train.fused` (or python `argv`) with this kernel dir and `env`."""
    e = {**os.environ, "HPCQA_KERNEL_DIR": str(kernel_dir), **env}
    return subprocess.run(
        [sys.executable, *(argv or ("-m", "hpcqa.rank.train.fused"))],
        cwd=ROOT,
        env=e,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _built_copy(tmp_path: Path) -> Path:
    """A copy of the kernel folder the module fixture built, in a kernel dir of the test's own."""
    import shutil

    src = fused.kernel_folder(cpu_flags())[2]
    dst = tmp_path / "kernels" / src.name
    shutil.copytree(src, dst)
    os.chmod(dst.parent, 0o700)  # whatever the umask: this user's alone, as the cache is made
    return dst


@pytest.mark.process
def test_a_cached_kernel_loads_without_a_compiler_and_a_tampered_one_is_refused(tmp_path):
    folder = _built_copy(tmp_path)
    no_cc = {"PATH": "/nonexistent", "CXX": "/nonexistent/c++"}
    r = _fused_cli(folder.parent, **no_cc)
    assert r.returncode == 0 and "ready: the fused kernel" in r.stdout, r.stderr
    lib = folder / fused.LIB
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    r = _fused_cli(folder.parent, **no_cc)
    assert r.returncode == 1 and "SHA-256 differs" in r.stdout
    assert "the fused attention is not used" in r.stderr  # said, on stderr, once
    assert r.stderr.count("the fused attention is not used") == 1


@pytest.mark.process
def test_a_kernel_others_may_write_is_not_loaded(tmp_path):
    folder = _built_copy(tmp_path)
    os.chmod(folder / fused.LIB, 0o775)
    r = _fused_cli(folder.parent, PATH="/nonexistent", CXX="/nonexistent/c++")
    assert r.returncode == 1 and "is not this user's alone" in r.stdout


@pytest.mark.process
def test_without_a_compiler_or_a_cached_kernel_it_says_so(tmp_path):
    r = _fused_cli(tmp_path / "empty", PATH="/nonexistent", CXX="/nonexistent/c++")
    assert r.returncode == 1 and "no C++ compiler on this node" in r.stdout


@pytest.mark.slow
@pytest.mark.process
def test_ranks_starting_together_build_it_once(tmp_path):
    """Two processes on an empty kernel dir: one compiles (under the lock), the other waits and loads its build;
    nothing half-made is left beside the kernel."""
    e = {**os.environ, "HPCQA_KERNEL_DIR": str(tmp_path / "k")}
    cmd = [sys.executable, "-m", "hpcqa.rank.train.fused"]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sum("built into" in o for o in outs) == 1
    entries = sorted(p.name for p in (tmp_path / "k").iterdir())
    assert len(entries) == 2 and entries[0].startswith(".fused-") and entries[0].endswith(".lock")
    assert sorted(p.name for p in (tmp_path / "k" / entries[1]).iterdir()) == [
        fused.LIB,
        fused.LIB + ".sha256",
    ]


def _damage(folder: Path, how: str) -> None:
    if how == "bytes changed":
        lib = folder / fused.LIB
        data = bytearray(lib.read_bytes())
        data[len(data) // 2] ^= 0xFF
        lib.write_bytes(bytes(data))
    else:
        (folder / (fused.LIB + ".sha256")).unlink()


# a tiny BERT as a rank loads it (model.attention = "auto"), one training step: what ran, as JSON
TRAIN_ONE_STEP = """
import json, sys
from hpcqa.rank.train import attention
from tests.test_attention import _batch, _mc, _train_step
model, facts = attention.load_qa_model(sys.argv[1], {}, _mc())
loss = _train_step(model, *_batch()).loss.item()
grads = [p.grad is not None and p.grad.abs().sum().item() > 0
         for n, p in model.named_parameters() if "encoder" in n and "weight" in n]
print(json.dumps({**facts, "loss": loss, "grads": grads}))
"""


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize("how", ["bytes changed", "digest missing"])
def test_a_damaged_kernel_of_ours_is_built_again_and_trains(tmp_path, how):
    """A cached library whose bytes changed, or whose digest is gone, in a cache only this user writes, with a
    compiler on the node: the next load builds it again (under the lock, in place) and the model trains with it --
    no fallback to the unfused path, nothing temporary left beside it."""
    folder = _built_copy(tmp_path)
    _damage(folder, how)
    damaged = (folder / fused.LIB).read_bytes()
    tiny_bert(vocab=200, layers=2, heads=4).save_pretrained(tmp_path / "model")
    r = _fused_cli(folder.parent, "-c", TRAIN_ONE_STEP, str(tmp_path / "model"))
    assert r.returncode == 0 and "the fused attention is not used" not in r.stderr, r.stderr[-3000:]
    ran = json.loads(r.stdout.splitlines()[-1])
    assert ran["attention"] == "fused" and f"rebuilt into {folder}" in ran["attention_kernel"], ran
    said = "SHA-256 differs" if how == "bytes changed" else ".sha256"
    assert said in ran["attention_kernel"], ran
    assert math.isfinite(ran["loss"]) and ran["grads"] and all(ran["grads"]), ran
    assert fused._verified(folder) is None and (folder / fused.LIB).read_bytes() != damaged
    assert sorted(p.name for p in folder.iterdir()) == [fused.LIB, fused.LIB + ".sha256"]
    assert sorted(p.name for p in folder.parent.iterdir()) == [
        f".{folder.name}.lock",
        folder.name,
    ]


@pytest.mark.process
@pytest.mark.parametrize("unsafe", ["the build's folder", "the cache folder"])
def test_a_damaged_kernel_in_a_folder_others_may_write_is_never_built_into(tmp_path, unsafe):
    """With a compiler at hand, a damaged build in a folder others may write (its own, or the cache's) is refused as
    before -- one line, the unfused path -- and left as it was: nothing is built into it."""
    folder = _built_copy(tmp_path)
    _damage(folder, "bytes changed")
    damaged = (folder / fused.LIB).read_bytes()
    os.chmod(folder if unsafe == "the build's folder" else folder.parent, 0o777)
    r = _fused_cli(folder.parent)
    assert r.returncode == 1 and "not this user's alone" in r.stdout, (r.stdout, r.stderr[-2000:])
    assert r.stderr.count("the fused attention is not used") == 1 and "built" not in r.stdout
    assert (folder / fused.LIB).read_bytes() == damaged
    # no lock taken, no build begun
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]


@pytest.mark.process
def test_a_rebuild_that_fails_falls_back_and_leaves_the_damaged_build_as_it_was(tmp_path):
    """A damaged build of ours and a compiler that fails (CXX=/bin/false): one line saying the build failed and
    why it was built again, the unfused path; the damaged build is not removed for nothing, no temporary folder."""
    folder = _built_copy(tmp_path)
    _damage(folder, "bytes changed")
    damaged = (folder / fused.LIB).read_bytes()
    r = _fused_cli(folder.parent, CXX="/bin/false")
    assert r.returncode == 1 and "building it failed" in r.stdout, (r.stdout, r.stderr[-2000:])
    assert "SHA-256 differs" in r.stdout and r.stderr.count("the fused attention is not used") == 1
    assert (folder / fused.LIB).read_bytes() == damaged
    assert sorted(p.name for p in folder.parent.iterdir()) == [
        f".{folder.name}.lock",
        folder.name,
    ]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.process
def test_only_stale_temporary_folders_are_cleared(tmp_path):
    """Under the lock, a build clears the temporary folders of its own build key whose maker is gone and which are
    older than the lock; a live process's, a newer one, another key's and the build itself are kept."""
    import socket

    here = socket.gethostname()
    folder = tmp_path / "fused-abc"
    folder.mkdir()
    made = {
        "dead": f".fused-abc.build-{_dead_pid()}@{here}.x1y2z3",
        "set aside": f".fused-abc.build-{_dead_pid()}@{here}.old",
        "other host": ".fused-abc.build-1@elsewhere.example.q9",
        "alive": f".fused-abc.build-{os.getpid()}@{here}.k8",
        "other key": f".fused-def.build-{_dead_pid()}@{here}.k8",
    }
    for name in made.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "build.ninja").write_text("x")
    locked_at = time.time() + 1
    newer = tmp_path / f".fused-abc.build-{_dead_pid()}@{here}.n3w"
    newer.mkdir()
    os.utime(newer, (locked_at + 5, locked_at + 5))
    removed = fused._clear_stale(folder, locked_at)
    assert sorted(removed) == sorted(made[k] for k in ("dead", "set aside", "other host"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [folder.name, newer.name, made["alive"], made["other key"]]
    )


@pytest.mark.slow
@pytest.mark.process
def test_a_build_killed_mid_way_leaves_nothing_the_next_build_keeps(tmp_path):
    """kill -9 of a build (its compiler too, as a job's end kills its process group) once it compiles: its
    temporary folder stays behind; the next build clears it, builds, and leaves only the lock and the build."""
    kdir = tmp_path / "k"
    build = subprocess.Popen(
        [sys.executable, "-m", "hpcqa.rank.train.fused"],
        cwd=ROOT,
        env={**os.environ, "HPCQA_KERNEL_DIR": str(kdir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: ninja and the compiler with it
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and build.poll() is None:
            if list(kdir.glob(".fused-*.build-*/build.ninja")):
                time.sleep(1.0)  # the compiler is running
                break
            time.sleep(0.05)
        assert build.poll() is None, "the build ended before it could be killed mid-way"
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)  # the group of the process started here
        build.wait()
    (left,) = kdir.glob(".fused-*.build-*")
    assert not list(kdir.glob("fused-*")), "the killed build finished"
    r = _fused_cli(kdir)
    assert r.returncode == 0 and "built into" in r.stdout, r.stdout + r.stderr[-2000:]
    assert not left.exists()
    (folder,) = kdir.glob("fused-*")
    assert sorted(p.name for p in kdir.iterdir()) == [f".{folder.name}.lock", folder.name]
    assert fused._verified(folder) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.3])
def test_the_hidden_dropout_is_one_draw_forward_and_backward(dtype, p):
    """The fused hidden dropout: the kept share is 1 - p (5 standard deviations over 1.2 M elements, odd size),
    kept values are x / keep (the kernel's fp32 factor) (to bf16's rounding), and the backward zeroes and scales exactly the
    elements the forward dropped: the gradient of sum(y * w) is w where kept, 0 where dropped."""
    x = torch.randn(3, 401, 997).to(dtype).requires_grad_()
    w = torch.randn(3, 401, 997).to(dtype)
    torch.manual_seed(11)
    y = fused.fused_dropout(x, p)
    (y.float() * w.float()).sum().backward()
    kept = y != 0
    n = kept.numel()
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5
    inv_keep = torch.tensor(
        65536 / (65536 - round(p * 65536)), dtype=torch.float32
    )  # the kernel's factor
    want = (x.detach().float() * inv_keep).to(dtype)
    assert torch.equal(y[kept], want[kept])
    assert torch.equal(x.grad == 0, ~kept | (w == 0))
    assert torch.equal(x.grad[kept], (w.float() * inv_keep).to(dtype)[kept])


def test_bulk_dropout_modules_use_it_when_the_model_is_fused():
    from hpcqa.rank.train import attention

    m = attention.BulkDropout(0.25)
    x = torch.ones(64, 64)
    m.hpcqa_fused = True
    torch.manual_seed(3)
    a = m(x)
    torch.manual_seed(3)
    b = fused.fused_dropout(x, 0.25)
    assert torch.equal(a, b)
    m.eval()
    assert torch.equal(m(x), x)


@pytest.mark.process
@pytest.mark.parametrize("case", ["a file", "others may write it", "a library that does not load"])
def test_a_kernel_cache_it_cannot_use_is_one_line_and_the_unfused_path(tmp_path, case):
    """The blind re-test's faults: a kernel dir that is a file, a folder others can write (someone could swap the
    library between its check and its load), a library whose digest matches but which does not load (another
    glibc): each is one line and exit 1 from the loader -- no traceback, no abort."""
    if case == "a file":
        kdir = tmp_path / "kfile"
        kdir.write_text("x")
    elif case == "others may write it":
        folder = _built_copy(tmp_path)
        os.chmod(folder, 0o777)
        kdir = folder.parent
    else:
        import hashlib

        folder = _built_copy(tmp_path)
        data = Path("/bin/ls").read_bytes()
        (folder / fused.LIB).write_bytes(data)
        (folder / (fused.LIB + ".sha256")).write_text(hashlib.sha256(data).hexdigest() + "\n")
        kdir = folder.parent
    r = _fused_cli(kdir, PATH="/nonexistent", CXX="/nonexistent/c++")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("the fused attention is not used") == 1
    said = {"a file": "Not a directory", "others may write it": "not this user's alone"}
    assert said.get(case, "does not load") in r.stdout, r.stdout


def test_its_backward_is_not_differentiated_again_and_bad_probabilities_are_refused():
    q, k, v, mask = _inputs(1, 1, 5, 8, torch.float32)
    out = fused.fused_attention(q, k, v, mask, 0.3, 0.0)
    (gq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(
        RuntimeError
    ):  # once_differentiable: an error, never a wrong second derivative
        gq.sum().backward()
    for p in (float("nan"), -0.5, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            fused.fused_attention(q, k, v, mask, 0.3, p)
        with pytest.raises(ValueError, match="between 0 and 1"):
            fused.fused_dropout(q, p)
