"""Every portal and teacher page, for every persona: anonymous, student A (alice), student B
(bob), the teacher. Students see only their own things; teacher pages need staff."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import ApiKey, AuditEvent, Classroom, User
from accounts.services import key_issue
from fleet.models import CatalogModel
from fleet.services import worker_register
from inference.models import RequestLog
from tests.portal.conftest import signed_in

pytestmark = pytest.mark.django_db

STUDENT_PAGES = ["/", "/keys/", "/usage/", "/connect/", "/accounts/password/"]
TEACHER_PAGES = ["/teacher/", "/teacher/import/", "/teacher/usage/", "/teacher/requests/", "/teacher/fleet/",
                 "/teacher/classes/none/"]
ADMIN_ONLY_PAGES = {"/teacher/classes/none/"}  # students in no class are the admin's


@pytest.fixture
def alice_client(student: User) -> Client:
    return signed_in(student)


@pytest.fixture
def bob_client(other_student: User) -> Client:
    return signed_in(other_student)


@pytest.fixture
def teacher_client(teacher: User) -> Client:
    return signed_in(teacher)


def log_request(user: User, key: ApiKey | None = None, **fields: object) -> RequestLog:
    values: dict[str, object] = dict(at=timezone.now(), user=user, key=key, model="smollm2-135m-instruct",
                                     client="openai", path="/v1/chat/completions", status=200, prompt_tokens=12,
                                     completion_tokens=30, ttft_ms=120, total_ms=900, tokens_per_s=89.68380054322759)
    values.update(fields)
    return RequestLog.objects.create(**values)


@pytest.mark.parametrize("path", STUDENT_PAGES + TEACHER_PAGES)
def test_anonymous_is_sent_to_sign_in(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("path", STUDENT_PAGES)
def test_student_pages_render(alice_client: Client, path: str) -> None:
    assert alice_client.get(path).status_code == 200


@pytest.mark.parametrize("path", TEACHER_PAGES)
def test_students_may_not_open_teacher_pages(alice_client: Client, bob_client: Client, path: str) -> None:
    assert alice_client.get(path).status_code == 403
    assert bob_client.get(path).status_code == 403


@pytest.mark.parametrize("path", STUDENT_PAGES + TEACHER_PAGES)
def test_teacher_pages_render(teacher_client: Client, teacher: User, path: str) -> None:
    if path in ADMIN_ONLY_PAGES:
        assert teacher_client.get(path).status_code == 404
        User.objects.filter(id=teacher.id).update(is_superuser=True)
    assert teacher_client.get(path).status_code == 200


def test_login_page_has_the_contract_fields(client: Client) -> None:
    html = client.get("/accounts/login/").content.decode()
    assert 'name="username"' in html and 'name="password"' in html and "csrfmiddlewaretoken" in html


def test_sign_in_and_out(student: User) -> None:
    client = Client(enforce_csrf_checks=True)
    page = client.get("/accounts/login/")
    token = page.cookies["csrftoken"].value
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-1",
                                                "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
    token = client.cookies["csrftoken"].value
    assert client.post("/accounts/logout/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert client.get("/").status_code == 302


def test_login_without_csrf_token_is_refused(student: User) -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-1"})
    assert response.status_code == 403


def test_portal_sign_in_is_throttled(student: User, settings) -> None:  # noqa: ANN001
    from django.core.cache import cache

    # A cache of this test's own: clear() on the Redis cache would flush a Redis others share.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "portal-sign-in-tests"}}
    cache.clear()
    settings.OCS = {**settings.OCS, "LOGIN_MAX_FAILURES": 3}
    client = Client()
    for _ in range(3):
        response = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
        assert response.status_code == 200 and "do not match" in response.content.decode()
    # Locked now, even with the right password, and the page says so.
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-1"})
    assert response.status_code == 200
    assert "Too many failed sign-ins" in response.content.decode()
    assert client.get("/").status_code == 302
    cache.clear()


def test_disabled_student_cannot_sign_in(student: User) -> None:
    student.is_active = False
    student.save(update_fields=["is_active"])
    response = Client().post("/accounts/login/", {"username": "alice", "password": "pw-alice-1"})
    assert response.status_code == 200
    assert Client().get("/").status_code == 302


def test_home_shows_base_url_keys_and_today(alice_client: Client, student: User) -> None:
    key, _raw = key_issue(user=student, name="laptop")
    log_request(student, key)
    html = alice_client.get("/").content.decode()
    assert "http://testserver/v1" in html
    assert key.display in html
    assert "42" in html  # 12 + 30 tokens today


def test_create_key_shows_it_once(alice_client: Client, student: User) -> None:
    response = alice_client.post("/keys/", {"name": "vscode"})
    assert response.status_code == 200
    html = response.content.decode()
    match = re.search(r'data-testid="new-key" id="new-key">(ocs-[a-z0-9]{10}-[A-Za-z0-9]{40})<', html)
    assert match, html
    raw = match.group(1)
    assert response["Cache-Control"] == "no-store"
    key = ApiKey.objects.get(user=student, name="vscode")
    assert raw.startswith(f"ocs-{key.prefix}-")
    # Never again: not on the list, the home page or the connect page.
    for path in ["/keys/", "/", "/connect/", "/usage/"]:
        assert raw not in alice_client.get(path).content.decode()


def test_key_name_is_required(alice_client: Client, student: User) -> None:
    response = alice_client.post("/keys/", {"name": ""})
    assert response.status_code == 400
    assert not ApiKey.objects.filter(user=student).exists()
    assert 'data-testid="new-key"' not in response.content.decode()


def test_active_key_limit(alice_client: Client, student: User) -> None:
    from accounts.services import MAX_ACTIVE_KEYS

    for n in range(MAX_ACTIVE_KEYS):
        key_issue(user=student, name=f"k{n}")
    response = alice_client.post("/keys/", {"name": "one-too-many"})
    assert response.status_code == 409
    assert "revoke one first" in response.content.decode()


def test_student_sees_only_own_keys(alice_client: Client, student: User, other_student: User) -> None:
    mine, _ = key_issue(user=student, name="alice-key")
    theirs, _ = key_issue(user=other_student, name="bob-key")
    html = alice_client.get("/keys/").content.decode()
    assert mine.display in html and theirs.display not in html and "bob-key" not in html


def test_revoke_own_key(alice_client: Client, student: User) -> None:
    key, _ = key_issue(user=student, name="laptop")
    response = alice_client.post(f"/keys/{key.id}/revoke/")
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert AuditEvent.objects.filter(action="key.revoked", subject="alice").exists()


def test_revoking_another_students_key_is_404(bob_client: Client, student: User) -> None:
    key, _ = key_issue(user=student, name="laptop")
    assert bob_client.post(f"/keys/{key.id}/revoke/").status_code == 404
    key.refresh_from_db()
    assert key.revoked_at is None


def test_revoke_needs_post(alice_client: Client, student: User) -> None:
    key, _ = key_issue(user=student, name="laptop")
    assert alice_client.get(f"/keys/{key.id}/revoke/").status_code == 405


def test_revoke_needs_csrf_token(student: User) -> None:
    key, _ = key_issue(user=student, name="laptop")
    client = Client(enforce_csrf_checks=True)
    client.force_login(student)
    assert client.post(f"/keys/{key.id}/revoke/").status_code == 403
    key.refresh_from_db()
    assert key.revoked_at is None


def test_usage_shows_own_requests_rounded(alice_client: Client, student: User, other_student: User) -> None:
    log_request(student, model="mine-model")
    log_request(other_student, model="bobs-model")
    log_request(student, at=timezone.now() - timedelta(days=2), status=429, ttft_ms=None, tokens_per_s=None)
    html = alice_client.get("/usage/").content.decode()
    assert "mine-model" in html and "bobs-model" not in html
    assert "89.7" in html and "89.68" not in html
    assert "120 ms" in html


def test_connect_fills_site_models_and_context(alice_client: Client, student: User) -> None:
    worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="smollm2-135m-instruct",
                    pool_name="production", context_length=4096, state="healthy")
    worker_register(name="w2", base_url="http://127.0.0.1:10", model_id="smollm2-135m-agents",
                    pool_name="production", context_length=32768, state="healthy")
    html = alice_client.get("/connect/").content.decode()
    assert '&quot;vendor&quot;: &quot;customendpoint&quot;' in html
    assert "http://testserver/v1/chat/completions" in html
    assert "http://testserver/v1/responses" in html
    assert "ANTHROPIC_BASE_URL=http://testserver\n" in html
    assert "COPILOT_PROVIDER_BASE_URL=http://testserver/v1" in html
    assert "http://testserver/ollama/PASTE-YOUR-KEY-HERE" in html
    assert "smollm2-135m-instruct" in html and "4,096 tokens" in html


def test_connect_hides_models_the_student_may_not_use(alice_client: Client, student: User) -> None:
    worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="allowed-model", pool_name="production",
                    state="healthy")
    worker_register(name="w2", base_url="http://127.0.0.1:10", model_id="secret-model", pool_name="production",
                    state="healthy")
    student.allowed_models = "allowed-model"
    student.save(update_fields=["allowed_models"])
    html = alice_client.get("/connect/").content.decode()
    assert "allowed-model" in html and "secret-model" not in html


def test_pages_never_show_worker_addresses_to_students(alice_client: Client) -> None:
    worker_register(name="w1", base_url="http://10.9.8.7:8080", model_id="m", pool_name="production", state="healthy")
    for path in STUDENT_PAGES:
        assert "10.9.8.7" not in alice_client.get(path).content.decode()


# --- busy pages make a bounded number of queries ---------------------------------------------


def test_busy_student_pages_make_bounded_queries(alice_client: Client, student: User,
                                                 django_assert_max_num_queries) -> None:  # noqa: ANN001
    worker_register(name="w1", base_url="http://127.0.0.1:9", model_id="m", pool_name="production", state="healthy")
    for n in range(8):
        key, _ = key_issue(user=student, name=f"k{n}")
        for _ in range(5):
            log_request(student, key)
    for path, most in [("/", 12), ("/keys/", 8), ("/usage/", 12), ("/connect/", 12)]:
        alice_client.get(path)  # warm caches (site defaults, sessions)
        with django_assert_max_num_queries(most):
            assert alice_client.get(path).status_code == 200


def test_busy_teacher_pages_make_bounded_queries(teacher_client: Client, teacher: User,
                                                 django_assert_max_num_queries) -> None:  # noqa: ANN001
    room = Classroom.objects.create(name="7B")
    room.teachers.add(teacher)
    for n in range(10):
        person = User.objects.create(username=f"s{n}", classroom=room)
        key, _ = key_issue(user=person, name="k")
        log_request(person, key, worker_name="w1")
    for n in range(3):
        worker_register(name=f"w{n}", base_url=f"http://127.0.0.1:{n + 9}", model_id="m", pool_name="production",
                        state="healthy")
    # The landing page: classes (+ their pause windows), today and yesterday, archived classes,
    # students near a limit, workers, audit: none of it grows with the classes or the students.
    for path, most in [("/teacher/", 11), (f"/teacher/classes/{room.id}/", 10), ("/teacher/usage/", 8),
                       ("/teacher/requests/", 8), ("/teacher/fleet/", 14),
                       (f"/teacher/students/{User.objects.get(username='s1').id}/", 14)]:
        teacher_client.get(path)
        with django_assert_max_num_queries(most):
            assert teacher_client.get(path).status_code == 200, path


@pytest.mark.parametrize("path", ["/static/ocs/site.css", "/static/ocs/portal.js", "/static/ocs/fleet.js",
                                  "/static/admin/css/base.css"])
def test_the_site_serves_its_own_static_files(client: Client, path: str) -> None:
    """WhiteNoise: the portal and the admin are styled with no other web server and no CDN."""
    response = client.get(path)
    assert response.status_code == 200
    assert b"".join(response.streaming_content if response.streaming else [response.content])


def test_pages_load_nothing_from_other_sites(alice_client: Client, teacher_client: Client) -> None:
    for client, paths in ((alice_client, STUDENT_PAGES), (teacher_client, TEACHER_PAGES)):
        for path in paths:
            html = client.get(path).content.decode()
            assert not re.search(r'(src|href)="(https?:)?//', html), path


def test_admin_request_log_rounds_tokens_per_second(teacher: User, student: User) -> None:
    teacher.is_superuser = True
    teacher.save(update_fields=["is_superuser"])
    log_request(student)
    html = signed_in(teacher).get("/admin/inference/requestlog/").content.decode()
    assert "89.7" in html and "89.6838" not in html


def test_admin_request_detail_rounds_rates_and_links_to_the_teacher_pages(teacher: User, student: User) -> None:
    teacher.is_superuser = True
    teacher.save(update_fields=["is_superuser"])
    row = log_request(student, prompt_tokens_per_s=1234.5678)
    html = signed_in(teacher).get(f"/admin/inference/requestlog/{row.id}/change/").content.decode()
    assert "89.7" in html and "1,235" in html and "89.6838" not in html and "1234.5678" not in html
    assert 'href="/teacher/"' in html


def test_connect_page_warns_that_a_small_model_cannot_hold_the_agents_first_request(alice_client: Client) -> None:
    worker_register(name="w-small", base_url="http://127.0.0.1:9", model_id="tiny", pool_name="production",
                    state="healthy", context_length=4096)
    html = alice_client.get("/connect/").content.decode()
    for client, snippet in [("copilot_cli", "snip-copilot"), ("claude_code", "snip-claude"), ("codex", "snip-codex")]:
        assert f'data-context-warning="{client}"' in html
        assert f'id="{snippet}"' not in html and f'data-copy-target="{snippet}"' not in html
    assert html.count("Won&#x27;t work with this model") == 3


def test_connect_without_a_served_model_still_shows_each_set_up_with_the_placeholder(alice_client: Client) -> None:
    html = alice_client.get("/connect/").content.decode()
    for snippet in ("snip-copilot", "snip-claude", "snip-codex"):
        assert f'data-copy-target="{snippet}"' in html
    assert "COPILOT_MODEL=MODEL-ID" in html and "data-context-warning" not in html


def test_connect_tells_each_agent_the_window_of_the_model_it_names(alice_client: Client) -> None:
    worker_register(name="w-agents", base_url="http://127.0.0.1:9", model_id="agents", pool_name="production",
                    state="healthy", context_length=32768)
    CatalogModel.objects.filter(public_id="agents").update(max_output_tokens=4096)
    html = alice_client.get("/connect/").content.decode()
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768" in html and "CLAUDE_CODE_MAX_OUTPUT_TOKENS=4096" in html
    assert "COPILOT_PROVIDER_MAX_PROMPT_TOKENS=28672" in html
    assert "model_context_window = 32768" in html and "model_auto_compact_token_limit = 22937" in html
    assert "&quot;maxInputTokens&quot;: 12288" in html and "chat.agentHost.byokModels.enabled" in html
    assert "at about 15,672 tokens" in html and "Not inside a trusted directory" in html
    assert "data-context-warning" not in html
