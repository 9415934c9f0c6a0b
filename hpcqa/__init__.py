"""hpcqa: distributed question-answering fine-tuning on Xeon CPU clusters.

Importing this package is cheap: torch and transformers are only imported by ``hpcqa.rank.train``.

The Python API (hpcqa.api): ``load_config(path, overrides)``, ``plan(cfg)``, ``submit(cfg) -> Job | Sweep``.

Four layers, one folder each, in this order: core < record < rank < executors; the front modules (the CLI, the
API, the checks) above them, the base modules (errors, fsutil, text, resources) below. The map (docs/architecture.md's layout is
generated from it and from each folder's own):

    cli/          the command line: the only package that prints tables or turns errors into exit codes
    api.py        the Python API: load_config, plan, submission, dry_run, submit -> Job / Sweep (the CLI uses it)
    stage.py      `hpcqa stage`: model, data and features into the shared caches, with a manifest (heavy)
    preflight.py  data and output checks on the submit host before anything is queued
    modelcheck.py  the model's files against the job (tokenizer, positions, questions, unknown tokens)
    doctor.py     `hpcqa doctor`: the checks before submitting, each with its fix
    docs.py       `python -m hpcqa.docs`: the docs' config reference and layout, generated
    errors.py     HpcqaError > ConfigError(key, hint), PlanError, RankError, ...; messages for a terminal
    fsutil.py     atomic writes (write aside, then rename), digests, the owner's umask
    text.py       control characters in text from outside found and spelled out; one-line cuts
    resources.py  the templates and example configs (package data of an installed copy, else the source tree's); the version
    __main__.py   `python -m hpcqa`: the CLI, in this checkout's venv when run from the checkout
    core/         the pure core: config -> plan
    record/       the job record: what a job left behind and what the scheduler says of it
    rank/         the rank side: what runs on the compute node, inside each rank
    executors/    a plan -> a Request -> a submitted job; one module per executor, one table
"""

from hpcqa.resources import __version__  # noqa: F401  (hpcqa.__version__)

_API = ("load_config", "plan", "submit", "submission", "Job", "Sweep")


def __getattr__(name: str):
    if name in _API:
        from hpcqa import api

        return getattr(api, name)
    raise AttributeError(f"module 'hpcqa' has no attribute {name!r}")
