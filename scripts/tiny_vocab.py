"""Writes hpcqa/rank/train/tiny_vocab.py: the tiny test model's WordPiece vocabulary, trained once.

    python scripts/tiny_vocab.py

Run it only to change that vocabulary (a new corpus in synth.py, another size): every build of builtin:tiny-bert
reads the file, so that every node makes the same tokenizer. Bump model.TINY_VERSION with it, so cached builds of
the old vocabulary are not reused.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcqa.rank.train import model  # noqa: E402

HEAD = '''"""The tiny test model's WordPiece vocabulary (builtin:tiny-bert): {n} tokens, the special ones first, then
sorted. Trained once on synth.corpus() by tokenizers' WordPieceTrainer (model.train_tiny_vocab, written by
scripts/tiny_vocab.py); training again gives its tokens other ids and, about one time in four, another vocabulary
(the trainer breaks ties in hash order), so every node that builds the model reads this list instead
(model.tiny_tokenizer). Data, not code: whitespace-separated tokens."""
'''


def main() -> int:
    tokens = model.train_tiny_vocab()
    if any(not t.isprintable() or " " in t or '"' in t or "\\" in t for t in tokens):
        raise SystemExit("a token that cannot be written between triple quotes: not written")
    body = "\n".join(
        textwrap.wrap(" ".join(tokens), 96, break_long_words=False, break_on_hyphens=False)
    )
    assert body.split() == tokens
    out = ROOT / "hpcqa" / "rank" / "train" / "tiny_vocab.py"
    out.write_text(HEAD.format(n=len(tokens)) + f'\nTOKENS = """\n{body}\n"""\n')
    print(f"{out}: {len(tokens)} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
