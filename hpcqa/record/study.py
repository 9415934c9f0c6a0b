"""A search's study (Optuna): opened, checked, asked, told and reported to. The one reader and writer of a study.

Where: sweep.storage (a database URL) or, by default, Optuna's journal file in the job root (JobRoot.search_journal:
appends under a lock file, which Optuna documents as safe for processes on several NFS clients). The study is named
after job.name and carries its search's digest (core/search.py): a study of another search under that name is
refused, naming the storage; the same search submitted again goes on where it stopped.

Trials are asked in batches: the batch's sampler is seeded with sweep.seed + the trials the study holds, so the dry
run, asking an in-memory copy, predicts what submit asks; submit then enqueues exactly those values (what the dry run
showed is what runs). A trial's ranks report its metric at each evaluation (rank 0) and ask the pruner; whoever runs
the batch tells the study how each trial ended (COMPLETE with its metric, PRUNED, FAIL).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence
from urllib.parse import quote

from hpcqa import fsutil
from hpcqa.core.search import MEDIAN_STARTUP, Dim, Search, TrialRef, redacted, shown_params
from hpcqa.errors import ConfigError, HpcqaError

EXTRA = "pip install 'hpcqa[search]'"


def optuna() -> Any:
    """Optuna, or an error naming the extra (sweep.strategy is what needs it)."""
    try:
        import optuna  # optional: the [search] extra

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return optuna
    except ImportError:
        raise ConfigError(
            "sweep.strategy",
            "a search needs Optuna, which is not installed here",
            f'{EXTRA} (or strategy = "grid")',
        ) from None


def storage_url(spec: Search, journal: Path) -> str:
    """Where the study is: sweep.storage, or the journal file's path."""
    return spec.storage or str(journal)


def _storage(url: str) -> Any:
    """The storage at url, opened after _exists's check (a path that could never hold a study -- another program's
    SQLite file, a cut journal -- is refused first)."""
    _exists(url)
    return _open_storage(url)


def _open_storage(url: str) -> Any:
    op = optuna()
    if "://" in url:
        try:
            return op.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
        except Exception as e:  # noqa: BLE001 -- any driver's error: the storage cannot be used
            raise ConfigError(
                "sweep.storage",
                f"cannot open the study storage {redacted(url)}: {type(e).__name__}: "
                f"{redacted(str(e).splitlines()[0][:200]) if str(e) else ''}",
                _storage_fix(e),
            ) from None
    from optuna.storages.journal import JournalFileBackend

    journal = Path(url)  # _exists refused a link, a FIFO, a folder and a cut last line
    root = journal.parent.parent
    shared = root.is_dir() and bool(
        root.stat().st_mode & 0o050
    )  # job.group_readable: the root is 0750
    journal.parent.mkdir(parents=True, exist_ok=True, mode=0o750 if shared else 0o700)
    try:
        return op.storages.JournalStorage(JournalFileBackend(url))
    except Exception as e:  # noqa: BLE001 -- a damaged journal (a writer killed mid-line is Optuna's to skip)
        raise ConfigError(
            "sweep.storage",
            f"{url} is not a study journal hpcqa can read (Optuna's journal: one JSON operation a line; "
            f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})",
            "move it away to start the search over, or set job.name for a new search",
        ) from None


def _storage_fix(e: Exception) -> str:
    """The fix for a storage that did not open: the driver to install, or the server to check."""
    if isinstance(e, ImportError) or "import DB access module" in str(e):
        return "install the database's Python driver (psycopg2-binary for postgresql://, pymysql for mysql://)"
    return (
        "check the URL and that the database answers, or leave sweep.storage out (a journal file)"
    )


def sampler(spec: Search, asked: int) -> Any:
    op = optuna()
    seed = (spec.seed + asked) % 2**32
    if spec.strategy == "random":
        return op.samplers.RandomSampler(seed=seed)
    # TPE: random for its first trials (Optuna's 10, fewer for a small search), then the model of what scored
    return op.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(2, spec.trials // 3)))


def pruner(name: str, warmup: int = 0, min_trials: int = 1) -> Any:
    """Optuna's pruner; warmup: no trial is pruned before that step (the median's n_warmup_steps, successive
    halving's min_resource); min_trials: the median judges a step once that many completed trials reported there
    (its n_min_trials)."""
    op = optuna()
    if name == "median":
        return op.pruners.MedianPruner(
            n_startup_trials=MEDIAN_STARTUP, n_warmup_steps=warmup, n_min_trials=min_trials
        )
    if name == "halving":
        return op.pruners.SuccessiveHalvingPruner(min_resource=warmup or "auto")
    return op.pruners.NopPruner()


def distribution(d: Dim) -> Any:
    op = optuna().distributions
    if d.kind == "choice":
        return op.CategoricalDistribution(list(d.choices))
    if d.kind == "int":
        step = int(d.step) if d.step else 1
        return op.IntDistribution(int(d.low), int(d.high), log=d.log, step=step)
    return op.FloatDistribution(d.low, d.high, log=d.log, step=d.step)


def _mark(spec: Search) -> dict[str, Any]:
    j = spec.to_json()
    return {
        k: j[k]
        for k in (
            "strategy",
            "metric",
            "direction",
            "seed",
            "pruner",
            "pruner_warmup_steps",
            "pruner_min_trials",
            "space",
            "digest",
        )
    }


def open_study(spec: Search, name: str, url: str, create: bool = True, storage: Any = None) -> Any:
    """The search's study, made when missing (create) -- or ConfigError naming sweep.storage when the study there
    is another search's, or the storage cannot be read. storage: the one at url, opened already."""
    op, storage = optuna(), storage or _storage(url)
    try:
        study = (
            op.create_study(
                study_name=name,
                storage=storage,
                direction=spec.direction,
                sampler=sampler(spec, 0),
                pruner=pruner(spec.pruner, spec.pruner_warmup, spec.pruner_min_trials),
                load_if_exists=True,
            )
            if create
            else op.load_study(
                study_name=name,
                storage=storage,
                pruner=pruner(spec.pruner, spec.pruner_warmup, spec.pruner_min_trials),
            )
        )
        mark = study.user_attrs.get("hpcqa_search")
    except (HpcqaError, KeyError):
        raise
    except Exception as e:  # noqa: BLE001 -- a damaged journal or database: one line, the fix
        raise ConfigError(
            "sweep.storage",
            f"cannot read the study {name!r} at {redacted(url)}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
            "remove it to start the search over, or set job.name for a new search",
        ) from None
    if mark is None and (study.trials or study.direction.name.lower() != spec.direction):
        raise ConfigError(
            "sweep",
            f"the study {name!r} at {redacted(url)} was not made by an hpcqa search ({len(study.trials)} trials, "
            f"{study.direction.name.lower()})",
            "set another job.name (a new search), or give sweep.storage a storage of its own",
        )
    if (
        mark is None and create
    ):  # made just now (or by a submit killed right after making it: empty)
        study.set_user_attr("hpcqa_search", _mark(spec))
    elif mark is not None and mark.get("digest") != spec.digest:
        raise ConfigError(
            "sweep",
            f"the study {name!r} at {redacted(url)} is another search's (its space or settings differ: "
            f"{_difference(mark, _mark(spec))})",
            "set another job.name (a new search), or remove the study to start over",
        )
    return study


def _difference(theirs: dict, ours: dict) -> str:
    absent = {"pruner_warmup_steps": 0, "pruner_min_trials": 1}  # a study made before the setting
    for k in ("strategy", "metric", "direction", "seed", "pruner", *absent):
        if theirs.get(k, absent.get(k)) != ours.get(k):
            return f"sweep.{k} was {theirs.get(k, absent.get(k))!r}"[:160]
    if theirs.get("space") != ours.get("space"):
        return _space_difference(theirs.get("space"), ours.get("space") or [])
    return "digest"


def _space_difference(theirs: Any, ours: list[dict]) -> str:
    """The first searched key whose values differ, both ways shown as a config writes them."""
    was = (
        {d.get("key"): d for d in theirs if isinstance(d, dict)} if isinstance(theirs, list) else {}
    )
    now = {d["key"]: d for d in ours}
    for key in [*now, *(k for k in was if k not in now)]:
        if was.get(key) != now.get(key):
            return (f"sweep.{key} was {_shown_dim(was.get(key))}, now {_shown_dim(now.get(key))}")[
                :200
            ]
    return "the order of the searched keys"


def _shown_dim(d: dict | None) -> str:
    if d is None:
        return "not searched"
    if d.get("kind") == "choice":
        return "[" + ", ".join(json.dumps(c) for c in d.get("choices", [])) + "]"
    extra = ", log" if d.get("log") else (f", step {d['step']:g}" if d.get("step") else "")
    return f"{d.get('low'):g} .. {d.get('high'):g}{extra}"


class Peeked(NamedTuple):
    """What submit would run next: batch, (number, params) to run; refused, (number, params, why) asked but not run
    (their values cannot run together: told FAIL at claim); trials, the study's trials so far; repeats, (number,
    params, earlier) asked with the values of a trial that ended (told its outcome at claim, not run again)."""

    batch: list[tuple[int, dict[str, Any]]]
    refused: list[tuple[int, dict[str, Any], str]]
    trials: list[Any]
    repeats: list[tuple[int, dict[str, Any], int]] = []
    setup: Any = (
        None  # the study's record of its trials' setup (user attr hpcqa_setup), None before one
    )


Refuse = Callable[[int, dict[str, Any]], "str | None"]


def peek(spec: Search, name: str, url: str, refuse: Refuse | None = None) -> Peeked:
    """What submit would run next, asked of an in-memory copy (nothing written): stale trials to run again, as they
    were (RUNNING ones left by a submit that died), then fresh ones up to the batch's size. A fresh trial that
    refuse(number, params) finds wrong (values valid alone, not together) is told FAIL in the copy and the next one is
    asked, within sweep.trials; so is one with the values of a trial that completed or was pruned (a repeat: the
    same values and seed train the same model -- it is told that trial's outcome, not run). A point the batch
    holds already ends the batch there. An absent study is a new one."""
    op = optuna()
    found = _existing(spec, name, url)
    trials = found.trials if found is not None else []
    waiting = (op.trial.TrialState.RUNNING, op.trial.TrialState.WAITING)
    stale = [(t.number, dict(t.params)) for t in trials if t.state in waiting]
    ended = {_point(t.params): t for t in trials if t.state in _outcomes()}
    memory = op.create_study(direction=spec.direction, sampler=sampler(spec, len(trials)))
    memory.add_trials([t for t in trials if t.state.is_finished()])
    fresh: list[tuple[int, dict[str, Any]]] = []
    refused: list[tuple[int, dict[str, Any], str]] = []
    repeats: list[tuple[int, dict[str, Any], int]] = []
    want, number = spec.batch_size(len(trials)) - len(stale), len(trials)
    while len(fresh) < want and number < spec.trials:  # a batch is at most parallelism trials
        t = memory.ask({d.key: distribution(d) for d in spec.space})
        if _point(t.params) in {_point(p) for _, p in stale + fresh}:
            break  # a point this batch runs already: the batch ends here (asked again once it has ended)
        earlier = ended.get(_point(t.params))
        why = None if earlier is not None or not refuse else refuse(number, dict(t.params))
        if earlier is not None:
            memory.tell(t, _copied(earlier), state=earlier.state)
            repeats.append((number, dict(t.params), earlier.number))
        elif why:
            memory.tell(t, state=op.trial.TrialState.FAIL)
            refused.append((number, dict(t.params), why))
        else:
            fresh.append((number, dict(t.params)))
        number += 1
    setup = found.user_attrs.get("hpcqa_setup") if found is not None else None
    return Peeked(stale + fresh, refused, trials, repeats, setup)


def _outcomes() -> tuple:
    """The states a repeat copies: a completed trial's value, a pruned one's stop (a failed one runs again)."""
    ts = optuna().trial.TrialState
    return (ts.COMPLETE, ts.PRUNED)


def _copied(earlier: Any) -> float | None:
    """The value a repeat is told: the completed trial's (a pruned one's stop carries none)."""
    return earlier.value if earlier.state == optuna().trial.TrialState.COMPLETE else None


def _point(params: dict[str, Any]) -> str:
    """A trial's values as one comparable text (its keys sorted; 1 and 1.0 the same number)."""
    return json.dumps(
        {
            k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
            for k, v in params.items()
        },
        sort_keys=True,
    )


def _exists(url: str) -> bool:
    """Is there a study storage to read (nothing is made or written to find out: a dry run writes nothing)? A
    journal file, an SQLite file of Optuna's, or a server's URL (asked). A path that could never hold a study is
    refused naming sweep.storage."""
    if url.startswith("sqlite:"):
        db = Path(
            url.split("://", 1)[1][1:].split("?", 1)[0]
        )  # sqlite:////abs/path.db -> /abs/path.db
        if not db.exists() and not os.access(db.parent, os.W_OK | os.X_OK):
            raise ConfigError(
                "sweep.storage",
                f"the SQLite study {db} cannot be made: its folder {db.parent} is missing or not writable",
                "make the folder (shared by every node), or leave sweep.storage out (a journal in the job root)",
            )
        return db.exists() and db.stat().st_size > 0 and _optuna_sqlite(db)
    if "://" in url:
        return True
    journal = Path(url)
    if journal.parent.exists() and not journal.parent.is_dir():
        raise ConfigError(
            "sweep.storage",
            f"the study journal's folder {journal.parent} is a file",
            "move that file away (the job root's search/ folder holds the study)",
        )
    linked = [p for p in (journal, journal.parent) if p.is_symlink()]
    if (
        linked
    ):  # a link (even a dangling one) would send the study's writes elsewhere: someone else's file
        raise ConfigError(
            "sweep.storage",
            f"the study journal's path {linked[0]} is a symlink",
            "remove the link (the study lives in the job root), or give sweep.storage a database URL",
        )
    if journal.exists() and not journal.is_file():  # a FIFO would hang the reader; a folder
        raise ConfigError(
            "sweep.storage",
            f"the study journal {journal} is not a regular file (a folder, a FIFO or a device)",
            "move it away (the job root's search/ folder holds the study's journal file)",
        )
    if journal.exists():
        _whole_lines(journal)
        return True
    return False


def _whole_lines(journal: Path) -> None:
    """A journal whose last line is cut (a writer killed mid-write, or not a journal) is refused: Optuna reads past
    a cut last line (a write in progress) but its next write would be glued to it and the study unreadable. The fix
    names the length of the whole lines. A link or a folder is left to _storage's checks."""
    try:
        size, tail = fsutil.read_tail(journal, 1 << 20)
        if not size or tail.endswith(b"\n"):
            return
        time.sleep(
            0.5
        )  # a writer in the middle of its line (another submit of this search) ends it now
        size, tail = fsutil.read_tail(journal, 1 << 20)
    except OSError:
        return
    if not size or tail.endswith(b"\n"):
        return
    cut = tail.rfind(b"\n")
    whole = size - len(tail) + cut + 1 if cut >= 0 or size <= len(tail) else None
    if _one_record(tail[cut + 1 :]):  # the last record whole, only its newline missing: keep it
        raise ConfigError(
            "sweep.storage",
            f"the study journal {journal} ends without a newline after its last record",
            f"if no search is running on it, end that line: printf '\\n' >> {shlex.quote(str(journal))}",
        )
    raise ConfigError(
        "sweep.storage",
        f"the study journal {journal} ends in a cut line ({size - whole} bytes with no newline: a write that was "
        "killed, or not a journal)"
        if whole is not None
        else f"the study journal {journal} ends in more than 1 MiB with no newline: not a journal",
        (
            f"if no search is running on it, drop the cut line: truncate -s {whole} {shlex.quote(str(journal))}"
            if whole
            else "remove it to start the search over, or set job.name for a new search"
        ),
    )


def _one_record(line: bytes) -> bool:
    """Is this one whole journal record (a JSON object with an op_code)?"""
    try:
        record = json.loads(line)
    except ValueError:  # JSONDecodeError, or not UTF-8
        return False
    return isinstance(record, dict) and "op_code" in record


def _optuna_sqlite(db: Path) -> bool:
    """An SQLite file with Optuna's tables: True. Another program's database (or not SQLite at all) is refused: the
    study's tables would be written into it."""
    tables: set[str] = set()
    try:
        with contextlib.closing(sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True)) as c:
            tables = {
                r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
    except sqlite3.Error:
        tables = set()
    if not {"studies", "trials", "version_info"} <= tables:
        raise ConfigError(
            "sweep.storage",
            f"{db} is not a study database (an SQLite file of something else, or not SQLite): the study's tables "
            "would be written into it",
            "give sweep.storage a path of its own (a new file), or leave it out (a journal in the job root)",
        )
    return True


def _existing(spec: Search, name: str, url: str) -> Any:
    """The study if its storage and the study in it exist (nothing is made or written: a dry run writes nothing),
    else None; the storage is checked and opened once."""
    if not _exists(url):
        return None
    storage = _open_storage(url)
    try:
        names = [s.study_name for s in optuna().get_all_study_summaries(storage)]
    except HpcqaError:
        raise
    except Exception:  # noqa: BLE001 -- an unreadable storage: open_study says why
        names = [name]
    return open_study(spec, name, url, create=False, storage=storage) if name in names else None


def claim(
    spec: Search,
    name: str,
    url: str,
    batch: list[tuple[int, dict[str, Any]]],
    held: int,
    refused: Sequence[tuple[int, Any, str]] = (),
    repeats: Sequence[tuple[int, Any, int]] = (),
    setup: Mapping[str, Any] | None = None,
) -> None:
    """Write the batch the dry run predicted into the study (stale trials are already there): each new trial
    enqueued with exactly its values and asked; a refused one told FAIL at once, with why (user attr hpcqa_refused);
    a repeat told the outcome of the trial it repeats (user attr hpcqa_repeat_of). A study that moved since it held
    `held` trials (another submit of this search) is refused: the numbers would no longer be the plans'. setup: what
    its trials share (sweepcheck.setup), recorded once (user attr hpcqa_setup) for a resumed search to be checked
    against."""
    study = open_study(spec, name, url)
    if setup is not None and "hpcqa_setup" not in study.user_attrs:
        study.set_user_attr("hpcqa_setup", dict(setup))
    before = study.trials
    why = {n: w for n, _, w in refused}
    fresh = sorted(
        [(n, dict(p)) for n, p in batch if n >= held]
        + [(n, dict(p)) for n, p, _ in refused]
        + [(n, dict(p)) for n, p, _ in repeats]
    )
    if len(before) != held:
        raise ConfigError(
            "sweep",
            f"the study {name!r} changed while this batch was planned (it holds {len(before)} trials)",
            "is another submit of this search running? (hpcqa status) submit again once it has ended",
        )
    copy = {n: before[of] for n, _, of in repeats}
    for number, params in fresh:
        study.enqueue_trial(params)
        t = study.ask({d.key: distribution(d) for d in spec.space})
        if t.number != number:
            raise ConfigError(
                "sweep",
                f"the study gave trial {t.number} where {number} was planned",
                "submit again",
            )
        if number in why:
            t.set_user_attr("hpcqa_refused", why[number])
            study.tell(t, state=optuna().trial.TrialState.FAIL)
        elif number in copy:
            t.set_user_attr("hpcqa_repeat_of", copy[number].number)
            study.tell(t, _copied(copy[number]), state=copy[number].state)


def tell(spec: Search, name: str, url: str, number: int, pruned: bool, value: float | None) -> str:
    """How a trial ended: PRUNED (its last report stands), COMPLETE with its metric, or FAIL (no metric). Returns
    the state told (a trial told already is left as it is)."""
    ts = optuna().trial.TrialState
    study = open_study(spec, name, url)
    t = study.trials[number]
    if t.state.is_finished():
        return t.state.name  # told already (a batch re-run, a second look)
    state = ts.PRUNED if pruned else (ts.COMPLETE if value is not None else ts.FAIL)
    study.tell(number, value if state == ts.COMPLETE else None, state=state)
    return state.name


def reporter(ref: TrialRef) -> Any:
    """The running trial, as its rank 0 reports to it (Optuna's Trial of ref.number in its study)."""
    op = optuna()
    storage = _storage(ref.storage)
    study = op.load_study(
        study_name=ref.study, storage=storage, pruner=pruner(ref.pruner, ref.warmup, ref.min_trials)
    )
    trial_id = storage.get_trial_id_from_study_id_trial_number(
        storage.get_study_id_from_name(ref.study), ref.number
    )
    return op.trial.Trial(study, trial_id)


def summary(spec: Search, name: str, url: str) -> str:
    """One line: how many trials completed, were pruned, failed; the best."""
    s = open_study(spec, name, url)
    ts = optuna().trial.TrialState
    ended = [t.state for t in s.trials]
    line = ", ".join(
        f"{ended.count(k)} {k.name.lower()}"
        for k in (ts.COMPLETE, ts.PRUNED, ts.FAIL)
        if k in ended
    )
    if copies := sum(1 for t in s.trials if "hpcqa_repeat_of" in t.user_attrs):
        line += f" ({copies} of them repeats, not run)"
    done = [t for t in s.trials if t.state == ts.COMPLETE and t.value is not None]
    if done:
        best = s.best_trial
        line += f"; best {spec.metric} {best.value:.2f} (trial {best.number}: {shown_params(best.params)})"
    return line or "no trial ended"


def dump(name: str, url: str) -> dict[str, Any]:
    """The study as `hpcqa results --json` carries it: every trial's number, state, value, params and reports."""
    op = optuna()
    try:
        s = op.load_study(study_name=name, storage=_storage(url))
    except HpcqaError:
        raise
    except Exception as e:  # noqa: BLE001 -- gone or damaged: said in the JSON, the table still stands
        return {"name": name, "storage": url, "error": f"{type(e).__name__}: {str(e)[:200]}"}
    trials = [
        {
            "number": t.number,
            "state": t.state.name,
            "value": t.value,
            "params": t.params,
            "reports": {str(k): v for k, v in sorted(t.intermediate_values.items())},
            **(
                {"refused": t.user_attrs["hpcqa_refused"]}
                if "hpcqa_refused" in t.user_attrs
                else {}
            ),
            **(
                {"repeat_of": t.user_attrs["hpcqa_repeat_of"]}
                if "hpcqa_repeat_of" in t.user_attrs
                else {}
            ),
        }
        for t in s.trials
    ]
    done = [t for t in s.trials if t.state == op.trial.TrialState.COMPLETE]
    best = s.best_trial.number if done else None
    return {
        "name": name,
        "storage": url,
        "direction": s.direction.name.lower(),
        "best_trial": best,
        "log_keys": log_keys(s.user_attrs.get("hpcqa_search")),
        "trials": trials,
    }


def log_keys(mark: Any) -> list[str]:
    """The searched keys of a study's mark (its user attr hpcqa_search, read back from a shared folder: any shape)
    whose range is searched on a log scale -- the plot's log axes."""
    space = mark.get("space") if isinstance(mark, dict) else None
    return [
        d["key"]
        for d in (space if isinstance(space, list) else [])
        if isinstance(d, dict) and isinstance(d.get("key"), str) and d.get("log") is True
    ]


def sweep_id(spec: Search, name: str, url: str, new: str | None = None) -> str | None:
    """The sweep id the search's trials are registered under (its first job's): read, or kept when first known, so
    a search submitted again adds its trials to the same sweep (hpcqa results SWEEP shows them all)."""
    s = open_study(spec, name, url)
    had = s.user_attrs.get("hpcqa_sweep_id")
    if isinstance(had, str) and had:
        return had
    if new:
        s.set_user_attr("hpcqa_sweep_id", new)
    return new


def runner(spec: Search, name: str, url: str, new: str | None = None) -> str | None:
    """Who runs the search's next batch: the Slurm follow-up job queued last ("slurm:<job id>"), or the local submit
    process ("local:<pid>:<identity>"); or set it."""
    if new:
        open_study(spec, name, url).set_user_attr("hpcqa_runner", new)
        return new
    found = _existing(spec, name, url)
    if found is None:
        return None  # no study yet: nobody runs it (and a dry run writes nothing)
    had = found.user_attrs.get("hpcqa_runner")
    return had if isinstance(had, str) and had else None
