"""What the submitting host has, for planning: sbatch on PATH, the oneCCL bindings, libraries to preload,
the tuned layouts. Looks, imports nothing heavy (no torch). The pure plan (hpcqa.core.plan) gets the answer
as a HostProbe value.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

from hpcqa.core.frozen import FrozenDict, freeze
from hpcqa.core.kinds import SlurmKind
from hpcqa.core.plan import HostProbe
from hpcqa.rank import preload
from hpcqa.record import tuned as tune


def extensions() -> HostProbe:
    """Only which Intel extensions import here (the oneCCL bindings, IPEX): no libraries, no tuned store."""
    return HostProbe(
        ccl_bindings=importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None,
        ipex=importlib.util.find_spec("intel_extension_for_pytorch") is not None,
    )


def probe_host() -> HostProbe:
    """Look at this host: sbatch on PATH, ccl bindings importable, libraries to preload. No torch import."""
    libs = preload.available()  # the dry run's prediction; each rank looks again on its node
    ext = extensions()
    return HostProbe(
        schedulers=frozenset({SlurmKind.name}) if shutil.which("sbatch") else frozenset(),
        ccl_bindings=ext.ccl_bindings,
        ipex=ext.ipex,
        libraries=FrozenDict(libs),
        python=sys.executable,
        tuned=freeze(tune.load_store()),
        inherited=FrozenDict({k: os.environ[k] for k in RENDEZVOUS_VARS if os.environ.get(k)}),
    )


RENDEZVOUS_VARS = ("MASTER_ADDR", "MASTER_PORT")
