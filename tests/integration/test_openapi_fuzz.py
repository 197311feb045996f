"""schemathesis drives the live gateway from its own /v1/openapi.json, read with the key it uses
(so the document names that key's models): valid and invalid bodies (mode all); whatever it
sends, the gateway answers without a 5xx."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import MODEL_ID

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass


def test_the_document_describes_every_public_route(gateway) -> None:  # noqa: ANN001
    document = httpx.get(gateway.url + "/v1/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    assert {"/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
            "/v1/messages/count_tokens"} <= set(document["paths"])


@pytest.mark.timeout(900)
def test_schemathesis_finds_no_server_error(gateway, worker, student_key, tmp_path: Path) -> None:  # noqa: ANN001
    from fleet.models import CatalogModel

    # Fuzzed bodies ask for up to a million tokens: the model's output cap keeps each answer short.
    CatalogModel.objects.filter(public_id=MODEL_ID).update(max_output_tokens=8)
    runner = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert runner, "schemathesis is a test dependency (requirements-dev.txt)"
    # Read with the key, the document's `model` fields name the models that key may use, so
    # generated requests reach the worker (random names would all be 404s, tested elsewhere).
    document = httpx.get(gateway.url + "/v1/openapi.json", headers={"Authorization": f"Bearer {student_key[1]}"}).json()
    request = document["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert MODEL_ID in request["properties"]["model"]["enum"]
    schema_file = tmp_path / "openapi.json"
    schema_file.write_text(json.dumps(document))
    result = subprocess.run(
        [runner, "run", str(schema_file),
         "--url", gateway.url,
         "-H", f"Authorization: Bearer {student_key[1]}",
         "-H", f"x-api-key: {student_key[1]}",
         "--checks", "not_a_server_error",
         "--max-examples", "40",
         "--phases", "examples,fuzzing",
         "--request-timeout", "120",
         "--generation-deterministic",
         "--no-color"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    report = result.stdout[-6000:] + result.stderr[-2000:]
    assert result.returncode == 0, report
    assert "Missing test data" not in report, report  # the requests reached the worker
