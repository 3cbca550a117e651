"""Which chat format a model speaks when its file carries no template: llama.cpp's built-in ones.

llama.cpp knows the formats of the common families by name (`llama_chat_builtin_templates`) and
applies them itself (`llama_chat_apply_template`). Its own detection reads a template's text; a
file without one is recognised here by the control tokens of its vocabulary (a Gemma base model
still has `<start_of_turn>`), then by its architecture. Header-only, so the library can say it too.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

import llama_cpp

from engine.gguf.header import GGUFInfo

# (llama.cpp's name, the tokens that give the family away), most specific first: Phi-4 also has
# ChatML's tokens, Mistral v7 also has v3's.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpt-oss", ("<|start|>", "<|channel|>", "<|message|>")),
    ("llama4", ("<|header_start|>", "<|header_end|>", "<|eot|>")),
    ("llama3", ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")),
    ("gemma", ("<start_of_turn>", "<end_of_turn>")),
    ("deepseek3", ("<｜User｜>", "<｜Assistant｜>")),
    ("phi4", ("<|im_start|>", "<|im_sep|>", "<|im_end|>")),
    ("phi3", ("<|user|>", "<|assistant|>", "<|end|>")),
    ("command-r", ("<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>")),
    ("granite", ("<|start_of_role|>", "<|end_of_role|>")),
    ("mistral-v7", ("[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]")),
    ("mistral-v3", ("[INST]", "[/INST]")),
    ("chatml", ("<|im_start|>", "<|im_end|>")),
)
# Architectures whose format is certain even if the vocabulary were to say nothing.
ARCHITECTURES = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma", "phi3": "phi3"}
# What users call the formats (llama.cpp's names otherwise).
LABELS = {
    "gemma": "Gemma",
    "llama3": "Llama 3",
    "llama4": "Llama 4",
    "chatml": "ChatML",
    "phi3": "Phi-3",
    "phi4": "Phi-4",
    "deepseek3": "DeepSeek",
    "gpt-oss": "gpt-oss",
    "mistral-v3": "Mistral v3",
    "mistral-v7": "Mistral v7",
    "command-r": "Command R",
    "granite": "Granite",
}


def label(name: str) -> str:
    return LABELS.get(name, name)


@functools.lru_cache(maxsize=1)
def builtin_names() -> tuple[str, ...]:
    """Every chat format llama.cpp applies by name (the presets Settings offers)."""
    n = llama_cpp.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * n)()
    llama_cpp.llama_chat_builtin_templates(names, n)
    return tuple(sorted(name.decode() for name in names))


def detect_family(info: GGUFInfo) -> str | None:
    """llama.cpp's name for this model's chat format, from its vocabulary and architecture; None if unknown."""
    vocab = set(info.tokens)
    tekken = info.get("tokenizer.ggml.pre") == "tekken"
    for name, markers in FAMILIES:
        if all(m in vocab for m in markers):
            if name.startswith("mistral") and tekken:
                return f"{name}-tekken"
            return name
    return ARCHITECTURES.get(info.architecture)


def apply_builtin(name: str, messages: Sequence[tuple[str, str]], add_generation_prompt: bool = True) -> str:
    """The conversation in llama.cpp's built-in format `name` (raises ValueError if it has none)."""
    chat = (llama_cpp.llama_chat_message * len(messages))()
    keep = []  # the encoded strings must outlive the call
    for i, (role, content) in enumerate(messages):
        keep += [role.encode(), content.encode()]
        chat[i].role, chat[i].content = keep[-2], keep[-1]
    size = 256 + sum(len(b) for b in keep) * 2
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(messages), add_generation_prompt, buf, size)
        if n < 0:
            raise ValueError(f"llama.cpp has no built-in chat format '{name}'")
        if n <= size:
            return buf.raw[:n].decode("utf-8", errors="replace")
        size = n + 1
    raise ValueError(f"llama.cpp's chat format '{name}' did not fit its buffer")
