"""`scope.fresh_id`: run ids drawn from pooled OS randomness, as `uuid4().hex` gives."""

from __future__ import annotations

import os
import uuid

import pytest

from fusee_runtime.scope import fresh_id


def test_fresh_ids_are_version_4_uuids_in_hex_and_all_differ() -> None:
    ids = [fresh_id() for _ in range(5000)]  # past one pool of 256
    for h in ids:
        u = uuid.UUID(hex=h)
        assert (u.version, u.variant, u.hex) == (4, uuid.RFC_4122, h)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_does_not_draw_the_ids_its_parent_draws_next() -> None:
    fresh_id()  # a pool is drawn, with ids left in it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        try:
            os.write(write, fresh_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 32
    assert child != fresh_id()  # a shared pool would hand both the same id


def test_a_replaced_uuid4_gives_the_ids_as_the_golden_plays_seed_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = iter([uuid.UUID(int=n, version=4) for n in (1, 2)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(made))
    assert [fresh_id(), fresh_id()] == [uuid.UUID(int=n, version=4).hex for n in (1, 2)]
