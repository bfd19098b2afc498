"""The `http` tool when its service fails (tests/switch_server.py on loopback): a 5xx burst or a slow answer within
the retries is ridden out and counted (`retries`, the episodes' `agent/tool_retries`); a service still failing after
them, or past agent.tool_timeout_s, is `ToolUnavailable`, which stops the run whatever agent.tool_error_budget says
(`over_budget`, `service_error`); a 4xx is the call's own error. Offered under its kwargs `name`, the service is
the calculator the model calls."""

from __future__ import annotations

import pytest

from rlexp.config.schema import ToolConfig
from rlexp.errors import ConfigError
from rlexp.tools.toolbox import ServiceDown, ToolBox, check_tools
from tests.helpers import compose_conf
from tests.switch_server import SwitchServer


def calculator_service(server: SwitchServer, tool_timeout_s: float = 5.0, **kwargs: object) -> ToolBox:
    """An http tool offered as the calculator; `kwargs` its own (retries, timeout_s), `tool_timeout_s` the agent's."""
    kw = {"url": server.url(), "name": "calculator", "backoff_s": 0.01, **kwargs}
    return ToolBox([ToolConfig(name="http", kwargs=kw)], timeout_s=tool_timeout_s)


def test_a_service_offered_as_the_calculator_answers_as_the_builtin_does() -> None:
    server = SwitchServer(after=10**6, then="down")
    try:
        b = calculator_service(server)
        assert b.specs()[0]["function"]["name"] == "calculator"
        assert b.call("calculator", {"expression": "12+34+56"}) == ("102", False)
        assert b.call("calculator", {"expression": "7/2"}) == ("3.5", False)
        text, failed = b.call("calculator", {"expression": "12+"})  # a 400: the model's bad call, not a dead service
        assert failed and "HTTP 400" in text and b.over_budget(1.0) is None
        assert b.retries == 0 and server.requests == 3
    finally:
        server.close()


def test_a_5xx_burst_within_the_retries_is_ridden_out_and_counted() -> None:
    server = SwitchServer(after=1, then="5xx", burst=3)
    try:
        b = calculator_service(server, retries=3)
        assert b.call("calculator", {"expression": "1+1"}) == ("2", False)
        assert b.call("calculator", {"expression": "2+2"}) == ("4", False)  # 503, 503, 503, then its answer
        assert b.retries == 3 == server.refused and b.over_budget(1.0) is None
    finally:
        server.close()


@pytest.mark.parametrize(
    ("then", "kwargs", "words"),
    [
        ("5xx", {"retries": 1}, "failed after 2 attempt(s): HTTP 503"),
        ("down", {"retries": 1}, "failed after 2 attempt(s)"),
        ("slow", {"retries": 1, "timeout_s": 0.2}, "failed after 2 attempt(s): timed out"),
    ],
)
def test_a_service_still_failing_after_its_retries_stops_the_run_whatever_the_budget(then, kwargs, words) -> None:  # noqa: ANN001
    server = SwitchServer(after=2, then=then, burst=5, slow_s=1.0)
    try:
        b = calculator_service(server, **kwargs)
        for _ in range(2):
            assert b.call("calculator", {"expression": "1+1"}) == ("2", False)
        text, failed = b.call("calculator", {"expression": "1+1"})
        assert failed and "calculator is unavailable" in text
        err = b.over_budget(1.0)  # one failure in three calls: under the budget, yet a dead service stops the run
        assert isinstance(err, ServiceDown) and words in str(err), err
        assert str(err).startswith("agent.tools' calculator entry: its service did not answer in a training step")
        assert "run the same command" in str(err) and "\n" not in str(err)
        assert b.over_budget(1.0) is None and b.retries == 1  # drained; the retry it made is counted
    finally:
        server.close()


def test_a_service_past_the_agents_timeout_is_unavailable() -> None:
    server = SwitchServer(after=0, then="slow", slow_s=1.0)
    try:
        b = calculator_service(server, tool_timeout_s=0.3, retries=0)
        text, failed = b.call("calculator", {"expression": "1+1"})
        assert failed and "timed out after 0.3 s" in text
        assert "no answer within agent.tool_timeout_s=0.3" in str(b.service_error("an eval"))
    finally:
        server.close()


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"retries": -1}, "retries"),
        ({"retries": 1.5}, "retries"),
        ({"backoff_s": -1}, "backoff_s"),
        ({"name": ""}, "name"),
        ({"retry": 2}, "retry"),
    ],  # fmt: skip
)
def test_bad_http_tool_kwargs_are_refused_naming_the_key(kwargs, key) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError, match=rf"^agent\.tools\[0\]\.kwargs\.{key}="):
        check_tools([ToolConfig(name="http", kwargs={"url": "http://127.0.0.1:1/", **kwargs})])


def test_two_http_tools_need_names_of_their_own() -> None:
    from rlexp.config.agent_rules import check_agent

    url = "http://127.0.0.1:1/"
    same = f"agent.tools=[{{name: http, kwargs: {{url: '{url}'}}}}, {{name: http, kwargs: {{url: '{url}'}}}}]"
    with pytest.raises(ConfigError, match="give each its own name"):
        check_agent(compose_conf(["experiment=tools_demo", same]))
    own = f"agent.tools=[{{name: http, kwargs: {{url: '{url}', name: a}}}}, {{name: http, kwargs: {{url: '{url}'}}}}]"
    check_agent(compose_conf(["experiment=tools_demo", own]))
