"""Plain machines: an mpirun-over-ssh script for hosts named on the command line or in a hostfile (render only).

executor.py     the executor that renders the script (its kind: core/kinds.py's HostsKind)
"""
