"""Everything is in pyproject.toml; this adds one build step: the top-level sbatch_templates/, configs/ and examples/
go into the wheel as package data (hpcqa/_data/), where hpcqa.resources finds them in an installed copy."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DATA = ("sbatch_templates", "configs", "examples")


class BuildWithData(build_py):
    def run(self) -> None:
        # a build folder left by an earlier build keeps modules the tree has since moved or deleted, and setuptools
        # packs them into the wheel: the package is built afresh each time
        shutil.rmtree(Path(self.build_lib) / "hpcqa", ignore_errors=True)
        super().run()
        for name in DATA:
            src, dst = HERE / name, Path(self.build_lib) / "hpcqa" / "_data" / name
            if not src.is_dir():
                raise SystemExit(f"setup.py: {src} is missing: build from a full source tree")
            shutil.rmtree(dst, ignore_errors=True)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))


setup(cmdclass={"build_py": BuildWithData})
