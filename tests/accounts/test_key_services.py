from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.utils import timezone

from accounts.key_cache import key_authenticate
from accounts.models import ApiKey
from accounts.services import key_issue, key_revoke, user_set_active

pytestmark = pytest.mark.django_db(transaction=True)

authenticate = async_to_sync(key_authenticate)


def _all_text_in_database() -> str:
    """Every value of every row of every table, as text."""
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)


def test_issued_key_authenticates_and_the_database_holds_no_raw_key(student) -> None:  # noqa: ANN001
    key, raw = key_issue(user=student, name="laptop")
    identity = authenticate(raw)
    assert identity is not None
    assert (identity.user_id, identity.key_id, identity.pool_name) == (student.id, key.id, "production")
    text = _all_text_in_database()
    assert raw not in text
    assert raw.rsplit("-", 1)[1] not in text  # nor the secret part alone
    assert key.prefix in text


def test_unknown_malformed_and_tampered_keys_are_refused(student) -> None:  # noqa: ANN001
    _key, raw = key_issue(user=student)
    tampered = raw[:-1] + ("A" if raw[-1] != "A" else "B")
    for bad in [tampered, "ocs-aaaaaaaaaa-" + "x" * 40, "sk-whatever", ""]:
        assert authenticate(bad) is None


def test_revoked_key_is_refused_immediately_even_after_being_cached(student) -> None:  # noqa: ANN001
    key, raw = key_issue(user=student)
    assert authenticate(raw) is not None  # now cached
    key_revoke(key=key)
    assert authenticate(raw) is None
    assert ApiKey.objects.get(id=key.id).revoked_at is not None


def test_expired_key_and_disabled_student_are_refused(student, other_student) -> None:  # noqa: ANN001
    _expired, raw_expired = key_issue(user=student, expires_at=timezone.now() - timedelta(seconds=1))
    assert authenticate(raw_expired) is None
    _future, raw_future = key_issue(user=student, expires_at=timezone.now() + timedelta(days=1))
    assert authenticate(raw_future) is not None
    _bob_key, raw_bob = key_issue(user=other_student)
    assert authenticate(raw_bob) is not None  # cached
    user_set_active(user=other_student, active=False)
    assert authenticate(raw_bob) is None


def test_25_concurrent_key_creations_leave_exactly_the_limit_active(student) -> None:  # noqa: ANN001
    """The count and the insert are one step: 25 creates at once (a script, double clicks) never
    leave more than MAX_ACTIVE_KEYS keys, on SQLite as on PostgreSQL."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from django.db import connections

    from accounts.services import MAX_ACTIVE_KEYS, TooManyKeys

    start = Barrier(25)

    def create(n: int) -> str:
        start.wait()
        try:
            key_issue(user=student, name=f"script {n}")
            return "created"
        except TooManyKeys:
            return "refused"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=25) as pool:
        outcomes = list(pool.map(create, range(25)))
    assert outcomes.count("created") == MAX_ACTIVE_KEYS
    assert outcomes.count("refused") == 25 - MAX_ACTIVE_KEYS
    assert ApiKey.objects.filter(user=student, revoked_at__isnull=True).count() == MAX_ACTIVE_KEYS


def test_an_operator_may_pass_the_key_limit_but_a_student_may_not(student) -> None:  # noqa: ANN001
    from accounts.services import MAX_ACTIVE_KEYS, TooManyKeys

    for n in range(MAX_ACTIVE_KEYS):
        key_issue(user=student, name=f"k{n}")
    with pytest.raises(TooManyKeys):
        key_issue(user=student, name="one more")
    key_issue(user=student, name="operator's", enforce_limit=False)
    key_revoke(key=ApiKey.objects.filter(user=student).first())
    assert ApiKey.objects.filter(user=student, revoked_at__isnull=True).count() == MAX_ACTIVE_KEYS
