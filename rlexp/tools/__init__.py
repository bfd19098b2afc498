"""Tools a model calls during an episode (agent=tools): the registry, the builtin tools and the call formats.

`register` adds a tool as rewards are added; `formats` parses a model turn's calls and renders the results in
Qwen's, Gemma's or gpt-oss harmony's convention; `ToolBox` runs calls, turning any fault into a message.
"""

from rlexp.tools.registry import Tool, register
from rlexp.tools.toolbox import ToolBox, known_tools

__all__ = ["Tool", "ToolBox", "known_tools", "register"]
