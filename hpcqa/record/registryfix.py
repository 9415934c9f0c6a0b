"""A job registry from elsewhere or in pieces: the per-folder registry of an older hpcqa adopted into the user's
own, and a damaged registry recovered (set aside, every readable row copied into a fresh one)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
import urllib.parse
from pathlib import Path

from hpcqa import fsutil
from hpcqa.errors import RegistryError
from hpcqa.record import sqlitescan
from hpcqa.record.registry import (
    COLUMNS,
    COLUMNS_V2,
    LEGACY_PATH,
    Registry,
    _read_only,
    _same,
    default_path,
    resolve_path,
)


def adopt_legacy(folder: str | Path = ".") -> tuple[Path | None, int, str]:
    """The registry an hpcqa from before kept in `folder`/logs/registry.sqlite: its jobs copied into the user's
    default registry (a job already there, same id and folder, is left as it is), so `status` finds them from any
    folder. The old file is read, never changed. -> (the old file or None, jobs copied, a note when it could not be
    read). Never raises: a damaged old registry is one line and the default registry goes on without it."""
    old = Path(folder) / LEGACY_PATH
    if not old.is_file() or _same(old, default_path()):
        return None, 0, ""
    if not _mine(
        old
    ):  # another user's old registry in a folder I can read: their jobs are not mine to adopt
        return None, 0, ""
    try:
        with _read_only(old) as src:
            cols = [r[1] for r in src.execute("PRAGMA table_info(jobs)")]
            if tuple(cols) not in (COLUMNS, COLUMNS_V2):
                return (
                    old,
                    0,
                    f"{old} is not an hpcqa job registry (tables/columns differ): not read",
                )
            rows = src.execute(f"SELECT {','.join(cols)} FROM jobs").fetchall()
    except sqlite3.Error as e:
        return (
            old,
            0,
            f"{old} (the registry of an older hpcqa) could not be read ({str(e)[:80]}): its jobs are not "
            "listed; `hpcqa registry recover --registry " + str(old) + "` saves what can be read",
        )
    good = []
    for r in rows:
        d = dict(zip(COLUMNS, r))  # COLUMNS_V2 differs only in the name of the third column
        try:
            Registry._row(d)
        except (TypeError, ValueError, KeyError, RecursionError):
            continue
        good.append(r)
    if not good:
        return old, 0, ""
    db = Registry(default_path()).writable()
    with db:
        db.execute("BEGIN IMMEDIATE")
        before = db.total_changes
        db.executemany(
            f"INSERT OR IGNORE INTO jobs ({','.join(COLUMNS)}) VALUES ({','.join('?' * len(COLUMNS))})",
            good,
        )
        copied = db.total_changes - before
    return old, copied, ""


def _mine(path: Path) -> bool:
    """The file and every folder from it up to the folder it was found from are owned by me (not followed through a
    link: a link planted there by someone else is not my registry)."""
    uid = os.getuid()
    try:
        return os.stat(
            path
        ).st_uid == uid and all(  # what a link leads to, and the link and its folders
            os.lstat(p).st_uid == uid for p in (path, path.parent, path.parent.parent)
        )
    except OSError:
        return False


NOT_A_REGISTRY = (
    ".toml",
    ".py",
    ".json",
    ".jsonl",
    ".yaml",
    ".yml",
    ".sh",
    ".sbatch",
    ".csv",
    ".txt",
    ".md",
)


def recover(path: str | Path | None = None) -> tuple[Path, Path, int, int]:
    """Move a damaged registry aside (kept, never deleted) and copy every job row that can still be read, and reads
    as a job, into a fresh one. -> (new registry, damaged copy, rows saved, rows left behind as damaged)"""
    src = resolve_path(str(path) if path else None)
    if not src.is_file():
        raise RegistryError(
            f"{src} is not a registry file", "name the registry file with --registry"
        )
    if src.suffix.lower() in NOT_A_REGISTRY and not fsutil.read_head(src, 16).startswith(
        b"SQLite format 3"
    ):
        raise RegistryError(  # `--registry quickstart.toml`: recover would put a registry in the config's place
            f"{src} is not an SQLite file and its name says it is something else ({src.suffix}): not recovered, "
            "nothing moved",
            "name the registry file with --registry (status and the dry run say which one is in use)",
        )
    if why := fsutil.unwritable(
        src.parent
    ):  # a read-only mount, a folder of another's: nothing is moved
        raise RegistryError(
            f"cannot recover {src} where it is: {why}",
            "copy it somewhere writable and recover the copy: hpcqa registry recover --registry COPY",
        )
    rows, bad = [], 0
    for r in _salvage(
        src
    ):  # read where it is, before anything moves: whatever the reading meets, the damaged
        try:  # file is then kept aside and a working registry takes its place
            Registry._row(r)
            rows.append({k: r[k] for k in COLUMNS if k in r})
        except (TypeError, ValueError, KeyError, RecursionError):
            bad += 1
    aside = src.with_name(f"{src.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    shutil.move(str(src), str(aside))
    for suffix in ("-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.move(f"{src}{suffix}", f"{aside}{suffix}")
    fresh = Registry(src).writable()
    if rows:
        with fresh:
            fresh.execute("BEGIN IMMEDIATE")
            for r in rows:
                cols = list(r)
                fresh.execute(
                    f"INSERT OR REPLACE INTO jobs ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                    tuple(r[c] for c in cols),
                )
    return src, aside, len(rows), bad


def _salvage(path: Path, give_up_after: int = 1000) -> list[dict]:
    """Every row that can still be read: through SQLite one rowid at a time (a full scan stops at the first bad page),
    then straight from the file's table pages for what SQLite cannot reach (a truncated file loses the pages that
    lead to its rows, not only the rows on the pages it lost)."""
    found: dict[int, dict] = {}
    try:
        db = sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?mode=ro", uri=True)
        cols = [r[1] for r in db.execute("PRAGMA table_info(jobs)")]
        try:
            top = db.execute("SELECT max(rowid) FROM jobs").fetchone()[0] or 0
        except sqlite3.DatabaseError:
            top = None
        rowid, misses = 0, 0
        while cols and (top is None or rowid < top) and misses < give_up_after:
            rowid += 1
            try:
                row = db.execute("SELECT * FROM jobs WHERE rowid = ?", (rowid,)).fetchone()
            except sqlite3.DatabaseError:
                row = None
            misses = 0 if row else misses + 1
            if row:
                found[rowid] = dict(zip(["executor" if c == "target" else c for c in cols], row))
    except sqlite3.DatabaseError:
        pass
    try:
        scanned = sqlitescan.table_rows(path, len(COLUMNS))
    except (ValueError, IndexError, KeyError, OverflowError, MemoryError, OSError):
        scanned = {}  # what SQLite read above still counts
    for rowid, values in scanned.items():
        found.setdefault(rowid, dict(zip(COLUMNS, values)))
    return [found[k] for k in sorted(found)]
