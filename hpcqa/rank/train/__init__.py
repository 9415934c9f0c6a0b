"""The training side: runs inside each rank. Only this package imports torch / transformers, at its modules' tops.

__main__.py     `python -m hpcqa.rank.train --plan PLAN.json`: one rank, as a rendered script starts it
run.py          the rank in named stages: startup, training arguments (DDP really on?), data, model, trainer,
                train, evaluate, results
facts.py        what a rank is and finds out about itself (Rank), its checks of the plan and the backend
trainer.py      the HF Trainer as a rank runs it: lockstep length-grouped batches, token counts, EM/F1 in
                evaluations
attention.py    the step's attention and dropout: bf16 stays bf16, masks drawn in bulk (model.attention)
fused.py        the fused CPU attention (csrc/fused_attention.cpp): built on first use, cached, verified, loaded
callbacks.py    the Trainer callbacks: progress, step timer, stop on a notice, final save, checkpoint mark
tracking.py     rank 0's MLflow run: params, curves, EM/F1, throughput, MFU, tags; sent from a thread, never failing
                the training; continued by a requeued attempt
evaluate.py     predictions post-processed and scored, run_qa.py's files written
finalmodel.py   the trained model and its tokenizer saved in the job folder (train.save_model)
master.py       bf16 weights with fp32 master weights: the optimizer over the masters, the final save
stop.py         the stop protocol: a notice, the agreement across ranks, the checkpoint, the requeue
resume.py       checkpoints read back: where to resume, the training call around it
data.py         SQuAD-format data -> model features, as run_qa.py does it (ranks and `hpcqa stage`)
model.py        model names -> a directory or a hub id (builtin:minilm, builtin:tiny-bert)
synth.py        a synthetic SQuAD-format data set: deterministic, seeded, real character spans
tiny_vocab.py   the tiny test model's WordPiece vocabulary, trained once (data: the same on every node)
batching.py     the lockstep length-grouped order of the features (pure)
postprocess.py  start/end logits -> answers, n-best lists and null odds (numpy)
metrics.py      SQuAD exact match and F1 by the official scripts' rules (pure Python)
efficiency.py   model FLOPs per sample, each rank's matmul peak (before and after training), MFU
peakcheck.py    whether the peak held during the job, how it was taken, whether to cache it (pure)
pruning.py      a search's trial: its metric reported at each evaluation, stopped when pruned
commbench.py    what communication costs: the all-reduce the backward did not hide, the link between nodes
"""
