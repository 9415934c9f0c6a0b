"""The job record: what a job left behind and what the scheduler says of it.

jobdir.py       the job folder's file names (the only owner), atomic reads and writes
jobfiles/       the files a job leaves, one frozen value each, read through one bounded reader and field rules
logtail.py      where `hpcqa logs` starts: the current attempt, the last N lines, found from the end
failures.py     why a rank failed: its own error, a hard signal, a lost peer
phases.py       the ranks' phase files read back: a rank's phase, the rendezvous warning
caches.py       the cache layout: model, data and feature caches, stage manifests, tuned layouts (the only owner)
manifest.py     the staging manifest read back: what `hpcqa stage` staged, and whether it is still there
tuned.py        `hpcqa tune` results: the candidates, the store of measured layouts
links.py        the links `hpcqa tune --comm` measured, per cluster, partition and backend
registry.py     the job registry (SQLite, WAL): its file and rows checked, a write tried before a submit
registrypath.py  where the registry is: the state folder, the default, what chose it
registryfix.py  an older hpcqa's per-folder registry adopted; a damaged one recovered (rows salvaged)
sqlitescan.py   rows read straight from an SQLite file's pages (recover, when SQLite cannot read it)
status.py       the job view (state, progress, results) and its texts
trainerfiles.py  what an HF Trainer program leaves (trainer_state.json, *_results.json), read back
results.py      a sweep's variants with their metrics, CSV, the plot
study.py        a search's study (Optuna): opened, checked, asked, told, reported to
scalingruns.py  the scaling model fed with what was recorded: a finished run, a sweep over nodes
worktree.py     a user command's folder: listed, copied content-addressed, verified at the rank
"""
