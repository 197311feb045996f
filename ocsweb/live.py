"""The live state this site runs: core's mechanism (core/live.py) with the worker slot's rules
(inference/admission/live.py) and the quota's (accounts/limits/live_quota.py), on each back end.
settings.OCS_LIVE_STATE names these two classes; core.live.live_state() builds one of them."""
from __future__ import annotations

from accounts.limits.live_quota import InProcessQuota, RedisQuota
from inference.admission.live import InProcessAdmission, RedisAdmission


class SiteInProcessLiveState(InProcessQuota, InProcessAdmission):
    """The embedded default: one gateway process, plain dicts."""


class SiteRedisLiveState(RedisQuota, RedisAdmission):
    """Several gateway processes on one Redis."""
