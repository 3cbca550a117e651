"""Tool use: the tools offered to a model, the calls it makes, and reading those calls out of its text.

Pure Python, below everything else in the engine (engine.config's ChatMessage carries ToolCalls):
no model, no template engine, no network. Rendering tools into a prompt is engine/chat/template.py's
job; engine/tools/fallback.py is the rewrite for templates that have no tools.
"""

from engine.tools.calls import (
    MalformedToolCall,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    ToolSpec,
    json_quoted,
    new_call_id,
)
from engine.tools.parser import Found, Span, ToolCallParser
from engine.tools.syntax import (
    COMMAND_R,
    DEEPSEEK,
    GRANITE,
    HARMONY,
    HERMES,
    LLAMA3,
    MISTRAL,
    QWEN_XML,
    ToolSyntax,
    detect,
    supports_tools,
)

__all__ = [
    "COMMAND_R",
    "DEEPSEEK",
    "GRANITE",
    "HARMONY",
    "HERMES",
    "LLAMA3",
    "MISTRAL",
    "QWEN_XML",
    "Found",
    "MalformedToolCall",
    "Span",
    "ToolCall",
    "ToolCallParser",
    "ToolChoice",
    "ToolChoiceMode",
    "ToolSpec",
    "ToolSyntax",
    "detect",
    "json_quoted",
    "new_call_id",
    "supports_tools",
]
