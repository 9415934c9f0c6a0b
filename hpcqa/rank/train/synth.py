"""A synthetic SQuAD-format data set: deterministic, seeded, real character spans.

Each context states 4-6 facts about 2-3 invented entities in shuffled order; each question asks for
one fact, so answering needs matching the question's entity and relation to the right sentence (a
model can't just pick the first name). With `negatives`, some questions ask for a relation the context
doesn't state (SQuAD v2 no-answer). The `first_fact` baseline -- answer with the first fact's value --
is recorded with every question so results can show how far above a trivial answer a model gets.

Two shapes (`data.synthetic_shape`):
- "short": contexts of 4-8 short sentences (~40-90 tokens): fast, for the quickstart and tests;
- "squad": contexts and questions as long as SQuAD's -- the facts are embedded in prose (sentences drawn from a
  small grammar of common English words and invented names) until the context reaches a length drawn from a
  log-normal fitted to SQuAD v1.1 (paragraphs of ~120 words on average, a long tail: some run past 384 tokens
  and split into several features at max_seq_length 384 / doc_stride 128, as ~1.3 % more features than
  examples on SQuAD v1.1 train and ~2.4 % on dev (the Hugging Face course's bert-base-cased counts: 87,599 ->
  88,729, 10,570 -> 10,822); questions of ~10 words. `tests/test_synth.py` measures it with BERT's WordPiece.

It is synthetic: numbers on it show that the pipeline learns, not SQuAD quality.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from hpcqa.fsutil import atomic_write_text

SYL = [
    "ka",
    "lo",
    "mi",
    "ren",
    "to",
    "va",
    "zu",
    "bel",
    "dor",
    "fi",
    "gan",
    "hu",
    "jor",
    "kel",
    "mar",
    "nor",
    "pel",
    "quin",
    "ros",
    "sil",
    "tam",
    "ul",
    "vex",
    "wen",
    "yar",
    "zen",
]
FIRST = [
    "Ada",
    "Boris",
    "Clara",
    "Dmitri",
    "Elena",
    "Farid",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Lars",
    "Mona",
    "Nils",
    "Olga",
    "Pavel",
    "Rosa",
    "Sven",
    "Tara",
    "Umar",
    "Vera",
    "Wim",
]
COLORS = [
    "red",
    "green",
    "blue",
    "yellow",
    "white",
    "black",
    "orange",
    "purple",
    "silver",
    "golden",
]
FILLER = [
    "The region is known for its mild winters.",
    "Many travellers pass through in spring.",
    "Local markets open early in the morning.",
    "The old roads were rebuilt last century.",
    "Historians still debate its early records.",
    "Fishing remains a common trade there.",
]


def _name(rng: random.Random, parts: int = 2) -> str:
    return "".join(rng.choice(SYL) for _ in range(parts)).capitalize()


RELATIONS = {
    "capital": ("The capital of {e} is {v}.", "What is the capital of {e}?", lambda r: _name(r, 3)),
    "founder": (
        "{e} was founded by {v}.",
        "Who founded {e}?",
        lambda r: f"{r.choice(FIRST)} {_name(r, 2)}",
    ),
    "year": (
        "{e} was established in {v}.",
        "In which year was {e} established?",
        lambda r: str(r.randint(1100, 1990)),
    ),
    "river": (
        "The main river of {e} is the {v}.",
        "What is the main river of {e}?",
        lambda r: _name(r, 2),
    ),
    "population": (
        "{e} has a population of {v} people.",
        "How many people live in {e}?",
        lambda r: f"{r.randint(2, 990)},{r.randint(0, 999):03d}",
    ),
    "color": (
        "The flag of {e} is mostly {v}.",
        "What color is the flag of {e}?",
        lambda r: r.choice(COLORS),
    ),
}


SHAPES = ("short", "squad")

# the "squad" shape: prose of common words around the facts, lengths drawn to SQuAD v1.1's
CONTEXT_WORDS_MEDIAN, CONTEXT_WORDS_SIGMA = (
    101.0,
    0.47,
)  # log-normal: mean ~120 words, ~1-3 % past 384 tokens
CONTEXT_WORDS_RANGE = (30, 700)
QUESTION_WORDS_MEDIAN, QUESTION_WORDS_SIGMA = 8.5, 0.30  # mean ~10 words
GRAMMAR = {
    "subject": [
        "The old harbour",
        "The northern district",
        "A later survey",
        "The regional council",
        "Its university",
        "The main railway",
        "A local guild",
        "The cathedral chapter",
        "The provincial archive",
        "Its first museum",
        "The coastal trade",
        "A small community of weavers",
        "The royal court",
        "The eastern valley",
        "Most of the early settlers",
        "The annual festival",
        "A second bridge",
        "The textile industry",
    ],
    "verb": [
        "expanded",
        "declined",
        "was rebuilt",
        "gained importance",
        "was described",
        "remained active",
        "attracted visitors",
        "was reorganised",
        "lost much of its influence",
        "was recorded",
        "changed hands several times",
        "grew steadily",
        "was largely destroyed",
        "became a centre of learning",
    ],
    "when": [
        "during the following decades",
        "after the great flood",
        "in the late medieval period",
        "under the new administration",
        "throughout the nineteenth century",
        "before the war",
        "in the years that followed",
        "after a long dispute with its neighbours",
        "during a period of reform",
        "for almost two hundred years",
        "in the early modern era",
    ],
    "tail": [
        "according to contemporary accounts",
        "as several historians have noted",
        "despite repeated setbacks",
        "which shaped the character of the town",
        "although the records are incomplete",
        "while trade with the interior continued",
        "and its population rose accordingly",
        "as described in a survey of the period",
        "with support from wealthy merchants",
    ],
}
Q_PREFIX = [
    "According to the passage,",
    "Based on the text,",
    "In the account given,",
    "As the context states,",
]
Q_CLAUSE = [
    "the place whose old harbour expanded",
    "the region described in the survey",
    "which is mentioned in the passage",
    "known for its annual festival",
    "whose records are incomplete",
    "where the textile industry grew",
]


def _prose(rng: random.Random, names: list[str]) -> str:
    """One sentence of filler prose: common words, now and then a year or an invented name."""
    g = GRAMMAR
    parts = [rng.choice(g["subject"]), rng.choice(g["verb"]), rng.choice(g["when"])]
    if rng.random() < 0.6:
        parts.append(rng.choice(g["tail"]))
    if rng.random() < 0.3:
        parts.insert(1, f"of {rng.choice(names)}")
    if rng.random() < 0.25:
        parts.append(f"in {rng.randint(1050, 1990)}")
    return " ".join(parts) + "."


def _words(text: str) -> int:
    return len(text.split())


def _lognormal_int(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return int(min(max(round(median * math.exp(rng.gauss(0.0, sigma))), lo), hi))


def _long_question(rng: random.Random, question: str) -> str:
    """A question grown to a SQuAD-like length with a prefix and a clause that do not change what it asks."""
    target = _lognormal_int(rng, QUESTION_WORDS_MEDIAN, QUESTION_WORDS_SIGMA, 4, 30)
    q = question
    if _words(q) < target and rng.random() < 0.7:
        q = f"{rng.choice(Q_PREFIX)} {q[0].lower()}{q[1:]}"
    if _words(q) < target:
        clause = rng.choice(Q_CLAUSE)
        q = f"{q[:-1]}, {clause}?"
    return q


def example(rng: random.Random, idx: int, negatives: bool, shape: str = "short") -> dict:
    entities = [_name(rng, 2) for _ in range(rng.randint(2, 3))]
    facts = []
    for e in entities:
        for rel in rng.sample(sorted(RELATIONS), rng.randint(2, 3)):
            facts.append((e, rel, RELATIONS[rel][2](rng)))
    rng.shuffle(facts)
    facts = facts[:6]
    sentences = [RELATIONS[rel][0].format(e=e, v=v) for e, rel, v in facts]
    if shape == "squad":
        target = _lognormal_int(
            rng, CONTEXT_WORDS_MEDIAN, CONTEXT_WORDS_SIGMA, *CONTEXT_WORDS_RANGE
        )
        words = sum(_words(x) for x in sentences)
        while words < target:
            extra = _prose(rng, entities)
            sentences.insert(rng.randint(0, len(sentences)), extra)
            words += _words(extra)
    else:
        for _ in range(rng.randint(0, 2)):
            sentences.insert(rng.randint(0, len(sentences)), rng.choice(FILLER))
    context = " ".join(sentences)
    first_value = facts[0][2]
    if negatives and rng.random() < 1 / 3:
        stated = {(e, rel) for e, rel, _ in facts}
        e = rng.choice(entities)
        missing = [rel for rel in sorted(RELATIONS) if (e, rel) not in stated]
        if missing:
            rel = rng.choice(missing)
            question = RELATIONS[rel][1].format(e=e)
            return {
                "id": f"syn-{idx}",
                "context": context,
                "question": _long_question(rng, question) if shape == "squad" else question,
                "answers": [],
                "is_impossible": True,
                "first_fact": first_value,
            }
    e, rel, v = rng.choice(facts)
    sentence = RELATIONS[rel][0].format(e=e, v=v)
    start = (
        context.index(sentence) + sentence.index(v)
        if rel != "river"
        else context.index(sentence) + sentence.rindex(v)
    )
    assert context[start : start + len(v)] == v
    question = RELATIONS[rel][1].format(e=e)
    return {
        "id": f"syn-{idx}",
        "question": _long_question(rng, question) if shape == "squad" else question,
        "context": context,
        "answers": [{"text": v, "answer_start": start}],
        "is_impossible": False,
        "first_fact": first_value,
    }


def squad_json(
    n: int, seed: int, negatives: bool = False, title: str = "synthetic", shape: str = "short"
) -> dict:
    """Official SQuAD nested format: data[].paragraphs[].qas[]."""
    if shape not in SHAPES:
        raise ValueError(f"synthetic shape {shape!r}: one of {', '.join(SHAPES)}")
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        ex = example(rng, i, negatives, shape)
        qa = {
            "id": ex["id"],
            "question": ex["question"],
            "answers": ex["answers"],
            "first_fact": ex["first_fact"],
        }
        if negatives:
            qa["is_impossible"] = ex["is_impossible"]
        paragraphs.append({"context": ex["context"], "qas": [qa]})
    return {
        "version": "v2.0" if negatives else "1.1",
        "data": [{"title": title, "paragraphs": paragraphs}],
    }


def write(
    path: str | Path, n: int, seed: int, negatives: bool = False, shape: str = "short"
) -> Path:
    """Write atomically (several ranks or jobs may race for the same cache file)."""
    p = Path(path)
    if p.exists():
        return p
    return atomic_write_text(p, json.dumps(squad_json(n, seed, negatives, shape=shape)))


def corpus(n: int = 400, seed: int = 7) -> list[str]:
    """Text for training the tiny test tokenizer."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ex = example(rng, i, negatives=True)
        out += [ex["context"], ex["question"]]
    return out
