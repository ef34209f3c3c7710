"""Splitters deal the shards of all workers to threads (and to nodes) — SPEC §7.

A splitter is a callable ``shards -> [[shard, ...], ...]``: one list per
thread, empty threads dropped.  ``settings.build_splitter`` is a zero-argument
factory of one; the built-ins are :func:`build_default_splitter` and
:func:`build_by_node_splitter`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from lowkiq.environment import env_int
from lowkiq.errors import ConfigurationError

T = TypeVar("T")

#: A splitter: all shards in worker order -> one list of shards per thread.
Splitter = Callable[[Sequence[Any]], list[list[Any]]]


def deal(items: Sequence[T], hands: int) -> list[list[T]]:
    """Deal ``items`` round-robin into ``hands`` lists, dropping the empty ones."""
    if hands < 1:
        raise ConfigurationError(f"cannot deal shards to {hands} threads or nodes")
    dealt: list[list[T]] = [[] for _ in range(hands)]
    for index, item in enumerate(items):
        dealt[index % hands].append(item)
    return [hand for hand in dealt if hand]


def _threads(threads_per_node: int | None) -> int:
    if threads_per_node is not None:
        return threads_per_node
    from lowkiq.settings import settings

    return settings.threads_per_node


def build_default_splitter(threads_per_node: int | None = None) -> Splitter:
    """Deal every shard to ``threads_per_node`` threads (default: the setting)."""
    threads = _threads(threads_per_node)

    def default_splitter(shards: Sequence[Any]) -> list[list[Any]]:
        return deal(shards, threads)

    return default_splitter


def build_by_node_splitter(
    number_of_nodes: int, node_number: int, threads_per_node: int | None = None
) -> Splitter:
    """Deal the shards to ``number_of_nodes`` nodes, then node ``node_number``'s share to threads.

    Run one ``lowkiq worker`` per node number, ``0 .. number_of_nodes - 1``;
    together they serve every shard exactly once.
    """
    if not 0 <= node_number < number_of_nodes:
        raise ConfigurationError(
            f"node number must be in 0..{number_of_nodes - 1}, got {node_number} "
            f"(number of nodes: {number_of_nodes})"
        )
    threads = _threads(threads_per_node)

    def by_node_splitter(shards: Sequence[Any]) -> list[list[Any]]:
        nodes = [shards[i::number_of_nodes] for i in range(number_of_nodes)]
        return deal(nodes[node_number], threads)

    return by_node_splitter


def build_env_splitter() -> Splitter:
    """By-node when ``LOWKIQ_NUMBER_OF_NODES`` and ``LOWKIQ_NODE_NUMBER`` are set, else default."""
    nodes, node = env_int("LOWKIQ_NUMBER_OF_NODES"), env_int("LOWKIQ_NODE_NUMBER")
    if nodes is None and node is None:
        return build_default_splitter()
    if nodes is None or node is None:
        raise ConfigurationError(
            "set both LOWKIQ_NUMBER_OF_NODES and LOWKIQ_NODE_NUMBER, or neither"
        )
    return build_by_node_splitter(nodes, node)


def default_build_splitter() -> Callable[[], Splitter]:
    """The default ``build_splitter`` setting, chosen from the environment.

    :func:`build_default_splitter`, or :func:`build_env_splitter` when either
    node variable is set (it reports a bad value when the server starts).
    """
    if os.environ.get("LOWKIQ_NUMBER_OF_NODES") or os.environ.get("LOWKIQ_NODE_NUMBER"):
        return build_env_splitter
    return build_default_splitter
