"""The fair-sharing rule, where the API's readers look for it. It lives in core/fair_share.py,
beside the Redis script that applies it for every gateway process (core/live.py uses both)."""
from __future__ import annotations

from core.fair_share import (  # noqa: F401
    DEFAULT_POLICY, OUTPUT_TOKEN_COST, POLICIES, PROMPT_TOKEN_COST, Waiting, charge, check_policy, lifted, pick,
)
