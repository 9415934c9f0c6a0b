"""README command 1 on a stock Debian/Ubuntu Python: PEP 668 ("externally managed") refuses pip there, so
scripts/install.sh makes and uses a venv, and `python3 -m hpcqa` from the checkout runs in it."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT

SYSTEM = "/usr/bin/python3"  # Debian's: its stdlib carries the EXTERNALLY-MANAGED marker


def externally_managed(python: str) -> bool:
    code = "import os, sysconfig; print(os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip() == "True"


@pytest.fixture
def system_python():
    if not (os.path.exists(SYSTEM) and externally_managed(SYSTEM)):
        if os.environ.get("CI"):
            pytest.fail(f"{SYSTEM} with its EXTERNALLY-MANAGED marker is expected on the CI machine (Debian)")
        pytest.skip(f"no externally managed {SYSTEM} here")
    return SYSTEM


def test_pip_is_refused_and_install_sh_makes_a_venv(system_python, tmp_path):
    refused = subprocess.run([system_python, "-m", "pip", "install", "--dry-run", "six"], capture_output=True,
                             text=True)
    assert refused.returncode != 0 and "externally-managed" in refused.stderr
    venv = tmp_path / "venv"
    env = {**os.environ, "PYTHON": system_python, "HPCQA_VENV": str(venv), "HPCQA_INSTALL_DRY": "1"}
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(["bash", "scripts/install.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "externally managed (PEP 668)" in r.stderr and f"installing with {venv}/bin/python" in r.stderr
    # a venv: pip installs there whatever the base's marker says (PEP 668 exempts virtual environments)
    code = "import sys; print(sys.prefix != sys.base_prefix)"
    assert subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True).stdout.strip() \
        == "True"


def test_a_python_that_is_not_externally_managed_is_used_as_it_is(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "HPCQA_VENV": str(tmp_path / "venv"), "HPCQA_INSTALL_DRY": "1"}
    r = subprocess.run(["bash", "scripts/install.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"installing with {sys.executable}" in r.stderr and not (tmp_path / "venv").exists()


def test_python3_m_hpcqa_from_the_checkout_runs_in_that_venv(system_python, tmp_path):
    """The system python3 lacks hpcqa's dependencies; the venv install.sh made has them: `python3 -m hpcqa`
    (README command 1, as written) switches to it. Here the venv sees this machine's packages instead of
    installing them again."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    r = subprocess.run([system_python, "-m", "hpcqa", "validate", "configs/quickstart.toml"], cwd=ROOT,
                       env={**os.environ, "HPCQA_VENV": str(venv)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"using {venv}/bin/python" in r.stderr and "ok  configs/quickstart.toml" in r.stdout
