"""The training side: runs inside each rank. Only this package imports torch / transformers."""
