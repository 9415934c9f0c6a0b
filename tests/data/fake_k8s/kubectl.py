"""A stand-in `kubectl` for the walk-through test: an API server reduced to the rules the walk-through meets,
transcribed from the real components (tests/trainer_rules.py, tests/data/k8s/SOURCE.md):

- The Trainer's TrainJob webhook (v2.3 pkg/runtime/core/trainingruntime.go ValidateObjects) looks the runtime up
  through the controller's cached client: a TrainingRuntime is seen FAKE_KUBE_CACHE_LAG seconds after it was
  created. The webhook runs on `--dry-run=server` too (its sideEffects are None). Its other checks:
  trainer_rules.webhook_errors.
- kubectl apply/delete act on the documents of the file, in order, and exit 1 when any was refused.
- A batch Job ends as FAKE_KUBE_JOB_RESULT says (Complete or Failed) by its first `get`; `get -o jsonpath` knows the
  one filter the walk-through uses.
State: the JSON file $FAKE_KUBE_STATE (objects, and every call for the test to read)."""

import json
import os
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, os.environ["FAKE_KUBE_ROOT"])
from tests import trainer_rules  # noqa: E402

STATE = Path(os.environ["FAKE_KUBE_STATE"])
LAG = float(os.environ.get("FAKE_KUBE_CACHE_LAG", "0"))
CONDITIONS = '{.status.conditions[?(@.status=="True")].type}'


def load() -> dict:
    return json.loads(STATE.read_text()) if STATE.exists() else {"objects": {}, "calls": []}


def key(doc: dict, ns: str) -> str:
    return f"{doc['kind']}/{doc['metadata'].get('namespace') or ns}/{doc['metadata']['name']}"


def main(argv: list[str]) -> int:
    state = load()
    state["calls"].append(argv)
    verb, ns, files, out, dry, rest = argv[0], "default", [], None, False, []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "-n":
            ns, i = argv[i + 1], i + 2
        elif a == "-f":
            files.append(argv[i + 1])
            i += 2
        elif a == "-o":
            out, i = argv[i + 1], i + 2
        elif a.startswith("-o"):
            out, i = a[2:], i + 1
        elif a == "--dry-run=server":
            dry, i = True, i + 1
        else:
            rest.append(a)
            i += 1
    docs = [d for f in files for d in yaml.safe_load_all(Path(f).read_text()) if d]
    code = 0
    now = time.time()
    objs = state["objects"]
    if verb == "apply":
        for d in docs:
            k = key(d, ns)
            if d["kind"] == "TrainJob":
                rt_key = f"TrainingRuntime/{d['metadata'].get('namespace') or ns}/{d['spec']['runtimeRef']['name']}"
                seen = objs.get(rt_key)
                if seen is None or seen["created"] > now - LAG:
                    print(
                        f'Error from server (Forbidden): error when creating "{files[0]}": admission webhook '
                        f'"validate.trainjob.trainer.kubeflow.org" denied the request: spec.runtimeRef: '
                        f'trainingruntimes.trainer.kubeflow.org "{d["spec"]["runtimeRef"]["name"]}" not found: '
                        "specified trainingRuntime must be created before the TrainJob is created",
                        file=sys.stderr,
                    )
                    code = 1
                    continue
                rt = dict(seen["doc"])
                errs = trainer_rules.webhook_errors(
                    {
                        **rt,
                        "metadata": {**rt["metadata"], "namespace": d["metadata"].get("namespace")},
                    },
                    d,
                )
                if errs:
                    print(f"Error from server (Forbidden): {'; '.join(errs)}", file=sys.stderr)
                    code = 1
                    continue
            print(
                f"{d['kind'].lower()}/{d['metadata']['name']} {'created (server dry run)' if dry else 'created'}"
            )
            if not dry:
                objs[k] = {"doc": d, "created": now}
                if d["kind"] == "Job":
                    objs[k]["doc"]["status"] = {
                        "conditions": [
                            {
                                "type": os.environ.get("FAKE_KUBE_JOB_RESULT", "Complete"),
                                "status": "True",
                            }
                        ]
                    }
    elif verb == "get":
        if docs:
            for d in docs:
                found = objs.get(key(d, ns))
                if found is None:
                    print(
                        f'Error from server (NotFound): {d["kind"]} "{d["metadata"]["name"]}" not found',
                        file=sys.stderr,
                    )
                    code = 1
                elif out == f"jsonpath={CONDITIONS}":
                    conds = found["doc"].get("status", {}).get("conditions", [])
                    print(" ".join(c["type"] for c in conds if c["status"] == "True"), end="")
                else:
                    print(f"output {out!r} is not modelled", file=sys.stderr)
                    code = 1
        else:
            print(f"NAME ... ({' '.join(rest)} in {ns})")
    elif verb == "delete":
        for d in docs:
            if objs.pop(key(d, ns), None) is None:
                print(
                    f'Error from server (NotFound): {d["kind"]} "{d["metadata"]["name"]}" not found',
                    file=sys.stderr,
                )
                code = 1
            else:
                print(f"{d['kind'].lower()}/{d['metadata']['name']} deleted")
    elif verb == "logs":
        print("hpcqa: attempt 0: rank 0 ...")
    else:
        print(f"kubectl {verb}: not modelled", file=sys.stderr)
        code = 1
    STATE.write_text(json.dumps(state))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
