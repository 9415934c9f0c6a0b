"""The documentation as a site: docs/ built by MkDocs in strict mode (a link to a missing page or a missing
anchor fails the build, as it must in CI), a planted broken link failing it, and the README's own links -- to the
pages, to its sections -- pointing somewhere. The README stays short; every page is reachable from it."""

import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.process
README = (ROOT / "README.md").read_text()


def build(root, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(root / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_in_strict_mode(tmp_path):
    r = build(ROOT, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "kubernetes" / "index.html").is_file()


@pytest.mark.parametrize(
    "planted", ["[the pinning](pinnning.md)", "[a section](kubernetes.md#no-such-section)"]
)
def test_a_broken_link_fails_the_build(tmp_path, planted):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy)
    with open(copy / "docs" / "status.md", "a") as f:
        f.write(f"\nSee {planted}.\n")
    r = build(copy, tmp_path)
    assert r.returncode != 0 and "status.md" in r.stderr, r.stderr[-2000:]


def test_the_readme_is_short_and_reaches_every_page():
    assert len(README.splitlines()) <= 350
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)(?:#[\w-]+)?\)", README))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == linked, (pages - linked, linked - pages)
    anchors = {
        re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", README, re.M)
    }
    for target in re.findall(r"\]\(#([\w-]+)\)", README):
        assert target in anchors, target
    for target in re.findall(r"\]\(([\w./-]+)\)", README):
        if not target.startswith(("http", "#")):
            assert (ROOT / target.split("#")[0]).exists(), target
