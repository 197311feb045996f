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
