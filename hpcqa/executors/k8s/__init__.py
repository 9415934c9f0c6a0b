"""Kubernetes, render only: the same plan as Kubeflow objects, one pod per node, and the image the pods run.

pods.py         the pod kit every object shares: names, labels, the pod template, the node script and the
                variables that carry the plan, security, tolerations, the staging pod, checks
manifest.py     the objects as files: dicts, YAML every reader reads back as written, a dict back to a model
trainjob.py     Kubeflow Trainer v2: the TrainingRuntime and the TrainJob, the staging Job
pytorchjob.py   the training operator v1: the PyTorchJob
image.py        the image's Dockerfile, and what planning may assume of it
"""
