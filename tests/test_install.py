"""README command 1 on a stock Debian/Ubuntu Python: PEP 668 ("externally managed") refuses pip there, so
scripts/install.sh makes and uses a venv, and `python3 -m hpcqa` from the checkout runs in it."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SYSTEM = "/usr/bin/python3"  # Debian's: its stdlib carries the EXTERNALLY-MANAGED marker


def externally_managed(python: str) -> bool:
    code = "import os, sysconfig; print(os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"
    return (
        subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()
        == "True"
    )


@pytest.fixture
def system_python():
    if not (os.path.exists(SYSTEM) and externally_managed(SYSTEM)):
        if os.environ.get("CI"):
            pytest.fail(
                f"{SYSTEM} with its EXTERNALLY-MANAGED marker is expected on the CI machine (Debian)"
            )
        pytest.skip(f"no externally managed {SYSTEM} here")
    return SYSTEM


def test_pip_is_refused_and_install_sh_makes_a_venv(system_python, tmp_path):
    refused = subprocess.run(
        [system_python, "-m", "pip", "install", "--dry-run", "six"], capture_output=True, text=True
    )
    assert refused.returncode != 0 and "externally-managed" in refused.stderr
    venv = tmp_path / "venv"
    env = {**os.environ, "PYTHON": system_python, "HPCQA_VENV": str(venv), "HPCQA_INSTALL_DRY": "1"}
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(
        ["bash", "scripts/install.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert (
        "externally managed (PEP 668)" in r.stderr
        and f"would install with {venv}/bin/python" in r.stderr
    )
    # a venv: pip installs there whatever the base's marker says (PEP 668 exempts virtual environments)
    code = "import sys; print(sys.prefix != sys.base_prefix)"
    assert (
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True
        ).stdout.strip()
        == "True"
    )


def test_a_shared_python_gets_a_venv_of_the_checkout_an_active_venv_is_used_as_it_is(tmp_path):
    """Not externally managed, no venv active: installing into that python3 would replace another checkout's hpcqa,
    so install.sh makes this checkout's venv. Inside a venv (or told HPCQA_NO_VENV=1) it installs there. The one
    line on stdout names the interpreter (scripts/test.sh runs the tests with it)."""
    base = getattr(sys, "_base_executable", sys.executable)
    plain = (
        subprocess.run(
            [base, "-c", "import sys; print(sys.prefix == sys.base_prefix)"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        == "True"
    )
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(HPCQA_VENV=str(tmp_path / "venv"), HPCQA_INSTALL_DRY="1")
    if plain and not externally_managed(base):
        r = subprocess.run(
            ["bash", "scripts/install.sh"],
            cwd=ROOT,
            env={**env, "PYTHON": base},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        assert (
            "no venv is active" in r.stderr and r.stdout.strip() == f"{tmp_path}/venv/bin/python"
        ), r
        assert (tmp_path / "venv" / "bin" / "python").exists()
        told = subprocess.run(
            ["bash", "scripts/install.sh"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "PYTHON": base, "HPCQA_NO_VENV": "1", "HPCQA_VENV": str(tmp_path / "no")},
        )
        assert (
            told.returncode == 0 and told.stdout.strip() == base and not (tmp_path / "no").exists()
        ), told
    active = tmp_path / "active"
    subprocess.run([base, "-m", "venv", "--without-pip", str(active)], check=True)
    r = subprocess.run(
        ["bash", "scripts/install.sh"],
        cwd=ROOT,
        env={
            **env,
            "PYTHON": str(active / "bin" / "python"),
            "HPCQA_VENV": str(tmp_path / "other"),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == str(active / "bin" / "python"), r
    assert not (tmp_path / "other").exists()


def test_python3_m_hpcqa_from_the_checkout_runs_in_that_venv(system_python, tmp_path):
    """The system python3 lacks hpcqa's dependencies; the venv install.sh made has them: `python3 -m hpcqa`
    (README command 1, as written) switches to it. Here the venv sees this machine's packages instead of
    installing them again."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    r = subprocess.run(
        [system_python, "-m", "hpcqa", "validate", "configs/quickstart.toml"],
        cwd=ROOT,
        env={**os.environ, "HPCQA_VENV": str(venv)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert (
        f"using this checkout's venv, where scripts/install.sh put hpcqa:\n  {venv}/bin/python"
        in r.stderr
    )
    assert "ok  configs/quickstart.toml" in r.stdout
    inside = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "hpcqa", "validate", "configs/quickstart.toml"],
        cwd=ROOT,
        env={**os.environ, "HPCQA_VENV": str(tmp_path / "elsewhere")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert inside.returncode == 0 and "using" not in inside.stderr, (
        inside.stderr
    )  # a venv stays itself


def test_install_asks_pytorchs_cpu_index_first_and_says_when_it_cannot(tmp_path):
    """Where PyTorch's CPU wheel index answers, install.sh adds it (torch from there, a CPU build); where it does
    not, it says so and goes on with PyPI. A real index on loopback (http.server over a folder with torch/), and
    the same address once it is closed; HPCQA_INSTALL_DRY stops before pip."""
    import http.server
    import threading

    root = tmp_path / "index"
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "index.html").write_text(
        "<a href='torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl'>x</a>"
    )
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(root))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    env = {
        **os.environ,
        "HPCQA_INSTALL_DRY": "1",
        "HPCQA_TORCH_INDEX": url,
        "PYTHON": sys.executable,
    }
    try:
        up = subprocess.run(
            ["bash", "scripts/install.sh"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert up.returncode == 0 and f"hpcqa: torch from {url} (CPU builds" in up.stderr, up.stderr
    down = subprocess.run(
        ["bash", "scripts/install.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        down.returncode == 0
        and f"hpcqa: {url} cannot be reached from here: torch from PyPI" in down.stderr
    )
    pypi = subprocess.run(
        ["bash", "scripts/install.sh"],
        cwd=ROOT,
        env={**env, "HPCQA_TORCH_INDEX": "pypi"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        pypi.returncode == 0
        and "torch from" not in pypi.stderr
        and "cannot be reached" not in pypi.stderr
    )


def _fake_wheel(folder, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal valid wheel of `name` `version` (py3-none-any) in folder/<name>/: what pip reads of a wheel to
    resolve it (its METADATA), and nothing else."""
    import zipfile

    dist = f"{name.replace('-', '_')}-{version}"
    project = folder / name
    project.mkdir(parents=True, exist_ok=True)
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(project / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", meta)
        z.writestr(
            f"{dist}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{dist}.dist-info/RECORD", "")


def test_the_readme_line_takes_torch_from_the_cpu_index_over_pypis_cuda_build(tmp_path):
    """Where PyTorch's CPU index answers, the README's wheel install line gets torch from there, although PyPI has
    the same version as a CUDA build: real pip resolving the line's own options (read from the README: the index,
    -c constraints.txt) and hpcqa's torch requirement (from pyproject.toml) against two indexes laid out as those
    two are -- PyPI with torch 2.13.0 that needs nvidia-* libraries, the CPU index with 2.13.0+cpu -- the CPU index
    served over HTTP on loopback. Where it does not answer, pip takes PyPI's CUDA build: what `hpcqa doctor` and
    install.sh then say (tested above and in test_doctor)."""
    import http.server
    import re
    import shlex
    import threading
    import tomllib

    readme = (ROOT / "docs" / "install.md").read_text()
    (line,) = re.findall(r"^pip install .*hpcqa-[^ ]*\.whl.*$", readme, re.M)
    words = shlex.split(line)[2:]
    wheel = next(w for w in words if ".whl" in w)
    options = [w for w in words if w != wheel]
    assert "--extra-index-url" in options and "-c" in options, line
    at = options.index("--extra-index-url") + 1
    assert options[at] == "https://download.pytorch.org/whl/cpu", line
    (torch_req,) = [
        d
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if re.match(r"torch\b", d)
    ]
    pypi, cpu = tmp_path / "pypi", tmp_path / "cpu"
    _fake_wheel(pypi, "torch", "2.13.0", ("nvidia-cublas-cu12==12.8.4.1",))
    _fake_wheel(pypi, "nvidia-cublas-cu12", "12.8.4.1")
    _fake_wheel(
        pypi, "torch", "2.14.0", ("nvidia-cublas-cu12==12.8.4.1",)
    )  # newer, and not what was tested
    _fake_wheel(cpu, "torch", "2.13.0+cpu")

    def serve(folder):
        handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(folder))  # noqa: E731
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}/"

    pypi_server, pypi_url = serve(pypi)
    server, url = serve(cpu)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = (
        os.devnull
    )  # this machine's pip.conf names its own mirrors: none of them here

    def resolve(cpu_index: str) -> dict[str, str]:
        opts = [*options[:at], cpu_index, *options[at + 1 :]]
        report = tmp_path / "report.json"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--quiet",
                "--report",
                str(report),
            ]
            + [
                "--disable-pip-version-check",
                "--no-cache-dir",
                "--ignore-installed",
                "--retries",
                "0",
            ]
            + ["--index-url", pypi_url]
            + [*opts, torch_req],
            cwd=ROOT,  # -c constraints.txt: the README's line is run beside it
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        got = json.loads(report.read_text())["install"]
        return {i["metadata"]["name"]: i["metadata"]["version"] for i in got}

    try:
        try:
            reached = resolve(url)
        finally:
            server.shutdown()
            server.server_close()
        unreached = resolve(url)  # the same address, closed
    finally:
        pypi_server.shutdown()
        pypi_server.server_close()
    assert reached == {"torch": "2.13.0+cpu"}, reached  # the CPU build, at the pin, and no nvidia-*
    assert unreached == {"torch": "2.13.0", "nvidia-cublas-cu12": "12.8.4.1"}, unreached
