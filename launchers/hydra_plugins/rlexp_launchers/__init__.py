"""rlexp's Hydra plugins: `hydra/launcher=gke` (JobSets on GKE, Pathways or multi-controller JAX),
`hydra/launcher=slurm` (Slurm jobs through submitit) and `hydra/sweeper=rlexp`.

Hydra imports every plugin at start-up, so this package imports only dataclasses and Hydra; the Kubernetes
client, submitit, manifests and JAX load when a launch happens.
"""
