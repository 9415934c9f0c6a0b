"""scripts/wheelvenv.py: the installed copy the wheel tests use is checked against the checkout before use, and a
venv made by another process is read from its done.json, whatever that holds."""

import json
import sys
import zipfile

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import wheelvenv  # noqa: E402

FILES = {"hpcqa/__init__.py": b"x = 1\n", "hpcqa/core/a.py": b"a = 2\n"}
DATA = {"configs/quick.toml": b"[job]\n"}


def _made(tmp_path):
    """A checkout, the wheel it builds and the venv that wheel went into, as files."""
    root, out = tmp_path / "checkout", tmp_path / "out"
    for name, data in {**FILES, **DATA}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    wheel = out / "dist" / "hpcqa-0.1-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    site = out / "venv" / "lib" / "python3.11" / "site-packages"
    packaged = {**FILES, **{f"hpcqa/_data/{n}": d for n, d in DATA.items()}}
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in packaged.items():
            z.writestr(name, data)
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).write_bytes(data)
        z.writestr("hpcqa-0.1.dist-info/RECORD", "")
    (out / "venv" / "bin").mkdir(parents=True)
    return root, out, wheelvenv.Made(out / "venv" / "bin", wheel)


def test_a_venv_of_this_checkout_passes(tmp_path):
    root, _, made = _made(tmp_path)
    assert wheelvenv.verify(root, made) == []


def test_a_checkout_edited_since_the_wheel_was_built_is_named(tmp_path):
    root, _, made = _made(tmp_path)
    (root / "hpcqa/core/a.py").write_bytes(b"a = 3\n")
    (root / "configs/quick.toml").write_bytes(b"[train]\n")
    (root / "hpcqa/core/b.py").write_bytes(b"")
    got = wheelvenv.verify(root, made)
    assert any(p.startswith("hpcqa/core/a.py: the wheel's copy") for p in got), got
    assert any(p.startswith("hpcqa/_data/configs/quick.toml: the wheel's copy") for p in got), got
    assert "hpcqa/core/b.py: in the checkout, not in the wheel" in got, got


def test_a_venv_whose_package_was_changed_after_install_is_named(tmp_path):
    root, out, made = _made(tmp_path)
    (out / "venv/lib/python3.11/site-packages/hpcqa/__init__.py").write_bytes(b"import os\n")
    assert wheelvenv.verify(root, made) == ["hpcqa/__init__.py: the venv's copy is not the wheel's"]


def _done(out, **fields):
    out.mkdir(parents=True, exist_ok=True)
    (out / "done.json").write_text(json.dumps(fields) if fields else "{oops")


def test_waiting_reads_what_the_maker_wrote(tmp_path):
    _, out, made = _made(tmp_path)
    _done(out, ok=True, bin=str(made.bin), wheel=str(made.wheel), seconds=3)
    assert wheelvenv.wait(out, timeout=1) == made


@pytest.mark.parametrize(
    "fields, says",
    [
        (
            {"ok": False, "error": "pip install (the README's line) failed (exit 1): no torch"},
            "no torch",
        ),
        ({}, "damaged"),
        ({"ok": "yes", "bin": "/usr/bin", "wheel": "/x.whl"}, "failed"),
        ({"ok": True, "bin": "/usr/bin", "wheel": "/tmp/x.whl"}, "/usr/bin"),
    ],
)
def test_a_failed_damaged_or_foreign_done_file_is_an_assertion(tmp_path, fields, says):
    out = tmp_path / "out"
    _done(out, **fields)
    with pytest.raises(AssertionError, match=says):
        wheelvenv.wait(out, timeout=1)


def test_a_maker_that_never_finishes_is_waited_for_no_longer_than_asked(tmp_path):
    with pytest.raises(AssertionError, match="not written in 0 s"):
        wheelvenv.wait(tmp_path, timeout=0)
