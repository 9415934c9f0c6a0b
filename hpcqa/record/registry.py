"""The job registry: every submission, local or Slurm, in one SQLite file.

WAL mode and a busy timeout make concurrent `hpcqa submit` processes safe (SQLite serialises the
writers; each insert is one short transaction). Final states are cached here so that `status` only
asks Slurm about jobs that can still change.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import stat
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from hpcqa import fsutil
from hpcqa.core import values as valuecheck
from hpcqa.errors import HpcqaError, RegistryError, UsageError
from hpcqa.record.registrypath import _same, chosen_by, default_path, resolve_path, state_dir  # noqa: F401  (where the registry is: asked of this module too)
from hpcqa.text import shown

# Before, the default was a registry per folder (logs/registry.sqlite under the folder submit ran in): a job
# submitted from a script's own folder was then invisible from anywhere else. The default is now the user's.
LEGACY_PATH = os.path.join("logs", "registry.sqlite")
APPLICATION_ID = 0x68717267  # "hqrg" in the SQLite header (PRAGMA application_id): this file is an hpcqa registry
SCHEMA_VERSION = (
    3  # PRAGMA user_version; 2: the column "executor" was named "target"; 3: "executor" again
)
# A job is (id, folder): ids repeat (a reset controller starts again at 1, several clusters share a filesystem), the
# folder -- which carries the submission's own token -- does not. A reused id adds a row; it never replaces one.
SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id            TEXT NOT NULL,        -- Slurm job id (array: "<array id>_<task>") or local controller pid
    name          TEXT NOT NULL,
    executor      TEXT NOT NULL,        -- slurm | local (named "target" in schema version 2)
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
    updated_at    REAL,
    UNIQUE (id, folder)
);
CREATE INDEX IF NOT EXISTS jobs_id ON jobs(id);
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


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """Another registry file, opened read-only (never migrated or written) and always closed."""
    db = sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?mode=ro", uri=True, timeout=5.0)
    try:
        yield db
    finally:
        db.close()


def not_found(ids: Iterable[str], path: Path, what: str = "job") -> UsageError:
    """ "no job X in PATH", with the fix that would find it: another registry this user has that holds it (the
    default, $HPCQA_REGISTRY, this folder's logs/registry.sqlite) named with --registry, else how to look."""
    ids = [str(i) for i in ids]
    for other in dict.fromkeys(
        [
            default_path(),
            Path(os.environ.get("HPCQA_REGISTRY") or default_path()),
            Path(LEGACY_PATH),
        ]
    ):
        if _same(other, path) or not other.is_file():
            continue
        marks = ",".join("?" * len(ids))
        try:
            with _read_only(other) as db:
                hit = db.execute(
                    f"SELECT 1 FROM jobs WHERE id IN ({marks}) OR sweep_id IN ({marks}) LIMIT 1",
                    ids + ids,
                ).fetchone()
        except sqlite3.Error:
            continue
        if hit:
            return UsageError(
                f"no {what} {shown(', '.join(ids))} in {shown(path)}",
                f"it is in {shown(other)}: add --registry {shown(other)}",
            )
    return UsageError(
        f"no {what} {shown(', '.join(ids))} in {shown(path)}",
        "`hpcqa status --all` lists this registry's jobs; a job submitted with another registry "
        "(job.registry, $HPCQA_REGISTRY) is found with --registry PATH",
    )


def check_writable(path: str | Path | None = None, group_readable: bool = False) -> None:
    """Before anything is queued, the registry takes a real write (a missing one is tried as a trial copy beside
    it, then removed: a refused submit leaves nothing): a full disk, a quota, a read-only mount or damage is found
    with nothing queued (RegistryError naming the path and the fix)."""
    where = resolve_path(str(path) if path else None)
    trial = not _checked_file(where)
    if trial:
        _closed_folder(where)
        where = where.with_name(f".{where.name}.trial-{socket.gethostname()}-{os.getpid()}")
    try:
        reg = Registry(where, create=True, group_readable=group_readable)
        try:
            reg.write_test()
        finally:
            reg.writable().close()
    except RegistryError as e:  # said of the registry, not of its trial copy
        real = str(resolve_path(str(path) if path else None))
        raise RegistryError(e.message.replace(shown(where), shown(real)), e.hint) from None
    finally:
        if trial:
            for leftover in (where, Path(f"{where}-wal"), Path(f"{where}-shm")):
                with contextlib.suppress(OSError):
                    leftover.unlink()


def _closed_folder(path: Path) -> None:
    """The registry's folder is one others cannot write into (they could swap the registry for theirs, or for a
    link). hpcqa's own state folder (state_dir()) open to group or others is closed to 0700 when it is mine, said
    once on stderr, and refused when it is not; any other folder writable by everyone without the sticky bit (/tmp
    has it) is refused with the fix. A group-writable folder named by job.registry is a shared one: kept."""
    folder = path.parent
    try:
        st = folder.stat()
    except OSError:
        return  # not made yet (made 0700 by _create), or unreadable: the open says which
    state = _same(folder, state_dir())
    open_to = st.st_mode & (stat.S_IWOTH | (stat.S_IWGRP if state else 0))
    if not stat.S_ISDIR(st.st_mode) or not open_to or (st.st_mode & stat.S_ISVTX and not state):
        return
    mode = f"{stat.S_IMODE(st.st_mode):04o}"
    if state and st.st_uid == os.getuid():
        os.chmod(folder, 0o700)
        sys.stderr.write(
            f"hpcqa: {shown(folder)} (hpcqa's state folder, your job registry) was writable by others "
            f"(mode {mode}): made 0700\n"
        )
        return
    if state:
        raise RegistryError(
            f"hpcqa's state folder {shown(folder)} belongs to uid {st.st_uid} and others can write to it "
            f"(mode {mode}): not used",
            "remove it (it is made again, 0700), or set $HPCQA_REGISTRY",
        )
    raise RegistryError(
        f"job registry {shown(path)}: its folder is writable by everyone (mode {mode}, no sticky bit): "
        "anyone could replace the registry",
        f"chmod o-w {shown(folder)}, or set job.registry / $HPCQA_REGISTRY to a path in a folder of yours",
    )


_ELSEWHERE = (
    "free space (or quota) where it is, or set job.registry / $HPCQA_REGISTRY to a writable place"
)


def _cannot_write(e: sqlite3.DatabaseError) -> bool:
    """SQLite's words for a file it cannot write to that is not damaged."""
    said = str(e).lower()
    return any(
        w in said for w in ("disk is full", "readonly", "read-only", "disk i/o", "unable to open")
    )


def _damaged(path: Path, what: str) -> RegistryError:
    return RegistryError(
        f"job registry {shown(path)}: {what}",
        f"`hpcqa registry check --registry {shown(path)}` says more; `hpcqa registry recover --registry "
        f"{shown(path)}` keeps the damaged file aside and saves what can be read",
    )


def _checked_file(path: Path) -> bool:
    """Whether the registry file exists, once it is one a registry can be (RegistryError naming the fix if not)."""
    try:
        return _checked_kind(path)
    except PermissionError as e:  # another user's registry, or one in a folder closed to me
        raise RegistryError(
            f"job registry {shown(path)} cannot be read: permission denied on {shown(e.filename or path)}",
            "point job.registry / $HPCQA_REGISTRY (or --registry) at a registry of yours",
        ) from None


def _checked_kind(path: Path) -> bool:
    if path.is_dir():
        raise RegistryError(
            f"job registry {shown(path)} is a directory",
            "point job.registry / $HPCQA_REGISTRY at a file, or move the directory away",
        )
    exists = path.exists()
    if exists and not path.is_file():  # a FIFO would block the open for ever, a device worse
        raise RegistryError(
            f"job registry {shown(path)} is not a regular file",
            "point job.registry / $HPCQA_REGISTRY at a file",
        )
    if not exists:
        above = next((p for p in path.parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise RegistryError(
                f"job registry {shown(path)}: {shown(above)} is a file, not a folder",
                "point job.registry / $HPCQA_REGISTRY at a path in a folder",
            )
    if exists and path.stat().st_size == 0:
        raise _damaged(path, "the file is empty (0 bytes): truncated, or not made by hpcqa")
    return exists


def _open(path: Path) -> sqlite3.Connection:
    """The registry's connection, its owner checked before anything is written and its schema brought up to date."""
    db = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
    # a byte that is not UTF-8 in one row (a bad disk, another tool) reads as U+FFFD, not as an error that hides
    # every other row
    db.text_factory = lambda b: b.decode("utf-8", "replace")
    db.execute("PRAGMA busy_timeout = 30000")
    _own_or_refuse(db, path)  # before anything is written to it
    db.execute("PRAGMA journal_mode = WAL")
    _migrate(db)
    db.execute("SELECT id, name, folder, state FROM jobs LIMIT 1").fetchall()
    return db


class Registry:
    """Opening checks the file: a directory, an empty file or one that isn't a job registry is an
    error naming the file and the fix (RegistryError, exit 2), never a traceback or "no jobs"."""

    def __init__(
        self, path: str | Path | None = None, create: bool = True, group_readable: bool = False
    ) -> None:
        self.path = resolve_path(str(path) if path else None)
        _closed_folder(self.path)
        self.exists = _checked_file(self.path)
        self.damaged: list[str] = []  # rows jobs() could not read: "rowid N (id X): why"
        self.db: sqlite3.Connection | None = None
        if not self.exists and not create:
            return
        if not self.exists:
            try:
                _create(self.path, 0o640 if group_readable else 0o600)
            except (
                OSError,
                sqlite3.DatabaseError,
            ) as e:  # "unable to open database file": a folder it cannot write
                why = fsutil.no_room(self.path.parent) or getattr(e, "strerror", None) or e
                raise RegistryError(
                    f"cannot create the job registry {shown(self.path)}: {why}",
                    "make its folder writable, or set job.registry / $HPCQA_REGISTRY",
                ) from None
        try:
            self.db = _open(self.path)
        except sqlite3.DatabaseError as e:
            if _cannot_write(e) and (
                full := fsutil.no_room(self.path.parent)
            ):  # its -wal/-shm cannot be made: not damage
                raise RegistryError(
                    f"cannot open the job registry {shown(self.path)}: {full}", _ELSEWHERE
                ) from None
            raise _damaged(self.path, f"not a readable job registry ({e})") from None
        except OSError as e:
            raise RegistryError(
                f"cannot create the job registry {shown(self.path)}: {e.strerror or e}",
                "make its folder writable, or set job.registry / $HPCQA_REGISTRY",
            ) from None
        self.exists = True

    def writable(self) -> sqlite3.Connection:
        """The open registry to write to. One opened with create=False where there is no file has none."""
        if self.db is None:
            raise RegistryError(
                f"no job registry at {shown(self.path)} to write to",
                "submit a job first, or set job.registry / $HPCQA_REGISTRY to an existing one",
            )
        return self.db

    def check(self) -> tuple[int, str]:
        """(jobs, verdict): SQLite's integrity check, then every row read as status reads it."""
        if self.db is None:
            return 0, "no registry yet"
        try:
            verdict = self.db.execute("PRAGMA integrity_check").fetchone()[0]
            rows = self.jobs()
        except (
            sqlite3.DatabaseError,
            HpcqaError,
        ) as e:  # a page SQLite cannot read: a verdict, not a traceback
            return 0, f"damaged: {getattr(e, 'message', None) or e}"
        if verdict == "ok" and self.damaged:
            verdict = (
                f"{len(self.damaged)} damaged row(s): "
                + "; ".join(self.damaged[:3])
                + ("; ..." if len(self.damaged) > 3 else "")
            )
        return len(rows), verdict

    def add(
        self,
        *,
        id: str,
        name: str,
        executor: str,
        folder: str,
        config: dict,
        source: str,
        nodes: int,
        world_size: int,
        array_size: int = 0,
        sweep_id: str | None = None,
        task_index: int | None = None,
        variant: dict | None = None,
    ) -> None:
        self.add_many(
            [
                dict(
                    id=id,
                    name=name,
                    executor=executor,
                    folder=folder,
                    config=config,
                    source=source,
                    nodes=nodes,
                    world_size=world_size,
                    array_size=array_size,
                    sweep_id=sweep_id,
                    task_index=task_index,
                    variant=variant,
                )
            ]
        )

    def add_many(self, rows: Iterable[dict[str, Any]]) -> None:
        now = time.time()
        data = [
            (
                r["id"],
                r["name"],
                r["executor"],
                r["folder"],
                json.dumps(r["config"]),
                r["source"],
                now,
                r["nodes"],
                r["world_size"],
                r.get("array_size", 0),
                r.get("sweep_id"),
                r.get("task_index"),
                json.dumps(r["variant"]) if r.get("variant") is not None else None,
            )
            for r in rows
        ]
        with self._writing() as db:
            db.execute("BEGIN IMMEDIATE")
            # the same job (id and folder) registered again replaces its row; a reused id adds one
            db.executemany(
                "INSERT OR REPLACE INTO jobs (id, name, executor, folder, config, source, submitted_at, nodes, "
                "world_size, array_size, sweep_id, task_index, variant) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                data,
            )

    def update_states(self, updates: Iterable[tuple]) -> None:
        """(id, state, final, exit_code, elapsed[, folder]): with the folder, only that job's row (ids repeat)."""
        now = time.time()
        by_id: list[tuple] = []
        by_job: list[tuple] = []
        for u in updates:
            jid, state, final, code, elapsed = u[:5]
            (by_job if len(u) > 5 else by_id).append(
                (state, int(final), code, elapsed, now, jid, *u[5:6])
            )
        if not by_id and not by_job:
            return
        with self._writing() as db:
            db.execute("BEGIN IMMEDIATE")
            set_ = (
                "UPDATE jobs SET state=?, final=?, exit_code=?, elapsed=?, updated_at=? WHERE id=?"
            )
            db.executemany(set_, by_id)
            db.executemany(set_ + " AND folder=?", by_job)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; a page SQLite cannot read or write is the registry's one-line error: a full disk or
        a read-only mount said as such (the file is fine), anything else as damage (recover)."""
        db = self.writable()
        try:
            with db:
                yield db
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise
            if _cannot_write(e):
                raise RegistryError(
                    f"cannot write the job registry {shown(self.path)}: {e}", _ELSEWHERE
                ) from None
            raise _damaged(self.path, f"SQLite cannot write it ({e})") from None
        except OSError as e:
            raise RegistryError(fsutil.write_failure(e, shown(self.path)), _ELSEWHERE) from None

    def write_test(self) -> None:
        """A committed write the size of a job's row, with nothing left of it (check_writable)."""
        probe = ("hpcqa-write-test", f"{socket.gethostname()}-{os.getpid()}")
        with self._writing() as db:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "INSERT INTO jobs (id, name, executor, folder, config, source, submitted_at, nodes, "
                "world_size) VALUES (?,?,?,?,?,?,?,?,?)",
                (probe[0], "", "", probe[1], "0" * 8192, "", time.time(), 0, 0),
            )
            db.execute("DELETE FROM jobs WHERE id = ? AND folder = ?", probe)

    def jobs(
        self, ids: Iterable[str] = (), limit: int | None = None, sweep_id: str | None = None
    ) -> list[JobRow]:
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
        try:
            cur = self.db.execute(q.replace("SELECT *", "SELECT rowid AS _rowid, *", 1), args)
            cols = [c[0] for c in cur.description]
            fetched = cur.fetchall()
        except sqlite3.DatabaseError as e:
            raise _damaged(self.path, f"SQLite cannot read it ({e})") from None
        out, self.damaged = [], []
        for r in fetched:
            d = dict(zip(cols, r))
            try:
                out.append(self._row(d))
            except (
                TypeError,
                ValueError,
                KeyError,
                RecursionError,
            ) as e:  # a row written by hand, a bad disk
                self.damaged.append(
                    f"rowid {d.get('_rowid')} (id {str(d.get('id'))[:20]!r}): {str(e)[:60]}"
                )
        return out

    @staticmethod
    def _row(d: dict) -> JobRow:
        """A row as status uses it, checked: anything else raises ValueError (the row is reported damaged)."""
        config, variant = (
            json.loads(d["config"]),
            json.loads(d["variant"]) if d["variant"] else None,
        )
        texts = ("id", "name", "executor", "folder", "source", "state")
        if (
            not all(isinstance(d[k], str) and d[k] for k in texts)
            or not isinstance(config, dict)
            or not all(isinstance(d[k], int) for k in ("nodes", "world_size"))
            or not isinstance(d["submitted_at"], (int, float))
            or not (variant is None or isinstance(variant, dict))
        ):
            raise ValueError("a field of the wrong type or empty")
        bad = next((k for k in texts if valuecheck.control_char(d[k])), None)
        if bad:  # not from hpcqa (its names are checked): never printed raw to a terminal
            raise ValueError(f"a control character in {bad} ({valuecheck.control_char(d[bad])})")
        return JobRow(
            id=d["id"],
            name=d["name"],
            executor=d["executor"],
            folder=d["folder"],
            config=config,
            source=d["source"],
            submitted_at=d["submitted_at"],
            nodes=d["nodes"],
            world_size=d["world_size"],
            array_size=d["array_size"] or 0,
            sweep_id=d["sweep_id"],
            task_index=d["task_index"],
            variant=variant,
            state=d["state"],
            final=bool(d["final"]),
            exit_code=d["exit_code"],
            elapsed=d["elapsed"],
        )


COLUMNS = (
    "id",
    "name",
    "executor",
    "folder",
    "config",
    "source",
    "submitted_at",
    "nodes",
    "world_size",
    "array_size",
    "sweep_id",
    "task_index",
    "variant",
    "state",
    "final",
    "exit_code",
    "elapsed",
    "updated_at",
)
COLUMNS_V2 = tuple("target" if c == "executor" else c for c in COLUMNS)  # schema version 2 only


def _own_or_refuse(db: sqlite3.Connection, path: Path) -> None:
    """An hpcqa registry (its application id), or one made before registries carried it (a `jobs` table of these
    columns and nothing else). Anything else -- another program's database -- is refused before anything is written."""
    app = db.execute("PRAGMA application_id").fetchone()[0]
    if app == APPLICATION_ID:
        return
    tables = sorted(
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    )
    cols = [r[1] for r in db.execute("PRAGMA table_info(jobs)")] if tables == ["jobs"] else []
    if app != 0 or tables != ["jobs"] or tuple(cols) not in (COLUMNS, COLUMNS_V2):
        what = (
            f"application id {app:#x}"
            if app
            else ("tables " + ", ".join(tables[:5]) if tables else "no tables")
        )
        raise RegistryError(
            f"{shown(path)} is not an hpcqa job registry ({what}); nothing was written to it",
            "point job.registry / $HPCQA_REGISTRY at a registry hpcqa made, or at a new path",
        )


def _current(db: sqlite3.Connection) -> bool:
    return (
        db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        and db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION
    )


def _migrate(db: sqlite3.Connection) -> None:
    """In place, in one transaction (a concurrent hpcqa waits for it): the column "target" (schema version 2) is
    named "executor" again, the word users write (cluster.executor); a registry from before ids could repeat (id PRIMARY KEY) gets the (id, folder) key; every
    one gets its application id."""
    if _current(db):
        return
    with db:
        db.execute("BEGIN IMMEDIATE")
        if not _current(db):
            _migrate_now(db)


def _migrate_now(db: sqlite3.Connection) -> None:
    if "target" in [r[1] for r in db.execute("PRAGMA table_info(jobs)")]:
        db.execute("ALTER TABLE jobs RENAME COLUMN target TO executor")
    if db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        keyed_by_id = any(r[1] == "id" and r[5] for r in db.execute("PRAGMA table_info(jobs)"))
        if keyed_by_id:
            db.execute("ALTER TABLE jobs RENAME TO jobs_v1")
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)
            db.execute(
                f"INSERT INTO jobs ({','.join(COLUMNS)}) SELECT {','.join(COLUMNS)} FROM jobs_v1"
            )
            db.execute(
                "DROP TABLE jobs_v1"
            )  # and its indexes, which kept their names: made again for the new table
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _create(path: Path, mode: int = 0o600) -> None:
    """A new registry appears whole: built aside, then published with link(), which never replaces a
    registry another process published first (so nobody ever sees a half-made, 0-byte file)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o750 if mode & 0o040 else 0o700)
    tmp = path.with_name(f".{path.name}.new-{socket.gethostname()}-{os.getpid()}")
    try:
        db = sqlite3.connect(str(tmp))
        try:
            db.executescript(SCHEMA)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.commit()
        finally:
            db.close()
        os.chmod(tmp, mode)  # SQLite gives its -wal and -shm files the database's mode
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:  # published, refused, or cut short (a full disk, a signal): the part-made file goes
        with contextlib.suppress(OSError):
            tmp.unlink()
        with contextlib.suppress(OSError):
            Path(f"{tmp}-journal").unlink()
