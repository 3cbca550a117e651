"""A small model of the target's family is offered as its draft: Qwen3.5 MoE with a dense Qwen3.5.

The files are llama.cpp's own random-weight fixtures (tests/synthetic_models.py) with the same
128-token vocabulary and other sizes; the draft's header names another end-of-answer token, as a
base model's does beside an instruct target (<|endoftext|> against <|im_end|>). llama.cpp compares
EOS ids only where the tokenizer adds the token, and so do the library and the engine now.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.decoding.events import DoneEvent, TokenEvent
from engine.gguf.header import read_header
from engine.gguf.pairing import VocabInfo, incompatibility
from engine.models.library import ModelLibrary
from tests import gguf_damage
from tests.synthetic_models import DRAFT_SEED, synthetic


def with_eos(src: Path, dest: Path, eos: int) -> Path:
    layout = gguf_damage.read_layout(src)
    gguf_damage.rewrite(
        src, dest, gguf_damage.with_kv(layout, "tokenizer.ggml.eos_token_id", gguf_damage.UINT32, gguf_damage.u32(eos))
    )
    return dest


@pytest.fixture
def family(tmp_path):
    """A Qwen3.5 MoE target (EOS 1) and a smaller dense Qwen3.5 draft (EOS 2) in the app's model folder."""
    models = tmp_path / "models"
    models.mkdir()
    target = with_eos(synthetic("qwen35moe", moe=True), models / "qwen35moe-instruct.gguf", 1)
    draft = with_eos(synthetic("qwen35", DRAFT_SEED), models / "qwen35-base.gguf", 2)
    return tmp_path, target, draft


def test_the_library_offers_a_smaller_model_of_the_family_as_the_draft(family):
    root, target, draft = family
    library = ModelLibrary(root / "models", root / "library.json", scan_external=False)
    entries = {e.path.name: e for e in library.scan()}
    assert entries[target.name].n_params > entries[draft.name].n_params
    assert [d.path.name for d in library.compatible_drafts(entries[target.name])] == [draft.name]
    assert library.draft_problem(target, draft) is None


def test_an_eos_the_tokenizer_adds_must_still_match(family):
    _, target, draft = family
    t, d = (VocabInfo.from_header(read_header(str(p))) for p in (target, draft))
    assert incompatibility(t, d) is None
    added = lambda v: VocabInfo(v.kind, v.bos, v.eos, v.add_bos, True, v.tokens)  # noqa: E731
    assert incompatibility(added(t), added(d)).startswith("the EOS token differs (target 1, draft 2)")


def test_the_pair_loads_and_speculates_losslessly(family):
    _, target, draft = family
    engine = Engine(ModelSpec(str(target), n_ctx=512, n_gpu_layers=0), ModelSpec(str(draft), n_ctx=512, n_gpu_layers=0))
    try:
        ask = [ChatMessage("user", "tok_4 tok_8 go on")]

        def tokens(mode):
            out, done = [], None
            for event in engine.chat(
                ask, SamplingParams(temperature=0.0, max_tokens=24), SpecParams(mode=mode, draft_length=3)
            ):
                if isinstance(event, TokenEvent):
                    out.append(event.token)
                elif isinstance(event, DoneEvent):
                    done = event
            return out, done

        plain, _ = tokens(DrafterMode.OFF)
        speculated, done = tokens(DrafterMode.DRAFT_MODEL)
        assert speculated == plain and done.stats.n_drafted > 0
    finally:
        engine.close()
