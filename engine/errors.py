"""The engine's own error types, and user_message(): the one way any exception becomes text for a person.

Everything the engine raises on purpose derives from EngineError, so callers (the app, the CLI,
the local server) can show a readable message. llama-cpp-python signals failures with RuntimeError and
ValueError; those are converted here rather than leaked, because Qt helpers such as superqt
treat a RuntimeError as "worker deleted" and go quiet.
"""


class EngineError(Exception):
    """A failure the user can act on; str(error) is the message to show."""

    hint: str = ""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        if hint:
            self.hint = hint

    def user_message(self) -> str:
        return f"{self}\n{self.hint}" if self.hint else str(self)


class ModelFileError(EngineError):
    """The file is missing, is not GGUF, or is damaged."""

    hint = "Choose another GGUF file, or download the model again."


class ModelLoadError(EngineError):
    """llama.cpp could not load a file that looked valid (unsupported architecture, out of memory)."""

    hint = "Try fewer GPU layers, a smaller context, or a smaller quantization."
    out_of_memory = False  # set when llama.cpp could not allocate: retrying with fewer GPU layers may work


class IncompatibleDraftError(EngineError):
    """The draft model cannot propose tokens for this target (different vocabulary)."""

    hint = "Pick a draft from the same model family as the target, or use prompt lookup instead."


class ContextFullError(EngineError):
    """The prompt alone does not fit in the context window."""

    # Says no more than the engine knows: each front end adds where the context size is set.
    hint = "Start a new conversation, shorten the message, or use a larger context."


class DecodeError(EngineError):
    """llama_decode failed mid-answer."""

    hint = "The answer so far is kept. Try again; if it repeats, reload the model with a smaller context."


class OperationCancelled(EngineError):
    """A load or a starter assembly was stopped on request (the app closing, a newer request).

    Not a failure: callers report it as cancelled, and nothing half-done is left behind.
    """


def user_message(error: BaseException) -> str:
    """What a person is told about any failure: the app's notices, the terminal, a server client's error.

    The engine's own errors say what happened and what to do; out of memory says what helps; an
    operating-system error gives its reason (and the file); anything else is named as unexpected,
    with its type, since it is a bug rather than something the user can act on.
    """
    if isinstance(error, EngineError):
        return error.user_message()
    if isinstance(error, MemoryError):
        return "Out of memory.\nTry a smaller model, a smaller context, or fewer GPU layers."
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return f"Unexpected error: {type(error).__name__}: {error}"
