"""Turn a conversation into the prompt text the model was trained on.

Uses the GGUF's own chat template through llama-cpp-python's sandboxed Jinja formatter, and
falls back to ChatML when a file has no template or its template fails to render.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from engine.config import ChatMessage
from engine.gguf import GGUFInfo

log = logging.getLogger(__name__)


def chatml(messages: Sequence[ChatMessage]) -> str:
    parts = [f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


class ChatFormatter:
    def __init__(self, info: GGUFInfo):
        tokens = info.tokens
        bos, eos = info.get("tokenizer.ggml.bos_token_id"), info.get("tokenizer.ggml.eos_token_id")
        self.bos_text = tokens[bos] if bos is not None and 0 <= bos < len(tokens) else ""
        self.eos_text = tokens[eos] if eos is not None and 0 <= eos < len(tokens) else ""
        self._jinja = None
        if info.chat_template:
            try:
                self._jinja = Jinja2ChatFormatter(info.chat_template, eos_token=self.eos_text, bos_token=self.bos_text)
            except Exception as e:  # a template that does not even compile
                log.warning("chat template of %s does not compile (%s); using ChatML", info.name, e)

    @property
    def uses_model_template(self) -> bool:
        return self._jinja is not None

    def format(self, messages: Sequence[ChatMessage]) -> str:
        if self._jinja is not None:
            try:
                return self._jinja(messages=[{"role": m.role, "content": m.content} for m in messages]).prompt
            except Exception as e:  # templates raise on roles they do not know, etc.
                log.warning("chat template failed (%s); using ChatML", e)
        return chatml(messages)
