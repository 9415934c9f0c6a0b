"""Slurm: everything hpcqa knows of it, submit side and node side, as submitit keeps SlurmJobEnvironment beside
SlurmExecutor. The node side (node.py) is at the rank's layer: the rank imports it, it imports core and record only.

executor.py     submitit's task runtime under hpcqa's sbatch text (arrays for sweeps); the Slurm job verbs
batch.py        that sbatch text: one step of every rank under srun, submitit's log names
script.py       a rendered srun/mpirun script under sbatch (launcher mpirun, render --submit)
cli.py          the one door to Slurm's commands on the submit side: argv builders, parsers, Slurm(runner)
searchnext.py   a search's batch: its arrays, then a follow-up job (afterany) that asks for the next
followup.py     that follow-up job's work on a node: tell the study, submit the next batch
node.py         what a rank asks Slurm and how it reads the answers: scontrol show, squeue, the requeue
"""
