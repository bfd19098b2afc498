"""rlexp.config.overrides checks an override's value against a structured node of its one field; composing checks
it against the whole group's node. OmegaConf's verdict on the whole node is the reference: the same refusal (or
none) for every field of every schema dataclass."""

from __future__ import annotations

import dataclasses
import functools

from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from rlexp.config import schema
from rlexp.config.overrides import _refused

VALUES = [None, -1, 1.5, "abc", True, [1, 2], {"a": 1}]


@functools.cache
def _whole_node(owner: type):  # noqa: ANN202 - one node a class: a value set in it does not change the next verdict
    return OmegaConf.structured(owner)


def _whole_node_says(owner: type, name: str, value: object) -> str | None:
    node = _whole_node(owner)
    try:
        node[name] = value
    except ValidationError as err:
        return str(err).strip().splitlines()[0].strip() or type(err).__name__
    return None


def test_the_one_field_check_refuses_what_the_whole_node_refuses() -> None:
    classes = [c for c in vars(schema).values() if isinstance(c, type) and dataclasses.is_dataclass(c)]
    pairs = [(c, f.name) for c in classes for f in dataclasses.fields(c)]
    assert len(pairs) > 150
    verdicts = [
        (c.__name__, name, v, _whole_node_says(c, name, v), _refused(c, name, v)) for c, name in pairs for v in VALUES
    ]
    differ = [row for row in verdicts if row[3] != row[4]]
    assert not differ, differ[:5]
    assert _refused(schema.TrainerConfig, "learning_rate", "abc") is not None  # it does refuse
