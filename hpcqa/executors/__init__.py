"""Executors: each is one module that turns a sweep plan into a Request (`dry_run`) and submits that Request
(`submit`), plus the job verbs of where its jobs run. The protocol is interface.py; which executor runs a plan is
table.py. The CLI, the API, sweeps and `tune` all go through the table.

    interface.py  Request, Submitted, the Executor and JobVerbs protocols
    table.py      (executor, launcher, mode) -> executor; registry executor -> job verbs
    local.py      this machine (submitit's LocalExecutor), its job verbs, free-core choice
    slurm.py      Slurm: hpcqa's sbatch text + submitit's task runtime (arrays for sweeps); Slurm job verbs
    script.py     Slurm: a rendered srun/mpirun script under sbatch (launcher mpirun, render --submit)
    hosts.py      plain machines: an mpirun-over-ssh script (render only)
    k8s.py        Kubernetes: the pods, the PyTorchJob, the Dockerfile (render only)
    trainjob.py   Kubernetes: TrainingRuntime + TrainJob (Trainer v2), the staging Job (render only)
    render.py     plan -> script text (templates in sbatch_templates/)
    slurmcli.py   the one door to Slurm's commands
    common.py     plan files, the rank wrapper's command, registry rows, watching and reporting a job
    cancel.py     which registry rows a list of ids means
    tune.py       `hpcqa tune`: candidate layouts as ordinary jobs through the table
"""
