"""Can this draft propose tokens for that target? llama.cpp's rules, on GGUF headers alone.

The rules (common/speculative.cpp): same vocabulary type, the same add-BOS/EOS flags and, where
the vocabulary adds that token, the same id; vocabulary sizes within 128, identical token texts
from id 5 on. An EOS the tokenizer never adds is only the model's end-of-answer token, which the
target alone decides on: an instruct target (<|im_end|>) pairs with a base draft of its family
(<|endoftext|>). Working from headers means the downloader can check a candidate before
fetching the whole file.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import IncompatibleDraftError
from engine.gguf.header import GGUFInfo

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5


@dataclass(frozen=True)
class VocabInfo:
    kind: str  # tokenizer.ggml.model: "gpt2" (BPE), "llama" (SentencePiece), ...
    bos: int | None
    eos: int | None
    add_bos: bool
    add_eos: bool
    tokens: list[str]

    @classmethod
    def from_header(cls, info: GGUFInfo) -> VocabInfo:
        kind = str(info.get("tokenizer.ggml.model", "unknown"))
        return cls(
            kind=kind,
            bos=info.get("tokenizer.ggml.bos_token_id"),
            eos=info.get("tokenizer.ggml.eos_token_id"),
            # llama.cpp's defaults when the key is absent: SentencePiece adds BOS, BPE does not.
            add_bos=bool(info.get("tokenizer.ggml.add_bos_token", kind == "llama")),
            add_eos=bool(info.get("tokenizer.ggml.add_eos_token", False)),
            tokens=info.tokens,
        )


def incompatibility(target: VocabInfo, draft: VocabInfo) -> str | None:
    """Why the draft cannot serve the target, or None when it can.

    The first failed rule is named, followed by the first differing token (if any), so the user
    sees concretely how the two vocabularies differ.
    """
    if not target.tokens or not draft.tokens:
        return "one of the files has no vocabulary in its header"
    reason = _rule_broken(target, draft)
    first = _first_differing_token(target, draft)
    if reason and first and not reason.startswith("token"):
        return f"{reason}; {first}"
    return reason or first


def _rule_broken(target: VocabInfo, draft: VocabInfo) -> str | None:
    if target.kind != draft.kind:
        return f"the vocabulary types differ (target '{target.kind}', draft '{draft.kind}')"
    if (target.add_bos, target.add_eos) != (draft.add_bos, draft.add_eos):
        return "the models disagree on adding BOS/EOS tokens"
    for what, added, t, d in (
        ("BOS", target.add_bos, target.bos, draft.bos),
        ("EOS", target.add_eos, target.eos, draft.eos),
    ):
        if added and t != d:
            return f"the {what} token differs (target {t}, draft {d})"
    n_t, n_d = len(target.tokens), len(draft.tokens)
    if abs(n_t - n_d) > MAX_VOCAB_SIZE_DIFFERENCE:
        return f"the vocabulary sizes differ too much (target {n_t:,} tokens, draft {n_d:,})"
    return None


def _first_differing_token(target: VocabInfo, draft: VocabInfo) -> str | None:
    for i in range(FIRST_CHECKED_TOKEN, min(len(target.tokens), len(draft.tokens))):
        if target.tokens[i] != draft.tokens[i]:
            return f"token {i} is {target.tokens[i]!r} in the target but {draft.tokens[i]!r} in the draft"
    return None


def check_compatible(target: GGUFInfo, draft: GGUFInfo) -> None:
    """Raise IncompatibleDraftError naming the first difference."""
    reason = incompatibility(VocabInfo.from_header(target), VocabInfo.from_header(draft))
    if reason:
        raise IncompatibleDraftError(
            f"The draft '{draft.name}' cannot be used with the target '{target.name}': {reason}."
        )
