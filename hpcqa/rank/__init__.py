"""The rank side: what runs on the compute node, inside each rank.

    wrapper.py   `python -m hpcqa.rank`: maps the launcher's variables, pins, supervises the rank (stdlib only)
    netif.py     a network interface's address (launch.master_interface)
    train/       the trainer: QA data pipeline, model, Trainer, post-processing and metrics (imports torch)
"""
