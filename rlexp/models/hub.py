"""Where a model's weights come from: `model.path` (local folder or gs://) or `model.hf_id` from the hub.

Hub downloads fetch only what rlexp reads (config, safetensors, tokenizer, chat template) with the
token from the HF_TOKEN environment variable; the token is passed in memory, never written.
Offline, gated or unknown repositories become one line that says what to do.
"""

from __future__ import annotations

import os

from rlexp.errors import RlexpError

# Everything of a model folder except its weights: what export copies next to new safetensors.
CONFIG_AND_TOKENIZER_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
)
# What a download (or a gs:// copy) fetches: the above plus the weights.
ALLOW_PATTERNS = [*CONFIG_AND_TOKENIZER_FILES, "*.safetensors", "model.safetensors.index.json"]


def download(hf_id: str, *, revision: str | None = None, cache_dir: str | None = None) -> str:
    """Download (or reuse from the cache) the files rlexp needs; returns the local snapshot folder."""
    from huggingface_hub import errors as hub_errors
    from huggingface_hub import snapshot_download

    token = os.environ.get("HF_TOKEN") or None
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
    try:
        return snapshot_download(
            hf_id,
            revision=revision,
            cache_dir=cache_dir,
            allow_patterns=ALLOW_PATTERNS,
            token=token,
            local_files_only=offline,
        )
    except hub_errors.GatedRepoError as err:
        how = "the token in HF_TOKEN has no access" if token else "set HF_TOKEN to a token"
        raise RlexpError(
            f"model.hf_id={hf_id} is gated: {how}; accept its license on huggingface.co and export HF_TOKEN"
        ) from err
    except hub_errors.RepositoryNotFoundError as err:
        hint = "check the id" if token else "check the id, or export HF_TOKEN if it is private"
        raise RlexpError(f"model.hf_id={hf_id}: no such repository on the hub ({hint})") from err
    except hub_errors.RevisionNotFoundError as err:
        raise RlexpError(f"model.hf_id={hf_id}: revision {revision!r} not found") from err
    except (hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled, OSError) as err:
        raise RlexpError(
            f"model.hf_id={hf_id}: cannot download (offline or hub unreachable) and no cached copy; "
            "download it on a connected machine and set model.path=<folder or gs:// path>"
        ) from err
