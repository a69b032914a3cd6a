"""`afm doctor`'s report on the packages the training scripts choose by (DeepSpeed, flash-attn, SwanLab, apex)."""

from __future__ import annotations

import importlib.metadata as md

from afm.doctor import main, training_package_checks


def _installed(dist: str) -> bool:
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        return False
    return True


def test_missing_deepspeed_is_flagged_when_zero3_is_the_default():
    checks = {c.name: c for c in training_package_checks(gpus=8)}
    if _installed("llamafactory"):
        ds = checks["deepspeed"]
        assert ds.ok  # a warning, not a failure: install.sh runs the doctor on CPU machines too
        if not _installed("deepspeed"):
            assert ds.note and "ZeRO-3" in ds.detail and ".[deepspeed]" in ds.detail


def test_flash_attn_choice_is_reported():
    fa_installed = _installed("flash-attn") or _installed("flash_attn")
    on_gpu = {c.name: c for c in training_package_checks(gpus=8)}["flash-attn"]
    on_cpu = {c.name: c for c in training_package_checks(gpus=0)}["flash-attn"]
    if fa_installed:
        assert "FlashAttention-2" in on_gpu.detail and "sdpa" in on_cpu.detail
    else:
        assert on_gpu.note and "sdpa" in on_gpu.detail and "pip install flash-attn" in on_gpu.detail
        assert not on_cpu.note and "sdpa" in on_cpu.detail


def test_swanlab_is_reported(capsys):
    checks = {c.name: c for c in training_package_checks(gpus=0)}
    assert ("extra: swanlab" in checks["swanlab"].detail) != _installed("swanlab")
    assert main([]) in (0, 1)
    out = capsys.readouterr().out
    assert "flash-attn" in out and "swanlab" in out
