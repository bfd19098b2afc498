"""These tests run the user's commands in-process (tests.launch.conftest.run_cli): reset Hydra's global config
after each, as the launch tests do."""

from tests.launch.conftest import _no_hydra_config_afterwards  # noqa: F401 - an autouse fixture
