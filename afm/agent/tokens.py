"""A thin adapter over a Hugging Face tokenizer: the few operations the engine needs, with fixed conventions
(no special tokens added on encode, special tokens kept on decode, chat template to ids)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

# ChatML's (Qwen) and Gemma's end of turn
END_OF_TURN_TOKENS = ("<|im_end|>", "<end_of_turn>")
# where evaluation/serve_model.sh records the tokenizer of the model it serves: the checkout's runs/serve, as
# afm_served_record in evaluation/tokenizer.sh writes it (a wheel install has no such folder, so no record)
SERVE_RECORDS = Path(__file__).resolve().parents[2] / "runs" / "serve"


def served_record(model: str, root: Path = SERVE_RECORDS) -> Path:
    """The file evaluation/serve_model.sh writes for the served model name ``model``."""
    return root / f"{model.replace('/', '_')}.model_path"


def recorded_tokenizer(model: str, root: Path = SERVE_RECORDS) -> str | None:
    """The tokenizer folder (or hub id) evaluation/serve_model.sh recorded for ``model``, or None."""
    try:
        first = served_record(model, root).read_text(encoding="utf-8").partition("\n")[0].strip()
    except OSError:  # no record (or unreadable): the caller falls back, as the scripts do
        return None
    return first or None


class TokenizerAdapter:
    """Wraps a ``transformers`` tokenizer (or anything with the same methods)."""

    def __init__(self, tokenizer: Any, extra_eos_ids: Sequence[int] = ()) -> None:
        self.tok = tokenizer
        eos = {tokenizer.eos_token_id} if getattr(tokenizer, "eos_token_id", None) is not None else set()
        # A chat format's end of turn ends a generation for every model that uses it, whatever eos_token says.
        if hasattr(tokenizer, "convert_tokens_to_ids"):
            for token in END_OF_TURN_TOKENS:
                tid = tokenizer.convert_tokens_to_ids(token)
                if isinstance(tid, int) and tid != getattr(tokenizer, "unk_token_id", None):
                    eos.add(tid)
        self.eos_ids: frozenset[int] = frozenset(eos | set(extra_eos_ids))
        self.pad_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)

    @classmethod
    def from_pretrained(cls, path: str, **kw: Any) -> TokenizerAdapter:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(path, **kw))

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def chat_prompt_ids(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        """Prompt ids from the model's own chat template (ending with the opened assistant turn)."""
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        return self.encode(text)

    def chat_prompt_text(self, messages: list[dict[str, str]]) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
