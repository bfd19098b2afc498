"""One-line messages for the mistakes Hydra catches while composing (unknown option, key, wrong type).

Hydra reports these in several lines (search paths, reference types); rlexp's rule is one line
that names the key, the value and the fix, exit code 2. Anything this module does not recognise
keeps Hydra's own report, and HYDRA_FULL_ERROR=1 still shows the whole traceback.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

_MISSING_OPTION = re.compile(
    r"Could not find '([^']+)/([^']+)'.*?Available options in '[^']+':\n(.*?)(?:\nConfig search path|\Z)", re.S
)
_UNKNOWN_KEY = re.compile(r"Could not override '([^']+)'")


def one_line(ex: BaseException) -> str | None:
    """The one-line message for a composition error, or None when it is not one rlexp knows."""
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    text = str(ex)
    m = _MISSING_OPTION.search(text)
    if isinstance(ex, MissingConfigException) and m:
        group, option = m.group(1), m.group(2)
        options = [o.strip() for o in m.group(3).split() if o.strip() and not o.strip().endswith("_schema")]
        return f"{group}={option!r}: no such option; use one of {', '.join(options)}"
    cause = ex.__cause__ if isinstance(ex.__cause__, OmegaConfBaseException) else None
    if isinstance(ex, ConfigCompositionException) and cause is not None:
        key = getattr(cause, "full_key", None) or ""
        reason = str(cause).splitlines()[0].strip()
        unknown = _UNKNOWN_KEY.search(text)
        if unknown and unknown.group(1):
            name = unknown.group(1)
            return f"{name}: no such key ({reason}); check the spelling, or add a new key with +{name}=..."
        override = re.search(r"override (\S+)=(\S*)", text)
        value = override.group(2) if override else None
        return f"{key or (override.group(1) if override else '?')}={value!r}: {reason}"
    return None


def install() -> None:
    """Route Hydra's error reporting through `one_line` (called before `hydra.main` runs)."""
    from hydra._internal import utils as hydra_utils

    original: Callable[[Any], Any] = hydra_utils.run_and_report
    if getattr(original, "_rlexp", False):
        return

    def run_and_report(func: Any) -> Any:
        try:
            return func()
        except Exception as ex:  # noqa: BLE001 - re-reported below
            message = None if os.environ.get("HYDRA_FULL_ERROR") == "1" else one_line(ex)
            if message is None:
                error = ex

                def rethrow() -> None:
                    raise error

                return original(rethrow)  # Hydra's own report
            print(f"rlexp: error: {message}", file=sys.stderr)
            sys.exit(2)

    run_and_report._rlexp = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = run_and_report
