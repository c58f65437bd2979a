"""What one benchmark request asks for: the record every workload produces.

Every workload (see `servelab.workload.datasets`) yields `RequestSpec`s; the HTTP client
sends them and the simulator serves them. Token counts were made by the tokenizer named in
the workload's `TokenizerInfo`, so a result can say which tokenizer counted its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One turn of a chat request (`role` is "system", "user" or "assistant")."""

    role: str
    content: str


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of a workload.

    Exactly one of `prompt` (completions API) and `messages` (chat API) is set; a chat
    request sent to a completions backend is flattened by the client, and the reverse.
    `prompt_len` is the prompt's token count, `output_len` the number of tokens to ask
    for (`max_tokens`; exact when the server honours `ignore_eos`). `images` are image
    data URLs (`data:image/png;base64,...`) sent after the text in the user turn; only
    chat backends can carry them, and `prompt_len` counts the text alone.
    """

    index: int
    prompt: str | None
    messages: tuple[ChatMessage, ...] | None
    prompt_len: int
    output_len: int
    images: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a RequestSpec has exactly one of prompt and messages")
        if self.prompt_len < 0 or self.output_len < 1:
            raise ValueError(
                f"request {self.index}: prompt_len must be >= 0 and output_len >= 1 "
                f"(got {self.prompt_len}, {self.output_len})"
            )

    @property
    def text(self) -> str:
        """The prompt as one string (chat turns joined by newlines)."""
        if self.prompt is not None:
            return self.prompt
        assert self.messages is not None
        return "\n".join(m.content for m in self.messages)
