"""hpcqa: distributed question-answering fine-tuning on Xeon CPU clusters.

Importing this package is cheap: torch and transformers are only imported by ``hpcqa.train``.
"""

__version__ = "0.1.0"
