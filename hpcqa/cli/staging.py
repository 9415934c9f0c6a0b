"""The stage verb: the config's model, dataset and features into the shared caches, with a manifest (hpcqa.stage:
imports transformers and datasets, as staging needs them)."""

from __future__ import annotations

import argparse
import json
import sys

from hpcqa import errors
from hpcqa.cli.say import tell
from hpcqa.core import config
from hpcqa.executors.k8s import pods


def cmd_stage(args: argparse.Namespace) -> int:
    from hpcqa import stage

    cfg = config.load(args.config, args.overrides)
    if args.k8s:
        cfg = pods.pod_config(cfg)
        pods.check_volume(cfg)
    manifest = stage.stage(
        cfg, log=lambda m: print(errors.for_terminal(f"stage: {m}"), file=sys.stderr)
    )
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
        return 0
    model = manifest["model"]
    cols = errors.terminal_width(sys.stdout)
    tell(
        errors.fit(
            f"{model['name']} ({model['kind']}"
            + (f", revision {model['revision']}" if model.get("revision") else "")
            + f"): {len(model['files'])} files, "
            f"{sum(f['size'] for f in model['files']) / 1e6:.1f} MB in {model['path']}",
            "model     ",
            " " * 10,
            cols,
        )
    )
    for s in manifest["dataset"]["splits"]:
        tell(
            errors.fit(
                f"{s['split']}: {s['rows']} examples; features: {s['features']['rows']} "
                f"({sum(f['size'] for f in s['features']['files']) / 1e6:.1f} MB)",
                "data      ",
                " " * 10,
                cols,
            )
        )
    tell(errors.fit(f"{manifest['path']}  ({manifest['seconds']} s)", "manifest  ", " " * 10, cols))
    return 0
