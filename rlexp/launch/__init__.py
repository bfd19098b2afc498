"""Launching runs elsewhere: slices, JobSet manifests for GKE (Pathways or multi-controller JAX), Slurm, in-job setup.

Importing this package is cheap; the Kubernetes client and JAX are imported only by the functions that need them.
"""
