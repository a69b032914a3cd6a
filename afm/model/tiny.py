"""Build a tiny Qwen2-architecture causal LM and a byte-level BPE tokenizer locally (nothing is downloaded).

The tokenizer is trained with Qwen2's own pre-tokenizer (NFC + Qwen2 split regex + byte-level without regex) and
ChatML special tokens, so it behaves like the real Qwen2.5 tokenizer in the ways that matter for masking: tags are
split into ordinary BPE pieces, ``>`` absorbs following newlines, digits are single tokens. Transformers'
AutoTokenizer keeps it unchanged when it reloads the folder.

Product code, not an offline stand-in: ``--local`` RL builds its toy policy with it (:mod:`afm.rl.local.toy`); the
quickstart's student, the tests and the benchmarks use it too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

# Qwen2's pre-tokenizer split (digits one by one); afm.offline.qwen_tokenizer builds the real vocabulary with it
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ChatML, as Qwen2.5 renders it (default system prompt when none is given).
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class ModelSize:
    """The shape of a tiny Qwen2 (no defaults: a caller names one, :data:`TINY` or the quickstart profile's
    ``student_size()``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int


# The model of the tests, the benchmarks and --local's toy policy: built and trained in seconds on a CPU.
TINY = ModelSize(vocab_size=2048, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2)
# TINY's shape with heads of 32 dimensions (2 query heads sharing 1 key/value head: the same weights' sizes):
# vLLM's CPU attention takes head sizes from 32 up, and TINY's are 16. The vLLM tests serve it, and --local's toy
# policy uses it with ROLLOUT_ENGINE=vllm.
TINY_VLLM = ModelSize(vocab_size=2048, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2,
                      num_kv_heads=1)


def train_tokenizer(texts: Iterable[str], out_dir: str | Path, vocab_size: int):
    """Train a Qwen2-style byte-level BPE on ``texts`` and save it as a transformers tokenizer in ``out_dir``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_input_names=["input_ids", "attention_mask"],
    )
    hf.chat_template = CHAT_TEMPLATE
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(out)
    # transformers 4.x cannot load the "TokenizersBackend" class name that 5.x writes.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "Qwen2TokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return hf


def build_tiny_model(
    out_dir: str | Path,
    texts: Iterable[str],
    size: ModelSize = TINY,
    *,
    rope_theta: float = 1_000_000.0,
    seed: int = 0,
) -> Path:
    """Write a random-init Qwen2ForCausalLM of shape ``size`` and its tokenizer to ``out_dir``; return the path.

    ``rope_theta`` is Qwen2.5's 1e6, not transformers' default 1e4: with the slower rotation more of each head's
    dimensions match content at any distance, and the demo student learned to copy a number from hundreds of tokens
    back on a run where it had not at 1e4 (benchmarks/RESULTS.md, 2026-11-26 afternoon)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    train_tokenizer(texts, out, vocab_size=size.vocab_size)
    tokenizer = AutoTokenizer.from_pretrained(out)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        num_key_value_heads=size.num_kv_heads,
        max_position_embeddings=4096,
        rope_theta=rope_theta,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out)
    logger.info("tiny Qwen2 model (%d params) written to %s", sum(p.numel() for p in model.parameters()), out)
    return out
