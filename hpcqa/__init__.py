"""hpcqa: distributed question-answering fine-tuning on Xeon CPU clusters.

Importing this package is cheap: torch and transformers are only imported by ``hpcqa.rank.train``.

The Python API (hpcqa.api): ``load_config(path, overrides)``, ``plan(cfg)``, ``submit(cfg) -> Job | Sweep``.
"""

from hpcqa.version import __version__  # noqa: F401  (hpcqa.__version__)

_API = ("load_config", "plan", "submit", "submission", "Job", "Sweep")


def __getattr__(name: str):
    if name in _API:
        from hpcqa import api
        return getattr(api, name)
    raise AttributeError(f"module 'hpcqa' has no attribute {name!r}")
