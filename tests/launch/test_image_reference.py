"""Images a JobSet would carry parse as OCI references before anything renders (hydra.launcher.*, RLEXP_IMAGE)."""

from __future__ import annotations

import pytest

from rlexp.config.launcher import GkeLauncherConf, check_image, check_settings
from rlexp.errors import ConfigError

GOOD = [
    "rlexp:latest",
    "us-docker.pkg.dev/p/rlexp/rlexp@sha256:" + "0" * 64,
    "localhost:5000/a/b:t",
    "docker.io/library/ubuntu:22.04@sha256:" + "a" * 64,
    "a__b/c-d.e:1.0",
]
BAD = ["", "Bad Image!!", "a//b", "x:", "x@sha256:00", "ghcr.io/Org/x", "x@sha256:" + "0" * 63]


@pytest.mark.parametrize("image", GOOD)
def test_references_the_runtimes_pull_pass(image: str) -> None:
    check_image("hydra.launcher.image", image)


@pytest.mark.parametrize("image", BAD)
def test_other_names_are_refused_naming_the_key(image: str) -> None:
    with pytest.raises(ConfigError, match="hydra.launcher.image="):
        check_image("hydra.launcher.image", image)


def test_the_variable_that_set_it_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLEXP_IMAGE", "Bad Image!!")
    with pytest.raises(ConfigError, match=r"\(set by env RLEXP_IMAGE\)"):
        check_settings(GkeLauncherConf(image="Bad Image!!"))


@pytest.mark.parametrize(("key", "value"), [("queue", ""), ("queue", " "), ("kueue_priority_class", "")])
def test_an_empty_queue_name_is_refused(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"hydra.launcher.{key}="):
        check_settings(GkeLauncherConf(image=GOOD[1], **{key: value}))
