"""Splitters deal shards to threads and nodes exactly as SPEC §7 shows."""

from __future__ import annotations

import pytest

import lowkiq
from lowkiq.errors import ConfigurationError
from lowkiq.strategies.splitters import (
    build_by_node_splitter,
    build_default_splitter,
    build_env_splitter,
    with_threads,
)

SHARDS = ["A0", "A1", "A2", "B0", "B1", "B2", "B3", "C0", "D0", "D1"]


def test_default_splitter_deals_round_robin_as_in_the_spec() -> None:
    split = build_default_splitter(3)(SHARDS)
    assert split == [["A0", "B0", "B3", "D1"], ["A1", "B1", "C0"], ["A2", "B2", "D0"]]


def test_default_splitter_drops_empty_threads() -> None:
    assert build_default_splitter(5)(["A0", "A1"]) == [["A0"], ["A1"]]


def test_a_splitter_built_without_threads_takes_them_from_the_server() -> None:
    open_splitter = build_default_splitter()
    assert with_threads(open_splitter, 2)(SHARDS[:4]) == [["A0", "A2"], ["A1", "B0"]]
    assert with_threads(build_by_node_splitter(2, 1), 1)(SHARDS[:4]) == [["A1", "B0"]]
    with pytest.raises(ConfigurationError, match="thread count"):
        open_splitter(SHARDS)


def test_a_splitter_given_threads_keeps_them() -> None:
    assert with_threads(build_default_splitter(1), 3)(SHARDS[:2]) == [["A0", "A1"]]


def test_by_node_splitter_deals_to_nodes_then_threads() -> None:
    # nodes: n0 = A0 A2 B1 B3 D0, n1 = A1 B0 B2 C0 D1
    assert build_by_node_splitter(2, 0, 2)(SHARDS) == [["A0", "B1", "D0"], ["A2", "B3"]]
    assert build_by_node_splitter(2, 1, 2)(SHARDS) == [["A1", "B2", "D1"], ["B0", "C0"]]


def test_by_node_splitters_cover_every_shard_once() -> None:
    thread_of = [
        shard
        for node in range(3)
        for thread in build_by_node_splitter(3, node, 2)(SHARDS)
        for shard in thread
    ]
    assert sorted(thread_of) == sorted(SHARDS)


def test_by_node_splitter_rejects_a_node_number_out_of_range() -> None:
    with pytest.raises(ConfigurationError, match="node number"):
        build_by_node_splitter(2, 2, 1)


def test_environment_selects_the_by_node_splitter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOWKIQ_NUMBER_OF_NODES", "2")
    monkeypatch.setenv("LOWKIQ_NODE_NUMBER", "1")
    lowkiq.settings.reset()
    try:
        split = with_threads(lowkiq.settings.build_splitter(), 5)(SHARDS)
        assert [s for thread in split for s in thread] == sorted(SHARDS[1::2], key=SHARDS.index)
    finally:
        monkeypatch.delenv("LOWKIQ_NUMBER_OF_NODES")
        monkeypatch.delenv("LOWKIQ_NODE_NUMBER")
        lowkiq.settings.reset()
    assert lowkiq.settings.build_splitter is lowkiq.build_default_splitter


def test_half_set_environment_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOWKIQ_NODE_NUMBER", "1")
    with pytest.raises(ConfigurationError, match="LOWKIQ_NUMBER_OF_NODES"):
        build_env_splitter()
