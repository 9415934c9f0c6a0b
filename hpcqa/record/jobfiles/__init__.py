"""The files a job leaves, one module each: a frozen value per file, read once at the job folder through one
bounded reader and one set of field rules; the views only format these values, and the writers build them.

fields.py      the field rules (a number not a bool, a count, seconds, text, lists, nested objects) and Damaged
reader.py      the one bounded reader: regular files only, no links, no blocking, a size cap, finite numbers
parts.py       objects several files share: the code, a command's folder, a notice, the all-reduce, the recipe
progress.py    progress.json: rank 0's step, loss and ETA
results.py     results.json: EM/F1, throughput, the step's split and efficiency, metrics, requeues
report.py      ranks/rank-N.json: a rank's host, CPUs, preloads, code, usage, warnings, notice
phase.py       ranks/rank-N.phase.json: where a rank is and since when
failure.py     ranks/rank-N.failed and .exit: why a rank failed
controller.py  controller.json: a local job's controller process and its identity
marks.py       a checkpoint's completion mark (files, sizes, digests); the first host's published address; the
               MLflow run a job sends to
"""
