"""The pure core: config -> plan. No subprocess, no scheduler, no torch.

    config.py     TOML -> validated, frozen Config (unknown keys fail with "did you mean")
    configcheck.py  the rules across keys (cores, stride, nodes, paths, setup, sbatch flags, names, sizes)
    topology.py   sockets / NUMA / cores -> per-rank CPU pools
    threadenv.py  a CPU pool -> OMP/KMP/CCL/I_MPI variables (the one rule; the rank applies it too)
    distenv.py    launcher variables (Slurm, PMI, submitit) -> RANK/WORLD_SIZE/...; nodelists; ports
    targets.py    where a plan runs (local, slurm, k8s): affinity, launchers, run-time env; Launcher, Requeue
    plan.py       build_plan(config, host) -> LaunchPlan: what every rank gets
    sweep.py      [sweep] -> variants -> Slurm arrays (SweepPlan)
    states.py     the one table of job states (State) and of a scheduler's answers (Source, Answer)
    squadfile.py  SQuAD-format data files, parsed
"""
