"""Rows read straight from an SQLite file's table pages, for `hpcqa registry recover` when SQLite itself cannot read
the file (truncated by a full disk or a copy cut short, a torn write): every table-leaf page that is still there is
parsed as the file format describes it (sqlite.org/fileformat2.html), whatever happened to the pages that lead to
it. Pure reading; nothing is written. What comes back is raw: the caller decides which records are rows of its own.
"""

from __future__ import annotations

import struct
from pathlib import Path

from hpcqa import fsutil

LEAF_TABLE = 0x0D
WAL_HEADER, WAL_FRAME_HEADER = 32, 24
MAX_BYTES = (
    256 << 20
)  # read at most this much of a file and of its -wal: a registry of millions of jobs is smaller
MIN_USABLE = 480  # the file format's least usable page size; anything less is not an SQLite file

# The file is data from a damaged (or crafted) source: every size and pointer in it is checked before use, so a
# scan is bounded by the bytes read -- no loop on a cycle of overflow pages, no record larger than the file.


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = 0
    for k in range(9):
        b = buf[i + k]
        if k == 8:
            return (value << 8) | b, i + 9
        value = (value << 7) | (b & 0x7F)
        if b < 0x80:
            return value, i + k + 1
    raise ValueError("bad varint")  # pragma: no cover


def _value(serial: int, buf: bytes, i: int):
    sizes = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8, 8: 0, 9: 0}
    if serial in sizes:
        n = sizes[serial]
        raw = buf[i : i + n]
        if len(raw) != n:
            raise ValueError("short value")
        if serial == 0:
            return None, i
        if serial in (8, 9):
            return serial - 8, i
        if serial == 7:
            return struct.unpack(">d", raw)[0], i + n
        return int.from_bytes(raw, "big", signed=True), i + n
    if serial < 12:
        raise ValueError("reserved serial type")
    n = (serial - 12) // 2 if serial % 2 == 0 else (serial - 13) // 2
    raw = buf[i : i + n]
    if len(raw) != n:
        raise ValueError("short value")
    return (bytes(raw) if serial % 2 == 0 else raw.decode("utf-8")), i + n


def _record(payload: bytes) -> list:
    size, i = _varint(payload, 0)
    if size > len(payload):
        raise ValueError("a record header longer than its record")
    serials = []
    while i < size:
        s, i = _varint(payload, i)
        serials.append(s)
    out, j = [], size
    for s in serials:
        v, j = _value(s, payload, j)
        out.append(v)
    return out


def _cells(page: bytes, start: int, usable: int, pages: dict[int, bytes]) -> list[tuple[int, list]]:
    """(rowid, values) of every cell of a table-leaf page; a cell that cannot be read is skipped."""
    count = int.from_bytes(page[start + 3 : start + 5], "big")
    out = []
    for c in range(count):
        try:
            at = int.from_bytes(page[start + 8 + 2 * c : start + 10 + 2 * c], "big")
            size, i = _varint(page, at)
            rowid, i = _varint(page, i)
            payload = _payload(page, i, size, usable, pages)
            out.append((rowid, _record(payload)))
        except (ValueError, IndexError, UnicodeDecodeError, KeyError):
            continue
    return out


def _payload(page: bytes, i: int, size: int, usable: int, pages: dict[int, bytes]) -> bytes:
    most = usable - 35
    if size <= most:
        return page[i : i + size]
    if size > len(pages) * usable:
        raise ValueError("a record larger than the file")
    least = (usable - 12) * 32 // 255 - 23
    local = least + (size - least) % (usable - 4)
    local = local if local <= most else least
    data = bytearray(page[i : i + local])
    nxt = int.from_bytes(page[i + local : i + local + 4], "big")
    seen: set[int] = set()
    while len(data) < size and nxt:
        if nxt in seen:
            raise ValueError("overflow pages in a cycle")
        seen.add(nxt)
        over = pages[nxt]  # KeyError: the chain runs into a missing page
        data += over[4:usable]
        nxt = int.from_bytes(over[:4], "big")
    if len(data) < size:
        raise ValueError("overflow chain cut short")
    return bytes(data[:size])


def _pages(path: Path) -> tuple[dict[int, bytes], int]:
    """Every whole page of the file, then the newer copies in its write-ahead log (-wal), by page number."""
    data = fsutil.read_head(path, MAX_BYTES, follow=True)
    if len(data) < 100 or not data.startswith(b"SQLite format 3\x00"):
        return {}, 0
    size = int.from_bytes(data[16:18], "big")
    size = 65536 if size == 1 else size
    usable = size - data[20]
    if size < 512 or size & (size - 1) or usable < MIN_USABLE:  # a power of two, 512 to 65536
        return {}, 0
    pages = {n + 1: data[n * size : (n + 1) * size] for n in range(len(data) // size)}
    wal = Path(f"{path}-wal")
    if wal.is_file():
        w = fsutil.read_head(wal, MAX_BYTES)
        at = WAL_HEADER
        while at + WAL_FRAME_HEADER + size <= len(w):
            number = int.from_bytes(w[at : at + 4], "big")
            if number:
                pages[number] = w[at + WAL_FRAME_HEADER : at + WAL_FRAME_HEADER + size]
            at += WAL_FRAME_HEADER + size
    return pages, usable


def table_rows(path: str | Path, columns: int) -> dict[int, list]:
    """rowid -> values of every readable record with `columns` values on the file's table-leaf pages."""
    pages, usable = _pages(Path(path))
    out: dict[int, list] = {}
    for number, page in sorted(pages.items()):
        start = 100 if number == 1 else 0
        if len(page) <= start or page[start] != LEAF_TABLE:
            continue
        for rowid, values in _cells(page, start, usable, pages):
            if len(values) == columns:
                out[rowid] = values
    return out
