"""Token-level chat formatting for multi-turn rollouts.

Trajectories are token-in / token-out: the ids the engine sampled are kept as
they are, and each new observation is appended as the token ids of exactly
the text the chat template would put between the assistant's end and the next
generation prompt. That text is derived once from the tokenizer's own chat
template (any prefix-stable template: ChatML/Qwen, Llama 3, ...), so the model
sees during RL what it would see from `apply_chat_template` at inference.
"""

from __future__ import annotations

from dataclasses import dataclass

_SYS, _USER, _ASSISTANT, _OBS = "\x00SYS\x00", "\x00USER\x00", "\x00ASSISTANT\x00", "\x00OBS\x00"


def _render(tokenizer, messages, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class ChatFormat:
    """The template's pieces around messages, as text.

    after_assistant: what follows an assistant message's content (e.g. "<|im_end|>\\n").
    user_before / user_after: what wraps a user message plus the next
                              generation prompt (e.g. "<|im_start|>user\\n", "<|im_end|>\\n<|im_start|>assistant\\n").
    """

    after_assistant: str
    user_before: str
    user_after: str
    eos_text: str

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "ChatFormat":
        base = [{"role": "system", "content": _SYS}, {"role": "user", "content": _USER}]
        with_assistant = base + [{"role": "assistant", "content": _ASSISTANT}]
        closed = _render(tokenizer, with_assistant, add_generation_prompt=False)
        after_assistant = closed[closed.index(_ASSISTANT) + len(_ASSISTANT) :]
        full = _render(tokenizer, with_assistant + [{"role": "user", "content": _OBS}], add_generation_prompt=True)
        if not full.startswith(closed):
            raise ValueError("the tokenizer's chat template is not prefix-stable; multi-turn token rollouts need one")
        tail = full[len(closed) :]
        user_before, user_after = tail.split(_OBS)
        eos_text = tokenizer.eos_token or ""
        return cls(after_assistant, user_before, user_after, eos_text)

    def prompt_ids(self, tokenizer, instruction: str, observation: str) -> list[int]:
        messages = [{"role": "system", "content": instruction}, {"role": "user", "content": observation}]
        return _encode(tokenizer, _render(tokenizer, messages, add_generation_prompt=True))

    def response_ids(self, tokenizer, response: str) -> list[int]:
        """Ids of an assistant response given as text (a replayed turn), before its closing."""
        return _encode(tokenizer, response)

    def observation_ids(self, tokenizer, observation: str, response_closed: bool) -> list[int]:
        """Ids to append after a response: close the assistant turn, add the user turn, reopen generation.

        `response_closed` is True when the sampled ids already end with the eos token
        (which the template's `after_assistant` text starts with).
        """
        close = self.after_assistant
        if response_closed and self.eos_text and close.startswith(self.eos_text):
            close = close[len(self.eos_text) :]
        return _encode(tokenizer, close + self.user_before + observation + self.user_after)
