"""engine.remote's pure parts: the figures of each server's documented shape, /models bodies, the
request body, and what a failure says. No network, no model (the streamed shapes are in
test_remote_scripted.py, the real servers in test_remote_servers.py)."""

from __future__ import annotations

import pytest

from engine.config import ChatMessage, SamplingParams
from engine.errors import user_message
from engine.remote import (
    ApiKeyRefusedError,
    FigureSource,
    RemoteModel,
    RequestRefusedError,
    ServerFailedError,
    StreamCutError,
    chat_body,
    read_figures,
)
from engine.remote import errors as remote_errors
from engine.remote.faults import rate_limited, retry_after_s, server_message, status_error
from engine.remote.figures import NO_SERVER_FIGURES
from engine.remote.models import parse_model_list

WHERE = "http://192.168.1.20:8000"

# SGLang: the speculation fields its tokenizer manager puts in meta_info (a choice's, on the OpenAI
# API with return_meta_info, non-streamed only), and its decode_throughput, as the code writes them.
# https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/managers/tokenizer_manager.py
SGLANG_DOCUMENTED_META_INFO = {
    "prompt_tokens": 41,
    "completion_tokens": 200,
    "spec_accept_rate": 0.585,
    "spec_accept_length": 2.74,
    "spec_accept_token_num": 127,
    "spec_draft_token_num": 219,
    "spec_verify_ct": 73,
    "spec_accept_histogram": [10, 20, 43],
    "decode_throughput": 182.5,
    "output_token_logprobs": [[-0.1, 5, "x"]],
}

# vLLM's per-request timing metrics alone (--enable-per-request-metrics, no spec-decode flag): the
# example of docs/features/per_request_metrics.md. https://docs.vllm.ai/en/latest/features/per_request_metrics/
VLLM_DOCUMENTED_TIMING_METRICS = {
    "time_to_first_token_ms": 85.2,
    "generation_time_ms": 1240.5,
    "queue_time_ms": 12.3,
    "mean_itl_ms": 9.1,
    "tokens_per_second": 103.2,
}

# llama-server's GET /v1/models example, tools/server/README.md ("OpenAI-compatible Model Info API").
# https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md
LLAMA_SERVER_DOCUMENTED_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "../models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            "object": "model",
            "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
            "created": 1735142223,
            "owned_by": "llamacpp",
            "meta": {
                "vocab_type": 2,
                "n_vocab": 128256,
                "n_ctx_train": 131072,
                "n_embd": 4096,
                "n_params": 8030261312,
                "size": 4912898304,
            },
        }
    ],
}

# vLLM's ModelCard (vllm/entrypoints/openai/protocol.py): max_model_len is the context it serves.
VLLM_DOCUMENTED_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "meta-llama/Llama-3.1-8B-Instruct",
            "object": "model",
            "created": 1735142223,
            "owned_by": "vllm",
            "root": "meta-llama/Llama-3.1-8B-Instruct",
            "parent": None,
            "max_model_len": 32768,
            "permission": [],
        }
    ],
}


# -- figures --------------------------------------------------------------------------------------


def test_sglang_meta_info_gives_its_counts_and_rate():
    figures = read_figures({"meta_info": SGLANG_DOCUMENTED_META_INFO}, 0.2, 50.0)
    assert figures.source == FigureSource.SGLANG and figures.note == ""
    assert (figures.n_drafted, figures.n_accepted) == (219, 127)
    assert figures.acceptance_rate == pytest.approx(127 / 219)
    assert figures.server_tps == 182.5 and (figures.client_ttft_s, figures.client_tps) == (0.2, 50.0)
    assert figures.raw == {"meta_info": SGLANG_DOCUMENTED_META_INFO}


def test_vllm_without_its_spec_decode_flag_gives_its_rate_and_says_why_no_speculation():
    figures = read_figures({"metrics": VLLM_DOCUMENTED_TIMING_METRICS}, 0.1, 90.0)
    assert figures.source == FigureSource.VLLM and figures.server_tps == 103.2
    assert figures.n_drafted is None and figures.acceptance_rate is None
    assert "--per-request-spec-decode-metrics" in figures.note


def test_specula_is_recognised_before_the_llama_server_timings_it_also_sends():
    extras = {
        "timings": {"predicted_per_second": 41.0, "draft_n": 7, "draft_n_accepted": 7},
        "speculation": {"mode": "draft", "drafted": 8, "accepted": 6, "acceptance": 0.75},
    }
    figures = read_figures(extras, None, None)
    assert figures.source == FigureSource.SPECULA
    assert (figures.n_drafted, figures.n_accepted, figures.acceptance_rate, figures.server_tps) == (8, 6, 0.75, 41.0)


def test_llama_server_timings_without_draft_counts_mean_it_drafted_nothing():
    figures = read_figures({"timings": {"predicted_per_second": 52.9, "predicted_n": 35}}, 0.3, 40.0)
    assert figures.source == FigureSource.LLAMA_SERVER and figures.server_tps == 52.9
    assert figures.n_drafted is None and "drafted nothing" in figures.note


def test_a_server_with_no_figures_is_labelled_client():
    figures = read_figures({"system_fingerprint_extra": 1}, 0.4, 12.5)
    assert figures.source == FigureSource.CLIENT and figures.note == NO_SERVER_FIGURES
    assert (figures.client_ttft_s, figures.client_tps, figures.n_drafted, figures.server_tps) == (0.4, 12.5, None, None)


@pytest.mark.parametrize(
    ("speculation", "expected"),
    [
        ({"drafted": 0, "accepted": 0, "acceptance": 0.0}, (0, 0, None)),  # nothing drafted: no rate
        ({"drafted": "7", "accepted": 3}, (None, None, None)),  # not a number: unknown, not guessed
        ({"drafted": 4, "accepted": 9}, (4, 9, 1.0)),  # a count out of range cannot pass 100 %
        ({"drafted": 10, "acceptance": 0.4}, (10, None, 0.4)),  # no count: the server's own rate
        ({"drafted": True, "accepted": 1}, (None, None, None)),  # JSON true is not a count
    ],
)
def test_odd_figures_are_left_unknown_rather_than_wrong(speculation, expected):
    figures = read_figures({"speculation": speculation}, None, None)
    assert (figures.n_drafted, figures.n_accepted, figures.acceptance_rate) == expected


# -- models ---------------------------------------------------------------------------------------


def test_models_have_their_context_size_wherever_the_server_puts_it():
    assert parse_model_list(LLAMA_SERVER_DOCUMENTED_MODELS) == [
        RemoteModel("../models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", 131072, "llamacpp")
    ]
    assert parse_model_list(VLLM_DOCUMENTED_MODELS) == [RemoteModel("meta-llama/Llama-3.1-8B-Instruct", 32768, "vllm")]
    served_and_trained = {"data": [{"id": "s", "owned_by": "specula", "meta": {"n_ctx": 4096, "n_ctx_train": 8192}}]}
    assert parse_model_list(served_and_trained) == [RemoteModel("s", 4096, "specula")]


def test_a_model_list_with_odd_entries_keeps_what_it_can():
    body = {"data": [{"id": "loading", "meta": None}, {"id": 5}, "x", {"id": "big", "max_model_len": True}]}
    assert parse_model_list(body) == [RemoteModel("loading"), RemoteModel("big")]
    assert parse_model_list({"models": []}) is None and parse_model_list([1]) is None


# -- the request ----------------------------------------------------------------------------------


def test_the_request_carries_the_sampling_and_only_role_and_content():
    sampling = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, seed=7, max_tokens=64, stop=("\n\n",))
    messages = [ChatMessage("user", "Hi"), ChatMessage("assistant", "Hello", reasoning="(thinking)")]
    body = chat_body("m", messages, sampling, {"chat_template_kwargs": {"enable_thinking": False}})
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 64,
        "top_k": 0,
        "min_p": 0.0,
        "seed": 7,
        "stop": ["\n\n"],
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert "temperature" not in chat_body("m", messages)  # no sampling: the server's defaults


# -- what a failure says --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"error": {"message": "model not found", "type": "invalid_request_error"}}', "model not found"),
        (b'{"error": "Unauthorized"}', "Unauthorized"),
        (b'{"detail": [{"loc": ["body", "messages"], "msg": "field required"}]}', "field required"),
        (b'{"message": "overloaded"}', "overloaded"),
        (b"upstream connect error\n", "upstream connect error"),
        (b"<html><body>502 Bad Gateway</body></html>", ""),
        (b"", ""),
    ],
)
def test_a_servers_error_message_is_found_in_its_body(body, said):
    assert said in server_message(body) and (said or server_message(body) == "")


def test_a_long_server_message_is_cut_to_one_line():
    message = server_message(b"line one\nline two " + b"x" * 1000)
    assert message.startswith("line one line two") and message.endswith("…") and len(message) == 300


def test_retry_after_is_read_as_seconds_or_a_date():
    assert retry_after_s("5") == 5.0 and retry_after_s(" 0 ") == 0.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: at once
    assert retry_after_s("soon") is None and retry_after_s(None) is None


def test_each_status_becomes_a_kind_that_says_what_to_do():
    refused = status_error(401, "bad key", WHERE, has_key=True)
    assert isinstance(refused, ApiKeyRefusedError)
    assert user_message(refused) == f"{WHERE} refused the API key (HTTP 401): bad key\n{ApiKeyRefusedError.hint}"
    assert isinstance(status_error(422, "", WHERE, has_key=False), RequestRefusedError)
    assert isinstance(status_error(503, "", WHERE, has_key=False), ServerFailedError)
    busy = rate_limited(WHERE, 0, 120.0, 60.0, "")
    assert str(busy) == f"{WHERE} is busy and asks to wait 120 s before another request (HTTP 429)."


def test_every_remote_kind_has_a_hint_and_keeps_the_text_so_far():
    kinds = [
        value
        for value in vars(remote_errors).values()
        if isinstance(value, type)
        and issubclass(value, remote_errors.RemoteError)
        and value is not remote_errors.RemoteError
    ]
    assert len(kinds) == 10 and all(kind.hint for kind in kinds)
    cut = StreamCutError(f"The answer from {WHERE} was cut off.", partial_text="Half an", partial_reasoning="Hm")
    assert (cut.partial_text, cut.partial_reasoning) == ("Half an", "Hm")
    assert user_message(cut) == f"The answer from {WHERE} was cut off.\n{StreamCutError.hint}"
