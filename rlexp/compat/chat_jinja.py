"""Chat-template Jinja rendered the way transformers' `apply_chat_template` renders it, without transformers.

transformers 5.x compiles chat templates in a sandboxed environment with `trim_blocks`, `lstrip_blocks` and
`keep_trailing_newline`, and gives templates a `raise_exception` global; rlexp renders its own chat templates
(and the builtin tokenizers' ones) through the same settings, so a prompt is the same text either way
(`tests/data/test_templates.py` compares them).
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=16)
def compiled_chat_template(template: str) -> Any:
    """The Jinja template object for `template`, compiled once per process."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)
