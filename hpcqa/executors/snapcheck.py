"""Verify a code snapshot before anything is imported from it. Standard library only, and self-contained: a copy of
this file sits in the snapshot (CHECKER); the job script first checks that copy's sha256 (coreutils' sha256sum,
against the digest written into the script at submit), then runs it with `python -I` (isolated: no PYTHONPATH, no
script folder, no user site), so nothing from the folder runs before the folder is checked. The folder name carries
the digest the submitted script expects."""

import hashlib
import json
import os
import sys

MANIFEST = "MANIFEST.json"
PROVENANCE = "provenance.json"
CHECKER = "snapcheck.py"
SOURCES = (".py", ".cpp")  # what a snapshot holds: hpcqa's modules and the kernel the ranks compile


def digest_of(files):
    """The snapshot digest over (relative path, bytes) of the package's source files (.py, and the .cpp the ranks
    compile), sorted by path."""
    h = hashlib.sha256()
    for rel, data in sorted(files):
        h.update(rel.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:16]


def problems(folder, digest):
    """What is wrong with the snapshot in `folder` (None when it verifies): one line naming the file."""
    if os.path.islink(folder) or not os.path.isdir(folder):
        return f"{folder} is not the snapshot folder (missing, or a symlink)"
    files, extra = [], []
    pkg = os.path.join(folder, "hpcqa")
    for entry in sorted(os.listdir(folder)):
        if entry not in ("hpcqa", MANIFEST, PROVENANCE, CHECKER) or os.path.islink(
            os.path.join(folder, entry)
        ):
            extra.append(entry)
    for top, dirs, names in os.walk(pkg):
        for name in sorted(dirs + names):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, pkg)
            if (
                os.path.islink(path)
                or name == "__pycache__"
                or (name in names and not name.endswith(SOURCES))
            ):
                extra.append(os.path.join("hpcqa", rel))
            elif name in names:
                with open(path, "rb") as f:
                    files.append((rel, f.read()))
        dirs[:] = [
            d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(top, d))
        ]
    if extra:
        return f"{os.path.join(folder, extra[0])} was not in the submitted snapshot"
    if digest_of(files) == digest:
        return None
    try:
        with open(os.path.join(folder, MANIFEST)) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        manifest = {}
    now = {rel: hashlib.sha256(data).hexdigest() for rel, data in files}
    changed = sorted(
        set(now) ^ set(manifest) | {r for r in now if manifest.get(r) not in (None, now[r])}
    )
    where = os.path.join(folder, "hpcqa", changed[0]) if changed else folder
    return f"{where} changed after submit (snapshot digest {digest_of(files)}, submitted {digest})"


if __name__ == "__main__":  # python -I FOLDER/snapcheck.py FOLDER DIGEST
    bad = problems(sys.argv[1], sys.argv[2])
    if bad:
        print(
            f"hpcqa: refusing to run: {bad}; re-submit to snapshot the code again", file=sys.stderr
        )
        sys.exit(2)
