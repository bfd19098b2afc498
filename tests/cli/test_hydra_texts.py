"""The few texts of Hydra's and OmegaConf's exceptions rlexp still reads (rlexp.cli.TEXTS, and the resolver errors of
rlexp.errors), each triggered for real against the pinned hydra-core and omegaconf: a release that rewords one fails
here, not in front of a user. And where a known exception's text no longer matches, the error is still one line."""

from __future__ import annotations

import sys

import pytest
from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationKeyError, InterpolationResolutionError, ValidationError

from rlexp import cli
from rlexp.config.load import compose
from rlexp.errors import ConfigError, RlexpError, user_errors_from_resolvers


def test_the_pinned_versions() -> None:
    import hydra
    import omegaconf

    assert (hydra.__version__, omegaconf.__version__) == ("1.3.8", "2.3.1"), "re-pin the texts below, then this"


def composing(override: str) -> HydraException:
    """The exception Hydra raises composing conf/ with one override (no rlexp check before it)."""
    with pytest.raises(HydraException) as caught:
        compose([override])
    return caught.value


# name in cli.TEXTS -> (the override that makes Hydra raise, the exception type, the groups the text must give)
PINS = {
    "missing_option": ("model=qwen3_06b", MissingConfigException, ("model", "qwen3_06b")),
    "unknown_key": ("model.extra.x=1", ConfigCompositionException, ("model.extra.x",)),
    "append_hint": ("model.extra.x=1", ConfigCompositionException, ("model.extra.x", "1")),
    "key_exists": ("+trainer.beta=0.1", ConfigCompositionException, ("trainer.beta",)),
    "delete_missing": ("~trainer.nothere", ConfigCompositionException, ("trainer.nothere",)),
    "deleting": ("~trainer.beta", ConfigCompositionException, ("trainer.beta",)),
    "override": ("trainer.learning_rate=abc", ConfigCompositionException, ("trainer.learning_rate", "abc")),
}


@pytest.mark.parametrize("name", sorted(PINS))
def test_a_hydra_text_cli_reads_is_still_hydras(name: str) -> None:
    override, kind, groups = PINS[name]
    ex = composing(override)
    assert isinstance(ex, kind), type(ex)
    found = cli.TEXTS[name].search(str(ex))
    assert found is not None, f"Hydra reworded: {str(ex)[:300]!r}"
    assert found.groups()[: len(groups)] == groups


def test_a_missing_option_lists_the_options() -> None:
    found = cli.TEXTS["missing_option"].search(str(composing("model=qwen3_06b")))
    assert found is not None and {"tiny", "qwen3_0_6b"} <= set(found.group(3).split())


def test_deleting_a_schema_key_says_so_in_its_cause() -> None:
    ex = composing("~trainer.beta")
    assert cli.TEXTS["no_deletion"].search(str(ex.__cause__)), str(ex.__cause__)


def test_an_interpolation_error_names_its_key() -> None:
    with pytest.raises(InterpolationKeyError) as caught:
        _ = OmegaConf.create({"run_name": "${nosuch.key}"}).run_name
    assert isinstance(caught.value, InterpolationResolutionError)
    found = cli.TEXTS["interpolation_key"].search(str(caught.value).splitlines()[0])
    assert found is not None and found.group(1) == "nosuch.key"


def test_a_resolvers_config_error_still_reaches_the_user() -> None:
    """rlexp.errors.user_errors_from_resolvers reads OmegaConf's "Error raised while resolving interpolation: "."""

    def refuse(value: str) -> str:
        raise ConfigError("slice.topology", value, "does not match the slice's name")

    OmegaConf.register_new_resolver("rlexp_test_refuse", refuse, replace=True)
    try:
        with pytest.raises(RlexpError) as caught, user_errors_from_resolvers():
            _ = OmegaConf.create({"a": "${rlexp_test_refuse:4x4}"}).a
    finally:
        OmegaConf.clear_resolver("rlexp_test_refuse")
    assert str(caught.value) == "slice.topology='4x4': does not match the slice's name"


def test_every_text_cli_reads_is_pinned() -> None:
    assert set(cli.TEXTS) == set(PINS) | {"no_deletion", "interpolation_key"}


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("model.extra.x=1", "model.extra.x='1': not in this config yet; add it with +model.extra.x=1"),
        ("+trainer.beta=0.1", "trainer.beta=0.1: the key exists already; set it without the + (trainer.beta=0.1)"),
        ("~trainer.nothere", "trainer.nothere: cannot delete it, no such key; run python -m rlexp --cfg job"),
        ("~trainer.beta", "~trainer.beta: a key of the schema cannot be deleted"),
        ("trainer.learning_rate=abc", "trainer.learning_rate='abc': Value 'abc' of type 'str' could not be"),
        ("model=qwen3_06b", "model='qwen3_06b': no such option; did you mean qwen3_0_6b? use one of"),
    ],
)
def test_hydras_errors_become_rlexps_line(override: str, line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["rlexp", override])
    message = cli.one_line(composing(override))
    assert message is not None and message.startswith(line) and "\n" not in message, message


def _unknown_text(kind: type) -> BaseException:
    """An exception of a type cli knows, worded as no pinned text expects (a future release)."""
    if kind is OverrideParseException:
        return OverrideParseException(override="trainer.beta", message="the grammar changed its words")
    if kind is ConfigCompositionException:
        try:
            raise ConfigCompositionException("a wholly new sentence") from ValidationError("new words for a bad value")
        except ConfigCompositionException as ex:
            return ex
    if kind is InterpolationResolutionError:
        return InterpolationResolutionError("nothing quoted here")
    return kind("a wholly new sentence\nover two lines")


@pytest.mark.parametrize(
    "kind", [MissingConfigException, ConfigCompositionException, OverrideParseException, InterpolationResolutionError]
)
def test_a_known_error_whose_text_changed_is_still_one_line(kind: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["rlexp"])
    message = cli.one_line(_unknown_text(kind))
    assert message is not None and "\n" not in message and message.strip(), message
    assert cli.exit_code(_unknown_text(kind)) == 2


def test_a_text_that_no_longer_matches_falls_back_to_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break every pinned pattern: each real Hydra error still reads as one line (its first line, where to look)."""
    never = __import__("re").compile(r"(?!)")
    monkeypatch.setattr(cli, "TEXTS", dict.fromkeys(cli.TEXTS, never))
    for override in sorted({o for o, _, _ in PINS.values()}):
        monkeypatch.setattr(sys, "argv", ["rlexp", override])
        message = cli.one_line(composing(override))
        assert message is not None and "\n" not in message, (override, message)
