"""Until ``ShardLoader`` calls :func:`shardkit.loader.state.resume_state` (issue 22): the old names of the
mixture half of the state, now owned by :mod:`shardkit.loader.state`. Delete with the adapters there."""

from __future__ import annotations

from shardkit.loader.state import classes_digest
from shardkit.loader.state import legacy_mixture_keys as mixture_state
from shardkit.loader.state import legacy_resume as resume_mixture

__all__ = ["classes_digest", "mixture_state", "resume_mixture"]
