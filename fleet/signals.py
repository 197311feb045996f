"""What fleet announces to the apps above it.

fleet sits below accounts (docs/architecture.md: a key routes to a pool, so accounts points at
fleet, never back). A teacher's action on a worker is audited by accounts, which listens here
(accounts/apps.py) instead of fleet importing the audit log.
"""
from __future__ import annotations

from django.dispatch import Signal

# Sent after a teacher or operator changed a worker: actor (a user or None), action
# ("worker.moved", "worker.drained", ...), subject (the worker's name), detail.
teacher_action = Signal()
