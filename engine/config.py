"""Frozen settings records shared by the engine, the CLI and the app."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from engine.tools.calls import ToolCall


class DrafterMode(str, Enum):
    """Where draft tokens come from."""

    AUTO = "auto"  # choose per round from measured costs and acceptance (may choose none)
    DRAFT_MODEL = "draft"  # the small draft model
    LOOKUP = "lookup"  # n-gram match against the conversation so far
    BOTH = "both"  # lookup when it matches, the draft model otherwise
    MTP = "mtp"  # the target's own next-token-prediction head (a GGUF with MTP layers)
    OFF = "off"  # plain decoding


class DrafterKind(str, Enum):
    """Which drafter proposed a round's tokens (DrafterMode says which ones may be chosen)."""

    DRAFT_MODEL = "draft"  # the small draft model
    LOOKUP = "lookup"  # prompt lookup
    HISTORY = "history"  # the user's earlier conversations (engine/history)
    DOCUMENTS = "documents"  # the user's documents found for this answer (engine/documents)
    MTP = "mtp"  # the target's own MTP head (engine/llama/mtp.py)
    NONE = "none"  # nothing drafted: the round is one plain target step


class TokenSource(str, Enum):
    """Who proposed a token that ended up in the answer."""

    TARGET = "target"  # sampled by the target itself (plain step, correction or bonus)
    DRAFT_MODEL = "draft"  # proposed by the draft model and accepted by the target
    LOOKUP = "lookup"  # proposed by prompt lookup and accepted by the target
    HISTORY = "history"  # continued from the user's earlier conversations and accepted by the target
    DOCUMENTS = "documents"  # continued from the user's documents found for the answer and accepted by the target
    MTP = "mtp"  # proposed by the target's own MTP head and accepted by the target


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen. temperature 0 means greedy (argmax)."""

    temperature: float = 0.7
    top_k: int = 40  # 0 disables
    top_p: float = 0.95  # 1.0 disables
    min_p: float = 0.05  # 0.0 disables
    seed: int | None = None  # None: a fresh seed per answer
    max_tokens: int = 1024
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def with_(self, **changes) -> SamplingParams:
        return replace(self, **changes)


@dataclass(frozen=True)
class SpecParams:
    """How speculation runs. draft_length None lets the engine choose it each round."""

    mode: DrafterMode = DrafterMode.AUTO
    draft_length: int | None = None  # fixed k (1..16) or None for adaptive
    max_draft_length: int = 31  # a verify batch of 32: the widest the calibration times
    # The draft model stops proposing once its own probability for the next token falls
    # below this (llama.cpp's p_min). None: adapt it from acceptance.
    draft_p_min: float | None = None
    lookup_ngram_max: int = 4
    lookup_ngram_min: int = 1
    # Auto may also draft from the user's earlier conversations (when the engine has a history index).
    history: bool = True
    # Verify draft-model tokens by sample-and-match (keep x iff the target's own sample is x)
    # instead of the rejection rule. Also lossless, but accepts less; kept for the benchmark.
    sample_and_match: bool = False

    def with_(self, **changes) -> SpecParams:
        return replace(self, **changes)


GPU_LAYERS_ALL = -1  # every layer, the output layer included
GPU_LAYERS_AUTO = -2  # as many as fit in free GPU memory (engine/llama/offload.py)


@dataclass(frozen=True)
class ModelSpec:
    """One GGUF file and how to load it."""

    path: str
    n_gpu_layers: int = GPU_LAYERS_AUTO  # a count, GPU_LAYERS_ALL or GPU_LAYERS_AUTO; 0: the CPU only
    n_ctx: int = 4096
    n_threads: int | None = None  # None: physical cores as llama.cpp counts them
    n_batch: int = 512
    # llama.cpp's AMX kernels crash on batched decodes (engine/llama/cpu_weights.py): off unless asked.
    allow_amx: bool = False
    # Load the file's MTP (next-token prediction) layers, if it has any, to draft with them: a few
    # percent more memory for a drafter that needs no draft file. False leaves them on disk.
    mtp: bool = True
    name: str = ""  # what the user calls it (a rename in the library); "" = the clean name from its header

    def with_(self, **changes) -> ModelSpec:
        return replace(self, **changes)


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str
    reasoning: str = ""  # an assistant's thinking before its answer (sent back only if the template keeps it)
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls (its content is what it said besides)
    tool_call_id: str = ""  # a tool message: the call it answers
    name: str = ""  # a tool message: the function that answered
