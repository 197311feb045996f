"""The portal tests' shared people and a signed-in client."""
from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import User
from accounts.services import user_ensure


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def second_teacher(django_user_model) -> User:  # noqa: ANN001
    """A teacher of none of `teacher`'s classes."""
    return user_ensure(username="turing", role="teacher", password="pw-turing-1")[0]
