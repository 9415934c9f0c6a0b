"""train.report_to and the [tracking] section: where a run's curves and scores are sent (TensorBoard files, MLflow).

Pure: the values are checked as data (a URI is a config string like any other: no password in it, credentials by
name through launch.pass_env), its scheme against what MLflow stores take. Whether mlflow is installed and a server
answers is asked on the submit side (executors/tracking.py); the rank side sends (rank/train/tracking.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from hpcqa.core.options import opt
from hpcqa.errors import ConfigError

REPORTERS = ("tensorboard", "mlflow")
# what MLflow's tracking stores take: a server, or a database SQLAlchemy opens (dialect[+driver]://)
SERVER_SCHEMES = ("http", "https")
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
# how a rank of a sweep finds its parent run: set by the submit side (executors/tracking.py) in the environment
# the ranks inherit, as the snapshot's variables are
PARENT_ENV = "HPCQA_TRACKING_PARENT"
SECRET_HINTS = {
    "tracking.uri": "write the URI without user:password@ and pass the credentials by name: export "
    "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) and set launch.pass_env = "
    '["MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"]'
}


@dataclass(frozen=True)
class TrackingConfig:
    uri: str = opt(
        "",
        'Where MLflow runs go (train.report_to with "mlflow"): a tracking server (http(s)://host:port) or a '
        "database (sqlite:////absolute/path.db, postgresql://host/db). Empty: $MLFLOW_TRACKING_URI where the job "
        "runs, else the SQLite store <job root>/mlflow.db (offline, nothing to start). Credentials never in the "
        "URI: MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN, passed by name "
        "(launch.pass_env).",
    )
    experiment: str = opt(
        "",
        "The MLflow experiment the runs go to (made when missing). Empty: job.name.",
        pattern=r"[^\x00-\x1f]{0,256}",
    )


def reporters(value: Any, source: str) -> Any:
    """train.report_to as given -> the list it means: "tensorboard" and "none" (today's strings) are
    ["tensorboard"] and []; a list names each reporter once. Anything else is returned for the type check to
    refuse with the expected type."""
    key = "train.report_to"
    if isinstance(value, str):
        value = [] if value == "none" else [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        return value
    if list(value) == ["none"]:
        return []
    for i, name in enumerate(value):
        if name not in REPORTERS:
            raise ConfigError(
                f"{key}[{i}]" if len(value) > 1 else key,
                f"{name[:40]!r} is not a reporter hpcqa knows",
                f'set {key} to a list of {", ".join(map(repr, REPORTERS))}, e.g. ["tensorboard", "mlflow"] '
                '(or "none")',
                source,
            )
    if len(set(value)) < len(value):
        raise ConfigError(
            key, f"{list(value)} names a reporter twice", "name each reporter once", source
        )
    return list(value)


def scheme(uri: str) -> str:
    """A URI's scheme, lower-case, without a SQLAlchemy driver (postgresql+psycopg2 -> postgresql); "" for none."""
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", uri)
    return m.group(1).lower().split("+")[0] if m else ""


def check(cfg: Any) -> None:
    """tracking.uri: a scheme an MLflow store takes, a SQLite file by its absolute path (the ranks run elsewhere)."""
    uri = cfg.tracking.uri
    if not uri:
        return
    found = scheme(uri)
    known = (*SERVER_SCHEMES, *DATABASE_SCHEMES)
    if found not in known:
        raise ConfigError(
            "tracking.uri",
            f"{uri[:80]!r}: "
            + (f"MLflow has no store for {found}://" if found else "not a URI (no scheme://)"),
            f"give a tracking server (http://host:5000) or a database ({', '.join(DATABASE_SCHEMES)}: "
            "sqlite:////absolute/path/mlflow.db), or leave it empty for the job root's store",
            cfg.source,
        )
    if found == "sqlite" and not uri.startswith("sqlite:////"):
        raise ConfigError(
            "tracking.uri",
            f"{uri[:80]!r} is not an absolute path (sqlite:/// + a relative path is read from each "
            "rank's working directory)",
            "write the file's absolute path after sqlite:/// (four slashes: sqlite:////home/me/mlflow.db)",
            cfg.source,
        )


def sends_to_mlflow(cfg: Any) -> bool:
    return "mlflow" in cfg.train.report_to and not cfg.job.command


def destination(cfg: Any, env: Mapping[str, str], store: str) -> tuple[str, str]:
    """Where runs go -> (URI, what chose it): tracking.uri, else $MLFLOW_TRACKING_URI, else `store`, the job root's
    SQLite file (JobRoot.tracking_store)."""
    if cfg.tracking.uri:
        return cfg.tracking.uri, "tracking.uri"
    if env.get(TRACKING_URI_ENV):
        return env[TRACKING_URI_ENV], f"${TRACKING_URI_ENV}"
    return f"sqlite:///{store}", "the job root's store"


def shown_uri(uri: str) -> str:
    """A URI as said on a screen or in a file: any user:password@ left out (one from the environment may hold it)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", uri)


def experiment(cfg: Any) -> str:
    return cfg.tracking.experiment or cfg.job.name
