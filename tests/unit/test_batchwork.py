"""``BatchWorkers.map``: a batch's items at once while few batches run, one after the other on
the caller under load; results in order either way."""

from __future__ import annotations

import threading

import pytest

from dracni.batchwork import BatchWorkers


@pytest.fixture
def workers():
    pool = BatchWorkers(max_workers=4, parallel_below=3)
    yield pool
    pool.close()


def test_a_batch_alone_runs_its_items_at_once_the_first_on_the_caller(workers) -> None:
    barrier = threading.Barrier(2, timeout=5)  # breaks unless both items are in here at once
    caller = threading.get_ident()
    ran_on: dict[int, int] = {}

    def work(i: int) -> int:
        ran_on[i] = threading.get_ident()
        barrier.wait()
        return i * 10

    assert workers.map(work, [1, 2]) == [10, 20]
    assert ran_on[1] == caller and ran_on[2] != caller


def test_under_load_a_batch_runs_on_its_caller_one_item_after_the_other(workers) -> None:
    """With ``parallel_below`` batches at once, the last to come runs sequentially."""
    release = threading.Event()
    entered = threading.Semaphore(0)

    def hold(_: int) -> int:
        entered.release()
        assert release.wait(5)
        return 0

    holders = [threading.Thread(target=workers.map, args=(hold, [0])) for _ in range(2)]
    for t in holders:
        t.start()
    for _ in holders:
        assert entered.acquire(timeout=5)  # two batches are being worked on
    caller = threading.get_ident()
    ran_on: list[int] = []
    try:
        assert workers.map(lambda i: ran_on.append(threading.get_ident()) or i, [1, 2, 3]) == [1, 2, 3]
    finally:
        release.set()
        for t in holders:
            t.join(5)
    assert ran_on == [caller] * 3


def test_once_the_load_is_gone_batches_run_in_parallel_again(workers) -> None:
    for _ in range(5):  # the count of running batches goes back down after each
        workers.map(lambda i: i, [1, 2])
    barrier = threading.Barrier(2, timeout=5)
    assert workers.map(lambda i: barrier.wait() * 0 + i, [1, 2]) == [1, 2]


def test_an_item_that_raises_raises_from_map_and_the_count_goes_down(workers) -> None:
    def work(i: int) -> int:
        if i == 1:
            raise ValueError("first")
        return i

    with pytest.raises(ValueError, match="first"):
        workers.map(work, [1, 2])
    barrier = threading.Barrier(2, timeout=5)
    assert workers.map(lambda i: barrier.wait() * 0 + i, [1, 2]) == [1, 2]
