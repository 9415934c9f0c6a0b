"""The rank side: what runs on the compute node, inside each rank.

wrapper.py      `python -m hpcqa.rank`: maps the launcher's variables, pins, supervises the rank (stdlib only,
                but for submitit where its runtime runs the rank)
__main__.py     `python -m hpcqa.rank`: the wrapper's entry
job.py          RankJob, the callable submitit pickles (light: it imports the trainer only in a training rank)
picklecheck.py  submitit's pickle checked before it is loaded (opcodes read, never run)
command.py      a user command's rank: its variables, its process group, notices, exit code, results
child.py        the supervisor's child before exec: dies with its parent (PR_SET_PDEATHSIG)
exits.py        how a rank's process leaves (no interpreter teardown), which code it imported
binding.py      the main thread given its whole pool back after OpenMP bound it, before the trainer's imports
phase.py        a rank's phase file (starting, at the rendezvous, training step N, ...)
preload.py      the preloadable libraries this machine has (tcmalloc, jemalloc, libiomp5)
netif.py        a network interface's address (launch.master_interface)
runends.py      how MLflow runs end with no submit waiting: a sweep's parent, a failed job's run, resumed curves
train/          the trainer: QA data pipeline, model, Trainer, post-processing and metrics (imports torch)
"""
