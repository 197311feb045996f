from __future__ import annotations

from core.keys import KEY_RE, generate_key, hash_key, hash_matches, parse_prefix


def test_generated_keys_are_well_formed_unique_and_hashed() -> None:
    keys = [generate_key() for _ in range(200)]
    assert all(KEY_RE.match(k.raw) for k in keys)
    assert len({k.raw for k in keys}) == 200
    assert len({k.prefix for k in keys}) == 200
    for key in keys[:5]:
        assert key.secret_hash == hash_key(key.raw)
        assert key.raw not in key.secret_hash
        assert parse_prefix(key.raw) == key.prefix


def test_parse_prefix_rejects_anything_that_is_not_a_key() -> None:
    key = generate_key().raw
    for bad in ["", "sk-abc", key[:-1], key + "x", key.upper(), key.replace("ocs-", "ocx-"), " " + key]:
        assert parse_prefix(bad) is None, bad


def test_hash_matches_only_the_same_key() -> None:
    a, b = generate_key(), generate_key()
    assert hash_matches(a.raw, a.secret_hash)
    assert not hash_matches(b.raw, a.secret_hash)


def test_rig_tokens_and_student_keys_never_pass_for_each_other() -> None:
    from core.keys import RIG_SCHEME

    rig = generate_key(RIG_SCHEME)
    student = generate_key()
    assert rig.raw.startswith("ocsrig-")
    assert parse_prefix(rig.raw, RIG_SCHEME) == rig.prefix
    assert parse_prefix(rig.raw) is None
    assert parse_prefix(student.raw, RIG_SCHEME) is None


def test_prefix_of_accepts_the_prefix_the_display_form_or_a_whole_key() -> None:
    from core.keys import prefix_of

    new = generate_key()
    assert {prefix_of(new.prefix), prefix_of(f"ocs-{new.prefix}-…"), prefix_of(new.raw)} == {new.prefix}
