"""Executors: each is one folder (its kind's executor, its job verbs, its node side) that turns a sweep plan into a Request (`dry_run`) and submits that Request
(`submit`), plus the job verbs of where its jobs run. The protocol is interface.py; which executor runs a plan is
table.py. The CLI, the API, sweeps and `tune` all go through the table.

    interface.py    Request, Submitted, the Executor and JobVerbs protocols
    table.py        (executor kind, launcher, mode) -> executor; a registry row's executor -> job verbs
    local/          this machine (submitit's LocalExecutor), its job verbs, free-core choice
    slurm/          Slurm: submitit's runtime, rendered scripts, its commands, and what a rank asks it
    hosts/          plain machines: an mpirun-over-ssh script (render only)
    k8s/            Kubernetes (render only): the pods, the TrainJob, the PyTorchJob, the image
    render.py       plan -> script text (templates in sbatch_templates/, every value shlex-quoted)
    snapshot.py     the code snapshot a job imports (content-addressed, with a manifest)
    snapcheck.py    its checker: standard library only, run by the job script with python -I
    tracking.py     MLflow on the submit side: checks before queueing, where the runs go, a sweep's parent run
    hostprobe.py    what the submit host has (sbatch, oneCCL bindings, libraries, tuned layouts) -> HostProbe
    torchbuild.py   which torch build is installed (CPU or CUDA, read without importing it) and its CUDA libraries
    common.py       plan files, the rank wrapper's command, registry rows, watching and reporting a job
    jobs.py         the job list: registry rows + each executor's live states + job files -> job views
    cancel.py       which registry rows a list of ids means, and stopping them
    tune.py         `hpcqa tune`: candidate layouts as ordinary jobs through the table
    searching.py    a search's next batch: the study asked, its trials planned like a grid's tasks
"""
