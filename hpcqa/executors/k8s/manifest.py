"""Kubernetes objects as files: the client models as dicts (the `kubernetes` package's own serialiser), YAML that
every reader reads back as written, and a manifest dict back to a model (its deserialiser)."""

from __future__ import annotations

import json
import re
from typing import Any


def to_dicts(objs: list[Any]) -> list[dict]:
    from kubernetes.client import ApiClient

    return [ApiClient().sanitize_for_serialization(o) for o in objs]


RETYPED = re.compile(
    r"^(?:[yYnN]|~|null|Null|NULL|[-+]?(?:0[oO][0-7_]+|0[xX][0-9a-fA-F_]+|0[bB][01_]+|[0-9][0-9_]*)"
    r"|[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
    r"|\.(?:nan|NaN|NAN))$"
)


def to_yaml(docs: list[dict]) -> str:
    """YAML for kubectl (of `to_dicts`' output); multi-line strings (the node script, the config) as readable
    literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value: str):
        block = "\n" in value and not any(line != line.rstrip() for line in value.splitlines())
        if block:
            return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
        # PyYAML quotes what its own YAML 1.1 resolver would retype (yes, on, 12, 1.5); kubectl's reader (go-yaml)
        # and YAML 1.2 readers also retype y/n, 1e3, 0o17, .inf: quoted too, so every reader reads a string
        return dumper.represent_scalar(
            "tag:yaml.org,2002:str", value, style="'" if RETYPED.match(value) else None
        )

    def seq(dumper, value: list):  # a list of numbers (exit codes) on one line
        flow = bool(value) and all(isinstance(v, int) for v in value)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow or None)

    Dumper.add_representer(str, text)
    Dumper.add_representer(list, seq)
    Dumper.ignore_aliases = lambda self, data: (
        True
    )  # the replicas' templates are written out, not aliased
    return "".join(
        "---\n" + yaml.dump(d, Dumper=Dumper, sort_keys=False, width=1 << 20, allow_unicode=True)
        for d in docs
    )


class _Response:
    def __init__(self, data: dict):
        self.data = json.dumps(data)


def load(doc: dict, kind: str) -> Any:
    """A manifest dict -> the client model, through the client library's own deserialiser."""
    from kubernetes.client import ApiClient

    model = {"PyTorchJob": "KubeflowOrgV1PyTorchJob", "Pod": "V1Pod"}[kind]
    if kind == "PyTorchJob":
        from kubeflow.training.api_client import ApiClient as KfClient

        return KfClient().deserialize(_Response(doc), model)
    return ApiClient().deserialize(_Response(doc), model)
