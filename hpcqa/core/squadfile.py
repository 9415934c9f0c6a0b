"""SQuAD-format files, read by parsing (never by sniffing bytes). Standard library only (pyarrow for a folder written
by `datasets`' save_to_disk).

One reader for the submit host's checks (preflight) and the ranks' loader (train/data.py). A file is:
- `squad`: the official nested JSON, {"version"?, "data": [{"title"?, "paragraphs": [{"context", "qas": [...]}]}]};
  a question's answers are what decides whether it is answerable, as in the official v2.0 evaluation script
  (`is_impossible` is not read by it: a question marked so that still has answers counts as answerable, and
  `facts()` names it);
- `flat`: {"data": [{"id", "title"?, "context", "question", "answers"}, ...]}, what run_qa.py reads
  with `field="data"` (transformers' own SQuAD sample);
- `jsonl`: one flat record per line.
The whole text is parsed as one JSON document first; only when that fails is it read line by line.
`answers` may be a list of {"text", "answer_start"} or HF's columnar {"text": [...], "answer_start": [...]};
`title` is optional everywhere. Every row comes out as
{id, title, context, question, answers: {"text": [...], "answer_start": [...]}, first_fact}.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any, Iterator

from hpcqa import fsutil

READER_VERSION = "4"  # part of the feature-cache key: bump when rows would come out differently


DATA_MAX_BYTES = (
    8 << 30
)  # SQuAD v2's train set is 40 MB; a data file is read whole, so a larger one is a mistake


def _data_text(path: str | Path) -> str:
    """A data file's text, through the one door: a regular file (a link to one is followed: data is linked), never
    a FIFO or a device, at most DATA_MAX_BYTES, UTF-8 -- a byte-order mark before it dropped (Excel's "CSV UTF-8",
    Windows editors): it would be part of the first column's name, or stop the JSON reader."""
    return fsutil.read_text(path, DATA_MAX_BYTES, follow=True).removeprefix("\ufeff")


def parse(text: str) -> tuple[str, list[dict[str, Any]]]:
    """-> (format, raw records: nested ones flattened, no other change). ValueError with the line."""
    fmt, raw, _ = _parse(text)
    return fmt, raw


def _parse(text: str) -> tuple[str, list[dict[str, Any]], str | None]:
    """parse(), and the version the document declares ("version": "v2.0"), from one json.loads."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as whole:
        return "jsonl", _json_lines(text, whole), None
    declared = (
        doc.get("version")
        if isinstance(doc, dict) and isinstance(doc.get("version"), str)
        else None
    )
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        items = [x for x in doc["data"] if isinstance(x, dict)]
        if any("paragraphs" in x for x in items):
            return "squad", list(_flatten(items)), declared
        return "flat", items, declared
    if isinstance(doc, dict):
        return "jsonl", [doc], None  # a JSON-lines file of one record
    raise ValueError('expected {"data": [...]} (SQuAD JSON) or one JSON object per line')


def _json_lines(text: str, whole: json.JSONDecodeError) -> list[dict[str, Any]]:
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            err = whole if i == 1 else e
            raise ValueError(
                f"line {err.lineno if i == 1 else i}, column {err.colno}: {err.msg}"
            ) from None
        if not isinstance(row, dict):
            raise ValueError(
                f"line {i}: a JSON {type(row).__name__}, not an object with id, context, question"
            )
        rows.append(row)
    return rows


def _flatten(articles: list[dict]) -> Iterator[dict[str, Any]]:
    for a in articles:
        for p in a.get("paragraphs") or []:
            for q in p.get("qas") or []:
                yield {
                    "id": q.get("id"),
                    "title": a.get("title"),
                    "context": p.get("context"),
                    "question": q.get("question"),
                    "answers": q.get("answers") or [],
                    "first_fact": q.get("first_fact"),
                    "is_impossible": q.get("is_impossible"),
                }


def columnar(answers: Any) -> dict[str, list]:
    """A list of {text, answer_start} or HF's columnar dict -> {"text": [...], "answer_start": [...]}."""
    if isinstance(answers, dict):
        texts = list(answers.get("text") or [])
        starts = list(answers.get("answer_start") or [])
    else:
        answers = [a for a in answers or [] if isinstance(a, dict)]
        texts = [a.get("text", "") for a in answers]
        starts = [a.get("answer_start", -1) for a in answers]
    return {"text": [str(t) for t in texts], "answer_start": [_int(s) for s in starts]}


def _int(x: Any) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return -1


# run_qa.py's --question_column_name, --context_column_name, --answer_column_name, with its defaults
DEFAULT_COLUMNS = (("question", "question"), ("context", "context"), ("answers", "answers"))


def column_map(data: Any) -> tuple[tuple[str, str], ...]:
    """A DataConfig's mapping: (hpcqa's name, the data's name) for question, context and answers."""
    return (
        ("question", data.question_column),
        ("context", data.context_column),
        ("answers", data.answer_column),
    )


def answers_of(value: Any, row: dict[str, Any], context: str) -> dict[str, list]:
    """The answer column's value -> columnar answers. Besides SQuAD's forms, a plain text (a CSV cell, a column
    such as answer_text) is one answer, at the row's `answer_start` when it has one, else where the text first
    occurs in the context; a cell holding JSON (a CSV of HF's columnar answers) is read as JSON."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("{", "[")):
            try:
                return columnar(json.loads(text))
            except ValueError:
                pass
        if not value:
            return {"text": [], "answer_start": []}
        start = _int(row["answer_start"]) if "answer_start" in row else context.find(value)
        return {"text": [value], "answer_start": [start]}
    return columnar(value)


def normalise(row: dict[str, Any], columns: Any = DEFAULT_COLUMNS) -> dict[str, Any]:
    """A raw record -> hpcqa's row; `columns`: (hpcqa's name, the data's name) pairs for question, context and
    answers (data.question_column, ...)."""
    names = dict(columns)
    context = str(row.get(names["context"]) or "")
    return {
        "id": "" if row.get("id") is None else str(row["id"]),
        "title": str(row.get("title") or ""),
        "context": context,
        "question": str(row.get(names["question"]) or ""),
        "answers": answers_of(row.get(names["answers"]), row, context),
        "first_fact": str(row.get("first_fact") or ""),
    }


def columns_problem(
    raw: list[dict[str, Any]], columns: Any = DEFAULT_COLUMNS, answers: bool = True
) -> str | None:
    """The first record lacks a column the mapping names (None: it has them all): which are expected, which
    found. answers=False for a test split (predictions only: its answers, if any, are not used); elsewhere a
    missing answer column is refused here, not read as every question unanswerable (SQuAD v2 data)."""
    if not raw:
        return None
    names = dict(columns)
    found = list(raw[0])
    needed = ("question", "context", "answers") if answers else ("question", "context")
    missing = [f"{names[k]!r}" for k in needed if names[k] not in raw[0]]
    if not missing:
        return None
    sep = next((c for c in ";\t|" if len(found) == 1 and c in found[0]), None)
    if sep:  # a spreadsheet's export in another locale: one column whose name holds them all
        return f"one column, {found[0][:80]!r}: its header is separated by {sep!r}, not by commas"
    return (
        f"no column {', '.join(missing)} (expected id, {names['question']}, {names['context']}, "
        f"{names['answers']}; found {', '.join(found[:12]) or 'none'})"
    )


def saved_dataset(folder: Path, split: str) -> Path:
    """The Dataset folder of a save_to_disk folder: the folder itself (a Dataset), or its `split` (a DatasetDict).
    ValueError naming what the folder is and holds."""
    if (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file():
        return folder
    if (folder / "dataset_dict.json").is_file():
        doc = json.loads(fsutil.read_text(folder / "dataset_dict.json", 1 << 20, follow=True))
        splits = [
            x
            for x in (doc.get("splits") if isinstance(doc, dict) else None) or []
            if isinstance(x, str)
        ]
        if split in splits and (folder / split / "state.json").is_file():
            return folder / split
        raise ValueError(
            f"a DatasetDict saved with save_to_disk without a {split!r} split (splits: {', '.join(splits) or 'none'})"
        )
    raise ValueError(
        "a folder, but not one written by datasets' save_to_disk (no state.json or dataset_dict.json)"
    )


def saved_splits(folder: Path) -> list[str]:
    """The splits of a save_to_disk folder: a DatasetDict's (those of hpcqa's three it has), or ["train"] for a
    Dataset; [] when it is neither."""
    if (folder / "state.json").is_file():
        return ["train"]
    have = []
    for split in ("train", "validation", "test"):
        try:
            saved_dataset(folder, split)
        except (ValueError, OSError):
            continue
        have.append(split)
    return have


def saved_rows(folder: Path, split: str) -> list[dict[str, Any]]:
    """The records of a save_to_disk folder's Dataset (its Arrow files, in order), read with pyarrow."""
    import pyarrow as pa  # heavy (0.3 s): only for a save_to_disk folder

    ds = saved_dataset(folder, split)
    state = json.loads(fsutil.read_text(ds / "state.json", 16 << 20, follow=True))
    files = [f.get("filename") for f in state.get("_data_files") or [] if isinstance(f, dict)]
    rows: list[dict[str, Any]] = []
    for name in files:
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise ValueError(f"{ds}/state.json names a data file {name!r} outside the folder")
        os.close(
            fsutil.open_regular(ds / name, follow=True)
        )  # a FIFO would block pyarrow's open for ever
        with pa.memory_map(str(ds / name)) as source:
            rows += pa.ipc.open_stream(source).read_all().to_pylist()
    return rows


def _csv_rows(text: str) -> list[dict[str, Any]]:
    """A CSV file with a header row, as datasets' csv loader reads one: every cell text."""
    try:
        return [dict(r) for r in csv.DictReader(io.StringIO(text, newline=""))]
    except csv.Error as e:
        raise ValueError(f"not CSV: {e}") from None


def read(
    path: str | Path, columns: Any = DEFAULT_COLUMNS, split: str = "train"
) -> tuple[str, list[dict[str, Any]]]:
    """-> (format, normalised rows). OSError, UnicodeDecodeError or ValueError (with the line)."""
    fmt, rows, _ = read_with_facts(path, columns, split)
    return fmt, rows


def read_with_facts(
    path: str | Path, columns: Any = DEFAULT_COLUMNS, split: str = "train"
) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """-> (format, normalised rows, facts: what the file says of its SQuAD version). A `.csv` file is read as CSV
    (a header row, then one example a row); a folder written by `datasets`' save_to_disk as its Dataset, or as the
    `split` of its DatasetDict; anything else as JSON or JSON lines."""
    try:
        if Path(path).is_dir():
            fmt, raw, declared = "save_to_disk", saved_rows(Path(path), split), None
        elif str(path).lower().endswith(".csv"):
            fmt, raw, declared = "csv", _csv_rows(_data_text(path)), None
        else:
            fmt, raw, declared = _parse(_data_text(path))
        problem = columns_problem(raw, columns, answers=split != "test")
        if problem:
            raise ValueError(problem)
        rows = [normalise(r, columns) for r in raw]
        return fmt, rows, facts(rows, declared, raw)
    except (AttributeError, TypeError, KeyError, IndexError, OverflowError, RecursionError) as e:
        # a file of another shape (a string where paragraphs are, 1e400 as a start, 100,000 levels): said, not raised
        raise ValueError(
            f"not of the shape SQuAD data has ({type(e).__name__}: {str(e)[:120]})"
        ) from None


def facts(
    rows: list[dict[str, Any]], declared: str | None = None, raw: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The version the file declares ("version": "v2.0"), its unanswerable questions (no answer), and the
    malformed ones: marked is_impossible yet with answers (the official script scores them as answerable).
    rows: anything with columnar answers ({"answers": {"text": [...]}}), a file's or a hub dataset's."""
    marked = [
        str(r.get("id"))
        for r, row in zip(raw or [], rows)
        if r.get("is_impossible") and row["answers"]["text"]
    ]
    return {
        "declared": declared,
        "rows": len(rows),
        "unanswerable": sum(1 for row in rows if not row["answers"]["text"]),
        "impossible_with_answers": marked,
    }


def version_check(facts_: dict[str, Any], v2: bool, where: str) -> tuple[str | None, list[str]]:
    """(a mismatch that would mis-score the data, or None; warnings) for data.version_2_with_negative = v2."""
    declared = (facts_.get("declared") or "").lstrip("v")
    n, unanswerable = facts_["rows"], facts_["unanswerable"]
    warnings = []
    bad = facts_.get("impossible_with_answers") or []
    if bad:
        warnings.append(
            f"{where}: {len(bad)} question(s) marked is_impossible still have answers (first: "
            f"{bad[0]!r}); scored as answerable, as the official SQuAD v2.0 script does"
        )
    is_v2 = declared.startswith("2") or unanswerable > 0
    if is_v2 and not v2:
        why = (
            (f"it declares version {facts_['declared']!r}" if declared.startswith("2") else "")
            + (", " if declared.startswith("2") and unanswerable else "")
            + (f"{unanswerable} of {n} questions have no answer" if unanswerable else "")
        )
        return (
            f"{where} is SQuAD v2 data ({why}), but data.version_2_with_negative = false: by v1 rules an "
            "unanswerable question has no gold answer to match, and even perfect predictions would score "
            "far below 100"
        ), warnings
    if v2 and n and unanswerable == n:
        warnings.append(
            f'{where}: none of its {n} questions has an answer: every prediction of "no answer" scores 100; '
            "check that data.answer_column names the column with the answers"
        )
    if v2 and not is_v2 and declared.startswith("1"):
        warnings.append(
            f"{where} is SQuAD v{declared} data (no unanswerable question) scored by v2 rules: the "
            'model may answer "" (no answer); set data.version_2_with_negative = false'
        )
    return None, warnings


def problems(rows: list[dict[str, Any]]) -> list[str]:
    """What makes rows unusable (empty when fine): missing fields, repeated ids."""
    out = []
    no_id = [i for i, r in enumerate(rows) if not r["id"]]
    if no_id:
        out.append(f"{len(no_id)} example(s) without an id (first: #{no_id[0]})")
    missing = [
        f"{r['id']!r}" if r["id"] else f"#{i}"
        for i, r in enumerate(rows)
        if not r["context"].strip() or not r["question"].strip()
    ]
    if missing:
        out.append(
            f"{len(missing)} example(s) whose context or question is empty or only whitespace "
            f"(first: {', '.join(missing[:3])})"
        )
    seen: set[str] = set()
    dup = []
    for r in rows:
        if r["id"] and r["id"] in seen:
            dup.append(r["id"])
        seen.add(r["id"])
    if dup:
        out.append(
            f"{len(dup)} repeated id(s) (first: {dup[0]!r}); answers are matched to questions by id"
        )
    return out
