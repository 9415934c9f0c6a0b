"""The job record: what a job left behind and what the scheduler says of it.

    jobdir.py      the job folder's file names (the only owner)
    failures.py    why a rank failed: its own error, a hard signal, a lost peer
    caches.py      the cache layout: model, data and feature caches, stage manifests, tuned layouts (the only owner)
    tuned.py       `hpcqa tune` results: the candidates, the store of measured layouts
    registry.py    the job registry (SQLite)
    status.py      registry rows + the executors' states + job files -> views
    statusview.py  views -> terminal text
    results.py     a sweep's variants with their metrics
"""
