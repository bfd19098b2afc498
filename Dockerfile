# syntax=docker/dockerfile:1
# The image GKE pods and Slurm jobs run: rlexp and its pinned JAX stack; entrypoint `python -m rlexp`.
#   docker build -t IMAGE .                                   CPU (tests, CPU node pools)
#   docker build --build-arg ACCELERATOR=tpu -t IMAGE .       TPU: jax[tpu] + pathwaysutils (GKE, Pathways) + vllm-tpu
#   docker build --build-arg ACCELERATOR=cuda -t IMAGE .      NVIDIA GPUs: jax[cuda12] (Slurm, GKE GPU pools)
# Secrets never enter the image: pods get HF_TOKEN / WANDB_API_KEY from a Kubernetes Secret at run time.
# gcsfs: run files (metrics, summary, samples) go to gs:// output dirs through fsspec.
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ARG ACCELERATOR=cpu
ARG EXTRAS=gke,recipes,tracking
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RLEXP_CONF_DIR=/opt/rlexp/conf

RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin rlexp

WORKDIR /opt/rlexp
COPY pyproject.toml README.md LICENSE ./
COPY rlexp ./rlexp
COPY launchers ./launchers
COPY conf ./conf
# conf/sweep links to ../sweeps (the sweep presets)
COPY sweeps ./sweeps
RUN case "${ACCELERATOR}" in \
      cpu)  pip install ".[${EXTRAS}]" gcsfs ;; \
      tpu)  pip install ".[${EXTRAS},tpu]" gcsfs ;; \
      cuda) pip install ".[${EXTRAS}]" "jax[cuda12]==0.10.2" gcsfs ;; \
      *)    echo "ACCELERATOR must be cpu, tpu or cuda, not ${ACCELERATOR}" >&2; exit 1 ;; \
    esac \
 && python -c "import rlexp, hydra_plugins.rlexp_launchers"

USER rlexp
# Hydra writes the pod-local run dir here; run files go to output_dir (gs://...) set by the launcher
WORKDIR /home/rlexp
ENTRYPOINT ["python", "-m", "rlexp"]
