"""The local executor: this machine, the same ranks, environment and pinning as on a cluster (submitit's
LocalExecutor as the controller).

executor.py     the executor (dry run, submit, the free-core choice) and its job verbs (states, usage, cancel)
searchloop.py   a search: batch after batch of trials, the study told how each ended
"""
