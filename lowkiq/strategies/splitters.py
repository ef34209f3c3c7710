"""Splitters deal the shards of all workers to threads, and to nodes.

A splitter is a callable ``shards -> [[shard, ...], ...]``: one list per
thread, in worker order, empty threads dropped.  ``settings.build_splitter``
is a zero-argument factory of one; the built-ins are
:func:`build_default_splitter` and :func:`build_by_node_splitter`.  The
default deals ``A0 A1 A2 B0 B1 B2 B3 C0 D0 D1`` to 3 threads as
``A0 B0 B3 D1 | A1 B1 C0 | A2 B2 D0``; the by-node splitter first deals the
list to nodes the same way, then its node's share to threads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from lowkiq.config.environment import env_int
from lowkiq.errors import ConfigurationError

T = TypeVar("T")

#: A splitter: all shards in worker order -> one list of shards per thread.
Splitter = Callable[[Sequence[Any]], list[list[Any]]]


def deal(items: Sequence[T], hands: int) -> list[list[T]]:
    """Deal ``items`` round-robin into ``hands`` lists, dropping the empty ones."""
    if hands < 1:
        raise ConfigurationError(f"cannot deal shards to {hands} threads or nodes")
    thread_of: list[list[T]] = [[] for _ in range(hands)]
    for index, item in enumerate(items):
        thread_of[index % hands].append(item)
    return [hand for hand in thread_of if hand]


@dataclass(frozen=True)
class RoundRobinSplitter:
    """The built-in splitter: node ``node_number``'s round-robin share, dealt to threads.

    ``threads_per_node=None`` leaves the thread count open: the server fills it
    in from the settings it runs with (:func:`with_threads`).
    """

    number_of_nodes: int = 1
    node_number: int = 0
    threads_per_node: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.node_number < self.number_of_nodes:
            raise ConfigurationError(
                f"node number must be in 0..{self.number_of_nodes - 1}, got {self.node_number} "
                f"(number of nodes: {self.number_of_nodes})"
            )

    def __call__(self, shards: Sequence[T]) -> list[list[T]]:
        if self.threads_per_node is None:
            raise ConfigurationError(
                "the splitter has no thread count: pass threads_per_node, "
                "or let the server take it from its settings"
            )
        share = shards[self.node_number :: self.number_of_nodes]
        return deal(share, self.threads_per_node)


def with_threads(splitter: Splitter, threads_per_node: int) -> Splitter:
    """``splitter``, with ``threads_per_node`` filled in when it is a built-in left open."""
    if isinstance(splitter, RoundRobinSplitter) and splitter.threads_per_node is None:
        return replace(splitter, threads_per_node=threads_per_node)
    return splitter


def build_default_splitter(threads_per_node: int | None = None) -> Splitter:
    """Deal every shard to ``threads_per_node`` threads (default: the server's setting)."""
    return RoundRobinSplitter(threads_per_node=threads_per_node)


def build_by_node_splitter(
    number_of_nodes: int, node_number: int, threads_per_node: int | None = None
) -> Splitter:
    """Deal the shards to ``number_of_nodes`` nodes, then node ``node_number``'s share to threads.

    Run one ``lowkiq worker`` per node number, ``0 .. number_of_nodes - 1``;
    together they serve every shard exactly once.
    """
    return RoundRobinSplitter(number_of_nodes, node_number, threads_per_node)


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
