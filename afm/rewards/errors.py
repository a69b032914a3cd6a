"""The one exception a scorer may let out of :func:`afm.rewards.compute_score`.

A policy's text is never infrastructure: whatever a scorer raises while reading it is a wrong answer with the
error named (``method`` ``grader_error``), not a crashed training step. What *is* the caller's or the data's fault
-- a malformed ground truth, an unknown option value, a registry mistake -- raises :class:`RewardConfigError`, which
:func:`~afm.rewards.compute_score` lets through so that the run stops with a message naming the data source.
It subclasses ValueError, so code that caught ValueError for bad input still does.

Besides it, compute_score lets through only :class:`afm.rewards.score.InfrastructureError` (too many
infrastructure failures in a row) and ImportError (a scorer's dependency is missing); a plain ValueError from a
scorer counts as a grader error, so raise this class for anything the caller or the data must fix.
"""

from __future__ import annotations


class RewardConfigError(ValueError):
    """Bad ground truth, options or registration: the caller's or the data's fault, never the policy's."""
