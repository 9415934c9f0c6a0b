"""What a model's own files say about the job it can do, as rules on plain values (a config.json read as a dict, a
folder's file names, token ids): the submit host predicts from them before anything is queued, the rank checks again
with the objects transformers built. Pure: no file is read here, nothing is imported.

- positions: the longest feature the model's position embeddings take (max_position_embeddings; RoBERTa's family
  numbers positions from padding_idx + 1, so two fewer; DeBERTa without absolute positions has no such bound);
- tokenizer: which files a folder holds for one. hpcqa, like run_qa.py, needs a fast tokenizer (its offsets map
  answers onto tokens): tokenizer.json is one; a WordPiece vocab.txt or a BPE vocab.json + merges.txt is made into
  one by transformers; no tokenizer file at all gave a 5-token tokenizer built on the fly (a COMPLETED job that
  learned nothing);
- unknown tokens: the share of a sample's tokens that are the tokenizer's unknown token (a Chinese or Arabic data
  set under an English vocabulary was 83-100 % [UNK]: nothing to learn from);
- attention: which attention a model type runs under model.attention (hpcqa's is plugged in only where the QA
  class calls transformers' attention interface; DeBERTa, Longformer, BigBird run their own).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

# model types whose position ids start after padding_idx (transformers' create_position_ids_from_input_ids)
OFFSET_POSITIONS = frozenset(
    {
        "roberta",
        "xlm-roberta",
        "xlm-roberta-xl",
        "camembert",
        "longformer",
        "data2vec-text",
        "xmod",
        "roberta-prelayernorm",
        "mpnet",
        "luke",
        "ibert",
    }
)
FAST_FILE = "tokenizer.json"
# what transformers turns into a fast tokenizer without tokenizer.json (WordPiece; byte-level BPE)
CONVERTIBLE = (("vocab.txt",), ("vocab.json", "merges.txt"))
SENTENCEPIECE = (
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "sentencepiece.model",
)
RUN_QA_SAYS = (
    "hpcqa, like transformers' run_qa.py, works only with a fast tokenizer (it maps answers onto tokens with "
    "the offsets only a fast tokenizer gives)"
)


def position_limit(config: Mapping[str, Any]) -> tuple[int | None, str]:
    """-> (the longest sequence the model's positions take, or None: no absolute bound; how that was read)."""
    kind = str(config.get("model_type") or "?")
    most = config.get("max_position_embeddings")
    if not isinstance(most, int) or isinstance(most, bool) or most <= 0:
        return None, f"the {kind} config names no max_position_embeddings"
    if kind.startswith("deberta") and config.get("position_biased_input") is False:
        return None, f"the {kind} model uses relative positions only"
    if kind in OFFSET_POSITIONS:
        pad = config.get("pad_token_id")
        pad = pad if isinstance(pad, int) and not isinstance(pad, bool) and pad >= 0 else 1
        return most - pad - 1, (
            f"max_position_embeddings {most}, less {pad + 1} ({kind} numbers positions from pad_token_id + 1)"
        )
    return most, f"max_position_embeddings {most}"


def tokenizer_kind(files: Iterable[str]) -> tuple[str, str]:
    """A model folder's file names -> ("fast" | "convertible" | "sentencepiece" | "none", which files)."""
    names = set(files)
    if FAST_FILE in names:
        return "fast", FAST_FILE
    for group in CONVERTIBLE:
        if set(group) <= names:
            return "convertible", " + ".join(group)
    piece = sorted(names.intersection(SENTENCEPIECE))
    if piece:
        return "sentencepiece", piece[0]
    return "none", ""


def unknown_share(
    sequences: Iterable[Iterable[int]], unk_id: int | None, special: Iterable[int] = ()
) -> tuple[float, int]:
    """The share of tokens (special tokens left out) that are the unknown token (None: it has none, byte-level BPE).
    -> (share, tokens counted)."""
    skip = set(special) - {unk_id}  # a set of ints; None is in no token list
    unknown = total = 0
    for ids in sequences:
        for t in ids:
            if t in skip:
                continue
            total += 1
            unknown += t == unk_id
    return (unknown / total if total else 0.0), total


# The QA classes that call transformers' attention interface (`_supports_attention_backend`) in the pinned
# transformers: hpcqa's attention (model.attention = "auto" or "hpcqa") plugs in there. tests/test_user_models.py
# holds this table to the installed transformers; a type in neither table is decided at the rank.
TAKES_ATTENTION_FUNCTION = frozenset(
    {
        "bert",
        "roberta",
        "distilbert",
        "modernbert",
        "electra",
        "albert",
        "xlm-roberta",
        "camembert",
        "mobilebert",
        "ernie",
    }
)
OWN_ATTENTION = {
    "deberta": "DeBERTa's disentangled attention, eager",
    "deberta-v2": "DeBERTa's disentangled attention, eager",
    "longformer": "Longformer's sliding-window attention, eager",
    "big_bird": "BigBird's block-sparse attention, eager (full attention where a sequence is too short for its "
    "blocks)",
    "mpnet": "MPNet's own attention, eager",
}
BUILTIN_TYPES = {"builtin:minilm": "bert", "builtin:tiny-bert": "bert"}


def attention_prediction(
    model_type: str | None, setting: str, compiled: bool = False
) -> tuple[str, str, bool]:
    """model.attention for a model type -> (what runs, why, certain?). setting "hpcqa" for a type that runs its own
    attention is the caller's to refuse (certain and not hpcqa's)."""
    if model_type in OWN_ATTENTION:
        return (
            OWN_ATTENTION[model_type],
            f"the {model_type} model takes no attention function",
            True,
        )
    takes = model_type in TAKES_ATTENTION_FUNCTION
    if setting in ("sdpa", "eager"):
        return (
            "torch's SDPA" if setting == "sdpa" else "transformers' eager",
            f"model.attention = {setting}",
            takes,
        )
    if takes and setting == "hpcqa":
        return "hpcqa", "model.attention = hpcqa", True
    if takes and compiled:
        return "hpcqa", "train.compile: hpcqa's, which Inductor traces", True
    if takes:
        return (
            "fused (compiled on the node at first use; hpcqa's where it cannot be built)",
            f"the {model_type} model takes an attention function",
            True,
        )
    return (
        "hpcqa or the model's own",
        f"{model_type or 'type unknown here'}: the rank decides",
        False,
    )
