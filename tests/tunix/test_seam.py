"""One seam to Tunix: outside rlexp/tunix/, rlexp/fixes/ and rlexp/perf/ no module names a private of Tunix, every
private the seam names is a row of its table (rlexp.tunix.privates), and every row's fingerprint is the pinned
Tunix's source."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import compose_conf
from tests.tunix.privates_scan import scan

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ("rlexp/tunix/", "rlexp/fixes/", "rlexp/perf/")


@pytest.fixture(scope="module")
def found() -> dict:
    """The scan of rlexp/ (seconds: in a fixture, so collecting the suite does not pay it in every worker)."""
    return scan(ROOT / "rlexp")


def test_no_tunix_private_outside_the_seam_fixes_and_perf(found: dict) -> None:
    outside = {path: hits for path, hits in found.items() if not path.startswith(ALLOWED)}
    assert not outside, f"Tunix privates named outside {ALLOWED}: {outside}"


def test_the_scan_finds_a_private_where_one_is_reached(tmp_path: Path) -> None:
    pkg = tmp_path / "rlexp"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "from tunix.sft import profiler\n"
        "def f(trainer, own):\n"
        "    trainer._pbar = None\n"  # an attribute of Tunix's trainer
        "    own._lock = 1\n"  # rlexp's own, defined below
        "    return profiler.Profiler._is_active, getattr(trainer, '_lora_enabled')\n"
        "class Mine:\n"
        "    def __init__(self):\n"
        "        self._lock = None\n"
    )
    assert scan(pkg) == {"rlexp/a.py": [(3, "_pbar"), (5, "_is_active"), (5, "_lora_enabled")]}


def test_every_private_the_seam_names_is_in_its_table(found: dict) -> None:
    from rlexp.tunix.privates import names

    seam = {name for path, hits in found.items() if path.startswith("rlexp/tunix/") for _, name in hits}
    assert seam, "the scan found nothing in the seam: it no longer sees what it should"
    assert seam <= names(), f"named in rlexp/tunix but not in privates.PRIVATES: {sorted(seam - names())}"


@pytest.mark.slow  # imports Tunix's modules: ~5 s
def test_every_row_matches_the_pinned_tunix_and_a_changed_source_fails_in_one_line(monkeypatch) -> None:
    from rlexp.compat import patching
    from rlexp.tunix import privates

    for p in privates.PRIVATES:
        t = p.target()
        assert patching.fingerprint(patching.original(t.owner, t.attr)) == p.fingerprint, t.name
    conf = compose_conf()
    privates.check(conf)  # the default run's rows
    row = next(p for p in privates.PRIVATES if p.names == ("_pbar",))
    monkeypatch.setattr(row.target().owner, "train", lambda self: None)  # "Tunix's main branch"
    with pytest.raises(patching.PatchGuardError) as err:
        privates.check(conf)
    assert str(err.value).startswith(
        "tunix private=_pbar: tunix.sft.peft_trainer.PeftTrainer.train is not the code the patch was written "
        "against (google-tunix 0.1.7: source fingerprint "
    )
    assert "\n" not in str(err.value) and str(err.value).endswith(patching.REINSTALL)
