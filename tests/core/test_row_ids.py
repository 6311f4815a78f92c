"""Keys of new elicitation and request-state rows: unique, unguessable enough, time-ordered."""

from __future__ import annotations

import time
import uuid

from mcp_common.elicitation import new_record
from mcp_common.store import new_row_id


def test_a_row_id_is_a_version_7_uuid_of_now() -> None:
    before = time.time_ns() // 1_000_000
    key = new_row_id()
    after = time.time_ns() // 1_000_000
    assert len(key) == 32 and key.isalnum() and key == key.lower()
    parsed = uuid.UUID(hex=key)
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert before <= int(key[:12], 16) <= after


def test_row_ids_are_unique_and_sort_by_creation_time() -> None:
    first = [new_row_id() for _ in range(5000)]
    time.sleep(0.002)
    second = [new_row_id() for _ in range(5000)]
    assert len(set(first + second)) == 10_000
    assert max(first) < min(second)
    # The 74 random bits differ within one millisecond: no two keys share them.
    assert len({key[12:] for key in first + second}) == 10_000


def test_new_elicitation_rows_get_such_ids() -> None:
    record = new_record(server_name="s", tool="t", params={"message": "m"}, request_key="k", principal=None, expires=0)
    assert uuid.UUID(hex=record.id).version == 7
