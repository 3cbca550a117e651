"""engine.errors.user_message: the one way any exception becomes text for a person (no model, no Qt)."""

import errno

from engine.errors import ContextFullError, EngineError, ModelFileError, user_message


def test_an_engine_error_says_what_happened_and_what_to_do():
    assert user_message(ModelFileError("model.gguf is not a GGUF file.")) == (
        "model.gguf is not a GGUF file.\nChoose another GGUF file, or download the model again."
    )
    assert user_message(ContextFullError("The prompt is too long.", hint="Shorten it.")) == (
        "The prompt is too long.\nShorten it."
    )
    assert user_message(EngineError("No hint here.")) == "No hint here."


def test_out_of_memory_says_what_helps():
    assert user_message(MemoryError()) == "Out of memory.\nTry a smaller model, a smaller context, or fewer GPU layers."


def test_an_os_error_gives_its_reason_and_its_file():
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "/models/a.gguf")
    assert user_message(missing) == "No such file or directory: /models/a.gguf"
    assert user_message(PermissionError(errno.EACCES, "Permission denied")) == "Permission denied"


def test_anything_else_is_named_as_unexpected_with_its_type():
    assert user_message(RuntimeError("llama_decode returned -1")) == (
        "Unexpected error: RuntimeError: llama_decode returned -1"
    )
    assert user_message(OSError("no errno")) == "Unexpected error: OSError: no errno"
    assert user_message(KeyError("x")) == "Unexpected error: KeyError: 'x'"
