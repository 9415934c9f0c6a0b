"""The pure core: config -> plan. No subprocess, no scheduler, no torch.

config.py       TOML -> validated, frozen Config (unknown keys fail with "did you mean")
tomlfile.py     the config file read: a regular file of a config's size, hostile TOML as one syntax error
configcheck.py  the rules across keys (cores, stride, nodes, paths, setup, sbatch flags, names, sizes)
options.py      a field's default, help and bounds, read by the validator and the config reference
values.py       what a config string may hold: no control characters, no credential shapes or names
k8sconfig.py    the [k8s] section: how the Kubernetes objects are shaped
tracking.py     train.report_to and the [tracking] section: where runs go (TensorBoard, MLflow), the URI as data
frozen.py       read-only containers for values that cross process boundaries
topology.py     sockets / NUMA / cores / CPU ids -> per-rank CPU pools (the Intel affinity formula)
threadenv.py    a CPU pool -> OMP/KMP/CCL/I_MPI variables (the one rule; the rank applies it too)
distenv.py      launcher variables (torchrun, Intel MPI, Open MPI, Slurm, submitit) -> RANK/WORLD_SIZE/...;
                nodelists; ports
kinds.py        the executor kinds (local, slurm, k8s): affinity, launchers, run-time env; Launcher, Requeue
plan.py         build_plan(config, host) -> LaunchPlan: what every rank gets (deep-frozen, digest, JSON)
ranklayout.py   how many ranks a node runs and on which CPUs: declared, tuned or heuristic; on the node
folders.py      the placeholders a plan names its job folder with (%j, the submission token)
command.py      job.command: placeholders filled, the interpreter, the files it names, sweep variables
sweep.py        [sweep] -> validated variants -> Slurm arrays (SweepPlan; a plain job is a sweep of one)
sweepcheck.py   what a sweep's variants may not do: repeat a run, vary what its tasks share, share a variable
search.py       a [sweep] that searches: strategy, trials, metric, pruner, storage, the space, checked
scaling.py      what more nodes would buy: a data-parallel step modelled from one run and one link
states.py       the one table of job states (State) and of a scheduler's answers (Source, Answer)
eta.py          how long a training has left: the recent step rate, read the same by every view
squadfile.py    SQuAD-format data files, parsed (nested, flat, JSON lines)
modelfacts.py   a model's files as rules: its positions, its tokenizer's kind, the share of unknown tokens
"""
