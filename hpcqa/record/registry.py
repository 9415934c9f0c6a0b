"""The job registry: every submission, local or Slurm, in one SQLite file.

WAL mode and a busy timeout make concurrent `hpcqa submit` processes safe (SQLite serialises the
writers; each insert is one short transaction). Final states are cached here so that `status` only
asks Slurm about jobs that can still change.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from hpcqa.errors import RegistryError
import socket
import shutil

DEFAULT_PATH = os.path.join("logs", "registry.sqlite")
SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id            TEXT PRIMARY KEY,     -- Slurm job id (array: "<array id>_<task>") or local controller pid
    name          TEXT NOT NULL,
    executor      TEXT NOT NULL,        -- slurm | local
    folder        TEXT NOT NULL,
    config        TEXT NOT NULL,        -- JSON snapshot of the validated config
    source        TEXT NOT NULL,
    submitted_at  REAL NOT NULL,
    nodes         INTEGER NOT NULL,
    world_size    INTEGER NOT NULL,
    array_size    INTEGER NOT NULL DEFAULT 0,
    sweep_id      TEXT,
    task_index    INTEGER,
    variant       TEXT,                 -- JSON: the swept parameters of this task
    state         TEXT NOT NULL DEFAULT 'SUBMITTED',
    final         INTEGER NOT NULL DEFAULT 0,
    exit_code     TEXT,
    elapsed       TEXT,
    updated_at    REAL
);
CREATE INDEX IF NOT EXISTS jobs_final ON jobs(final);
CREATE INDEX IF NOT EXISTS jobs_sweep ON jobs(sweep_id);
"""


@dataclass(frozen=True)
class JobRow:
    id: str
    name: str
    executor: str
    folder: str
    config: dict
    source: str
    submitted_at: float
    nodes: int
    world_size: int
    array_size: int
    sweep_id: str | None
    task_index: int | None
    variant: dict | None
    state: str
    final: bool
    exit_code: str | None
    elapsed: str | None


def resolve_path(path: str | None = None) -> Path:
    return Path(path or os.environ.get("HPCQA_REGISTRY") or DEFAULT_PATH)


def _damaged(path: Path, what: str) -> RegistryError:
    return RegistryError(f"job registry {path}: {what}",
                         f"`hpcqa registry check --registry {path}` says more; `hpcqa registry recover --registry "
                         f"{path}` keeps the damaged file aside and saves what can be read")


class Registry:
    """Opening checks the file: a directory, an empty file or one that isn't a job registry is an
    error naming the file and the fix (RegistryError, exit 2), never a traceback or "no jobs"."""

    def __init__(self, path: str | Path | None = None, create: bool = True, group_readable: bool = False) -> None:
        self.path = resolve_path(str(path) if path else None)
        if self.path.is_dir():
            raise RegistryError(f"job registry {self.path} is a directory",
                                "point job.registry / $HPCQA_REGISTRY at a file, or move the directory away")
        self.exists = self.path.exists()
        if self.exists and self.path.stat().st_size == 0:
            raise _damaged(self.path, "the file is empty (0 bytes): truncated, or not made by hpcqa")
        if not self.exists and not create:
            self.db = None
            return
        try:
            if not self.exists:
                _create(self.path, 0o640 if group_readable else 0o600)
            self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
            self.db.execute("PRAGMA busy_timeout = 30000")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.executescript(SCHEMA)
            self.db.execute("SELECT id, name, executor, folder, state FROM jobs LIMIT 1").fetchall()
        except sqlite3.DatabaseError as e:
            raise _damaged(self.path, f"not a readable job registry ({e})") from None
        except OSError as e:
            raise RegistryError(f"cannot create the job registry {self.path}: {e.strerror or e}",
                                "make its folder writable, or set job.registry / $HPCQA_REGISTRY") from None
        self.exists = True

    def check(self) -> tuple[int, str]:
        """(jobs, SQLite's integrity verdict)"""
        if self.db is None:
            return 0, "no registry yet"
        verdict = self.db.execute("PRAGMA integrity_check").fetchone()[0]
        return self.db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0], verdict

    def add(self, *, id: str, name: str, executor: str, folder: str, config: dict, source: str,
            nodes: int, world_size: int, array_size: int = 0, sweep_id: str | None = None,
            task_index: int | None = None, variant: dict | None = None) -> None:
        self.add_many([dict(id=id, name=name, executor=executor, folder=folder, config=config, source=source,
                            nodes=nodes, world_size=world_size, array_size=array_size, sweep_id=sweep_id,
                            task_index=task_index, variant=variant)])

    def add_many(self, rows: Iterable[dict[str, Any]]) -> None:
        now = time.time()
        data = [(r["id"], r["name"], r["executor"], r["folder"], json.dumps(r["config"]), r["source"], now,
                 r["nodes"], r["world_size"], r.get("array_size", 0), r.get("sweep_id"), r.get("task_index"),
                 json.dumps(r["variant"]) if r.get("variant") is not None else None) for r in rows]
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany(
                "INSERT OR REPLACE INTO jobs (id, name, executor, folder, config, source, submitted_at, nodes, "
                "world_size, array_size, sweep_id, task_index, variant) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", data)

    def update_states(self, updates: Iterable[tuple[str, str, bool, str | None, str | None]]) -> None:
        """(id, state, final, exit_code, elapsed)"""
        now = time.time()
        rows = [(state, int(final), code, elapsed, now, jid) for jid, state, final, code, elapsed in updates]
        if not rows:
            return
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("UPDATE jobs SET state=?, final=?, exit_code=?, elapsed=?, updated_at=? WHERE id=?",
                                rows)

    def jobs(self, ids: Iterable[str] = (), limit: int | None = None, sweep_id: str | None = None) -> list[JobRow]:
        if self.db is None:
            return []
        ids = list(ids)
        q, args = "SELECT * FROM jobs", []
        where = []
        if ids:
            marks = ",".join("?" * len(ids))
            where.append(f"(id IN ({marks}) OR sweep_id IN ({marks}))")
            args += ids + ids
        if sweep_id:
            where.append("sweep_id = ?")
            args.append(sweep_id)
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY submitted_at DESC, task_index ASC"
        if limit:
            q += f" LIMIT {int(limit)}"
        cur = self.db.execute(q, args)
        cols = [c[0] for c in cur.description]
        return [self._row(dict(zip(cols, r))) for r in cur.fetchall()]

    @staticmethod
    def _row(d: dict) -> JobRow:
        return JobRow(id=d["id"], name=d["name"], executor=d["executor"], folder=d["folder"],
                      config=json.loads(d["config"]), source=d["source"], submitted_at=d["submitted_at"],
                      nodes=d["nodes"], world_size=d["world_size"], array_size=d["array_size"],
                      sweep_id=d["sweep_id"], task_index=d["task_index"],
                      variant=json.loads(d["variant"]) if d["variant"] else None, state=d["state"],
                      final=bool(d["final"]), exit_code=d["exit_code"], elapsed=d["elapsed"])


def _create(path: Path, mode: int = 0o600) -> None:
    """A new registry appears whole: built aside, then published with link(), which never replaces a
    registry another process published first (so nobody ever sees a half-made, 0-byte file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.new-{socket.gethostname()}-{os.getpid()}")
    db = sqlite3.connect(str(tmp))
    db.executescript(SCHEMA)
    db.close()
    os.chmod(tmp, mode)  # SQLite gives its -wal and -shm files the database's mode
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


def recover(path: str | Path | None = None) -> tuple[Path, Path, int]:
    """Move a damaged registry aside (kept, never deleted) and copy every job row that can still be
    read into a fresh one. -> (new registry, damaged copy, rows saved)"""
    src = resolve_path(str(path) if path else None)
    aside = src.with_name(f"{src.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    shutil.move(str(src), str(aside))
    for suffix in ("-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.move(f"{src}{suffix}", f"{aside}{suffix}")
    rows = _salvage(aside)
    fresh = Registry(src)
    if rows:
        with fresh.db:
            fresh.db.execute("BEGIN IMMEDIATE")
            cols = list(rows[0])
            fresh.db.executemany(f"INSERT OR REPLACE INTO jobs ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                                 [tuple(r[c] for c in cols) for r in rows])
    return src, aside, len(rows)


def _salvage(path: Path) -> list[dict]:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        cur = db.execute("SELECT * FROM jobs")
        cols = [c[0] for c in cur.description]
        out = []
        while True:
            try:
                row = cur.fetchone()
            except sqlite3.DatabaseError:
                break
            if row is None:
                break
            out.append(dict(zip(cols, row)))
        return out
    except sqlite3.DatabaseError:
        return []
