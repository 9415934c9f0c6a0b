"""A synthetic SQuAD-format data set: deterministic, seeded, real character spans.

Each context states 4-6 facts about 2-3 invented entities in shuffled order; each question asks for
one fact, so answering needs matching the question's entity and relation to the right sentence (a
model can't just pick the first name). With `negatives`, some questions ask for a relation the context
doesn't state (SQuAD v2 no-answer). The `first_fact` baseline -- answer with the first fact's value --
is recorded with every question so results can show how far above a trivial answer a model gets.

It is synthetic: numbers on it show that the pipeline learns, not SQuAD quality.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from hpcqa.fsutil import atomic_write_text

SYL = ["ka", "lo", "mi", "ren", "to", "va", "zu", "bel", "dor", "fi", "gan", "hu", "jor", "kel", "mar",
       "nor", "pel", "quin", "ros", "sil", "tam", "ul", "vex", "wen", "yar", "zen"]
FIRST = ["Ada", "Boris", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira",
         "Lars", "Mona", "Nils", "Olga", "Pavel", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wim"]
COLORS = ["red", "green", "blue", "yellow", "white", "black", "orange", "purple", "silver", "golden"]
FILLER = ["The region is known for its mild winters.", "Many travellers pass through in spring.",
          "Local markets open early in the morning.", "The old roads were rebuilt last century.",
          "Historians still debate its early records.", "Fishing remains a common trade there."]


def _name(rng: random.Random, parts: int = 2) -> str:
    return "".join(rng.choice(SYL) for _ in range(parts)).capitalize()


RELATIONS = {
    "capital": ("The capital of {e} is {v}.", "What is the capital of {e}?", lambda r: _name(r, 3)),
    "founder": ("{e} was founded by {v}.", "Who founded {e}?", lambda r: f"{r.choice(FIRST)} {_name(r, 2)}"),
    "year": ("{e} was established in {v}.", "In which year was {e} established?", lambda r: str(r.randint(1100, 1990))),
    "river": ("The main river of {e} is the {v}.", "What is the main river of {e}?", lambda r: _name(r, 2)),
    "population": ("{e} has a population of {v} people.", "How many people live in {e}?",
                   lambda r: f"{r.randint(2, 990)},{r.randint(0, 999):03d}"),
    "color": ("The flag of {e} is mostly {v}.", "What color is the flag of {e}?", lambda r: r.choice(COLORS)),
}


def example(rng: random.Random, idx: int, negatives: bool) -> dict:
    entities = [_name(rng, 2) for _ in range(rng.randint(2, 3))]
    facts = []
    for e in entities:
        for rel in rng.sample(sorted(RELATIONS), rng.randint(2, 3)):
            facts.append((e, rel, RELATIONS[rel][2](rng)))
    rng.shuffle(facts)
    facts = facts[:6]
    sentences = [RELATIONS[rel][0].format(e=e, v=v) for e, rel, v in facts]
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
            return {"id": f"syn-{idx}", "question": RELATIONS[rel][1].format(e=e), "context": context,
                    "answers": [], "is_impossible": True, "first_fact": first_value}
    e, rel, v = rng.choice(facts)
    sentence = RELATIONS[rel][0].format(e=e, v=v)
    start = context.index(sentence) + sentence.index(v) if rel != "river" else \
        context.index(sentence) + sentence.rindex(v)
    assert context[start:start + len(v)] == v
    return {"id": f"syn-{idx}", "question": RELATIONS[rel][1].format(e=e), "context": context,
            "answers": [{"text": v, "answer_start": start}], "is_impossible": False, "first_fact": first_value}


def squad_json(n: int, seed: int, negatives: bool = False, title: str = "synthetic") -> dict:
    """Official SQuAD nested format: data[].paragraphs[].qas[]."""
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        ex = example(rng, i, negatives)
        qa = {"id": ex["id"], "question": ex["question"], "answers": ex["answers"],
              "first_fact": ex["first_fact"]}
        if negatives:
            qa["is_impossible"] = ex["is_impossible"]
        paragraphs.append({"context": ex["context"], "qas": [qa]})
    return {"version": "v2.0" if negatives else "1.1", "data": [{"title": title, "paragraphs": paragraphs}]}


def write(path: str | Path, n: int, seed: int, negatives: bool = False) -> Path:
    """Write atomically (several ranks or jobs may race for the same cache file)."""
    p = Path(path)
    if p.exists():
        return p
    return atomic_write_text(p, json.dumps(squad_json(n, seed, negatives)))


def corpus(n: int = 400, seed: int = 7) -> list[str]:
    """Text for training the tiny test tokenizer."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ex = example(rng, i, negatives=True)
        out += [ex["context"], ex["question"]]
    return out
