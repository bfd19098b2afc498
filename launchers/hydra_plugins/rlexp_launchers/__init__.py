"""rlexp's Hydra launchers: `hydra/launcher=gke` (JobSets on GKE, Pathways or multi-controller JAX).

Hydra imports every plugin at start-up, so this package imports only dataclasses; the Kubernetes client,
manifests and JAX load when a launch happens.
"""
