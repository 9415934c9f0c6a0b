"""The names a plan gives its job's folder before the job exists: <output_dir>/<name>/<job id>-<submission>. The
job record (record/jobdir.py) owns every file name inside that folder and re-exports these; they live here so that
the pure plan can name its folder without importing the layer above it."""

from __future__ import annotations

import os

JOB_ID = "%j"  # submitit's placeholder for the job id in a folder path
SUBMISSION = "SUBMISSION"  # a dry run's stand-in for the token a submission picks (plain: unquoted in scripts)


def root_path(output_dir: str, name: str) -> str:
    """<output_dir>/<name> as the config says it (relative paths stay relative: a rendered script
    resolves them where sbatch runs it)."""
    return os.path.join(output_dir, name)
