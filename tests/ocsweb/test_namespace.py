"""Two installations sharing one Redis under different OCS_LIVE_NAMESPACE values cross nowhere:
live state, the cache (sign-in counters, probe results), the channel layer (the fleet page's live
pushes) and the task queue are all under it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def redis_settings(namespace: str, var_dir: Path) -> dict[str, object]:
    env = {**os.environ, "REDIS_URL": "redis://127.0.0.1:6379/0", "OCS_LIVE_NAMESPACE": namespace,
           "OCS_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "ocsweb.settings", "OCS_ENV": "test"}
    read = subprocess.run(
        [sys.executable, "-c", "import json, ocsweb.settings as s; print(json.dumps({'live': s.OCS_LIVE_NAMESPACE, "
                               "'cache': s.CACHES['default'].get('KEY_PREFIX'), 'queue': s.Q_CLUSTER['name'], "
                               "'channels': s.CHANNEL_LAYERS['default']['CONFIG']['prefix']}))"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=60)
    return dict(json.loads(read.stdout))


def test_each_installation_keeps_its_cache_and_task_queue_under_its_namespace(tmp_path: Path) -> None:
    school = redis_settings("ocs-school", tmp_path)
    lab = redis_settings("ocs-lab", tmp_path)
    assert school == {"live": "ocs-school", "cache": "ocs-school", "queue": "ocs-school", "channels": "ocs-school-asgi"}
    assert lab == {"live": "ocs-lab", "cache": "ocs-lab", "queue": "ocs-lab", "channels": "ocs-lab-asgi"}
