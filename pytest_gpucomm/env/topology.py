"""Where the ranks of a launched job are, and the groups and node pairs the topology-aware suites use.

Pure functions of the node index and local rank of every rank (gathered once per session by
:meth:`pytest_gpucomm.plugin.launched.LaunchedSession.layout`); no torch, no communication, so that they are
tested on their own.

Group kinds (:data:`GROUP_KINDS`):

* ``"world"``: every rank of the job, one group;
* ``"intra-node"``: the ranks of one node, one group per node (every node's group runs at once); it needs
  two ranks or more on every node;
* ``"inter-node"``: one rank per node, the ranks with the same local rank k on every node, one group per k
  (every k's group runs at once): the path through the nodes' NICs.  It needs the same set of local ranks on
  every node.

Node pairs (:func:`node_pair_phases`): the GPU of local rank k on one node exchanges with local rank k on
another node, every local rank at once, over a ring of nodes (every link of the ring at once) or pairwise
(one pair of nodes at a time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from ..measurement import MeasurementInfo

__all__ = ["GROUP_KINDS", "WORLD", "INTRA_NODE", "INTER_NODE", "PAIR_PATTERNS", "PAIRWISE_MAX_NODES", "SubGroup",
           "Layout", "NodePair", "Phase", "group_layout", "node_pair_phases", "node_pair_problem",
           "check_group_kind"]

WORLD, INTRA_NODE, INTER_NODE = "world", "intra-node", "inter-node"
#: the group kinds, in the order of the suites' test ids
GROUP_KINDS = (WORLD, INTRA_NODE, INTER_NODE)

RING, PAIRWISE = "ring", "pairwise"
PAIR_PATTERNS = (RING, PAIRWISE)
#: pairwise runs the N(N-1)/2 pairs of nodes one at a time: only where the job is this small
PAIRWISE_MAX_NODES = 4


def check_group_kind(kind: object, where: str) -> str:
    """``kind`` if it is a group kind, else ValueError naming it and ``where`` it came from."""
    if kind not in GROUP_KINDS:
        raise ValueError(f"{where}: unknown group kind {kind!r}; known: {', '.join(GROUP_KINDS)}")
    return str(kind)


def _node_label(node: int, host: str) -> str:
    return f"node {node}" + (f" ({host})" if host else "")


@dataclass(frozen=True)
class SubGroup:
    """One group of a kind: its global ranks, ordered by group rank (ascending, as torch orders them), and
    what a measurement over it says of where it ran.

    ``index`` is the node index of an intra-node group, the local rank k of an inter-node group, 0 for the
    world."""

    kind: str
    index: int
    ranks: tuple[int, ...]
    host: str = ""  # an intra-node group's host
    n_nodes: int = 1  # the nodes an inter-node group spans

    @property
    def label(self) -> str:
        if self.kind == INTRA_NODE:
            return _node_label(self.index, self.host)
        if self.kind == INTER_NODE:
            return f"local rank {self.index} across {self.n_nodes} nodes"
        return f"all {len(self.ranks)} ranks"

    def info(self) -> MeasurementInfo:
        """What ``Measurement.info`` says of this group: ``node`` and ``host`` for an intra-node group (the
        measurement's ``where`` then names the node), ``group`` for an inter-node group."""
        if self.kind == INTRA_NODE:
            return {"group_kind": self.kind, "node": self.index, "host": self.host}
        if self.kind == INTER_NODE:
            return {"group_kind": self.kind, "group": self.label, "local_rank": self.index}
        return {}


@dataclass(frozen=True)
class NodePair:
    """Two nodes that exchange in one phase: ``a`` sends to ``b`` (and ``b`` to ``a`` when ``both_ways``);
    ``ranks`` are the global ranks of both nodes, whose slowest time per iteration is the pair's."""

    a: int
    b: int
    host_a: str
    host_b: str
    both_ways: bool
    ranks: tuple[int, ...]

    @property
    def label(self) -> str:
        arrow = "<->" if self.both_ways else "->"
        return f"{_node_label(self.a, self.host_a)} {arrow} {_node_label(self.b, self.host_b)}"

    def info(self) -> MeasurementInfo:
        return {"pair": self.label, "nodes": [self.a, self.b], "hosts": [self.host_a, self.host_b],
                "both_ways": self.both_ways}


@dataclass(frozen=True)
class Phase:
    """Exchanges that run at once: ``edges`` are (sender, receiver) global ranks; ``pairs`` the node pairs
    they make.  Every rank sends to at most one rank and receives from at most one."""

    edges: tuple[tuple[int, int], ...]
    pairs: tuple[NodePair, ...]


@dataclass(frozen=True)
class Layout:
    """The node index and local rank of every rank of a job (ordered by global rank), and its hosts."""

    nodes: tuple[int, ...]
    local_ranks: tuple[int, ...]
    hosts: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return len(self.nodes)

    @property
    def node_ids(self) -> tuple[int, ...]:
        """The node indices, ascending (not necessarily 0..N-1)."""
        return tuple(sorted(set(self.nodes)))

    @property
    def n_nodes(self) -> int:
        return len(set(self.nodes))

    def ranks_of(self, node: int) -> tuple[int, ...]:
        """The global ranks on ``node``, ascending."""
        return tuple(r for r, n in enumerate(self.nodes) if n == node)

    def host_of(self, node: int) -> str:
        ranks = self.ranks_of(node)
        return self.hosts[ranks[0]] if ranks and ranks[0] < len(self.hosts) else ""

    def local_rank_sets(self) -> dict[int, tuple[int, ...]]:
        """Each node's local ranks, ascending."""
        return {n: tuple(sorted(self.local_ranks[r] for r in self.ranks_of(n))) for n in self.node_ids}

    def _describe_nodes(self) -> str:
        return ", ".join(f"{_node_label(n, self.host_of(n))}: local ranks {', '.join(map(str, ks))}"
                         for n, ks in self.local_rank_sets().items())

    def problem(self, kind: str) -> Optional[str]:
        """Why the groups of ``kind`` cannot be made in this job (a skip reason), or None."""
        check_group_kind(kind, "Layout.problem()")
        if kind == WORLD:
            return None
        if self.n_nodes < 2:
            return f"group kind {kind!r} needs a job of more than one node; this one has 1"
        if kind == INTRA_NODE:
            alone = [n for n in self.node_ids if len(self.ranks_of(n)) < 2]
            if alone:
                return (f"group kind {kind!r} needs at least 2 ranks on every node (a collective of one rank "
                        f"moves nothing); one rank on {', '.join(_node_label(n, self.host_of(n)) for n in alone)}")
        if kind == INTER_NODE:
            sets = set(self.local_rank_sets().values())
            if len(sets) > 1:
                return (f"group kind {kind!r} needs the same local ranks on every node (one group per local rank "
                        f"k, with local rank k of every node); this job's nodes differ: {self._describe_nodes()}")
        return None

    def groups(self, kind: str) -> list[SubGroup]:
        """The groups of ``kind``, in the order every rank creates them: by node index (intra-node), by
        local rank (inter-node).  ValueError when :meth:`problem` says they cannot be made."""
        why = self.problem(kind)
        if why:
            raise ValueError(why)
        if kind == WORLD:
            return [SubGroup(WORLD, 0, tuple(range(self.world_size)))]
        if kind == INTRA_NODE:
            return [SubGroup(INTRA_NODE, n, self.ranks_of(n), host=self.host_of(n)) for n in self.node_ids]
        ks = sorted(set(self.local_ranks))
        return [SubGroup(INTER_NODE, k, tuple(r for r, lk in enumerate(self.local_ranks) if lk == k),
                         n_nodes=self.n_nodes) for k in ks]

    def group_of(self, kind: str, rank: int) -> SubGroup:
        """The group of ``kind`` that global ``rank`` is in."""
        return next(g for g in self.groups(kind) if rank in g.ranks)

    def peer(self, node: int, local_rank: int) -> int:
        """The global rank of ``local_rank`` on ``node``."""
        return next(r for r in self.ranks_of(node) if self.local_ranks[r] == local_rank)


def group_layout(nodes: Sequence[int], local_ranks: Sequence[int], hosts: Sequence[str] = ()) -> Layout:
    """The :class:`Layout` of a job from each rank's node index and local rank (ordered by global rank, as
    gathered from every rank).  ValueError, naming the ranks, when two ranks say they are the same local rank
    of the same node, or when the lists differ in length."""
    nodes, local_ranks, hosts = tuple(int(n) for n in nodes), tuple(int(k) for k in local_ranks), tuple(hosts)
    if len(nodes) != len(local_ranks) or (hosts and len(hosts) != len(nodes)):
        raise ValueError(f"group_layout(): {len(nodes)} node indices, {len(local_ranks)} local ranks and "
                         f"{len(hosts)} hosts; expected one of each per rank")
    if not nodes:
        raise ValueError("group_layout(): no ranks")
    seen: dict[tuple[int, int], int] = {}
    for r, key in enumerate(zip(nodes, local_ranks)):
        if key in seen:
            raise ValueError(f"ranks {seen[key]} and {r} both say they are local rank {key[1]} of node {key[0]}: "
                             "the launcher's node and local rank variables do not describe this job")
        seen[key] = r
    return Layout(nodes, local_ranks, hosts)


def _pair(layout: Layout, a: int, b: int, both_ways: bool) -> NodePair:
    return NodePair(a, b, layout.host_of(a), layout.host_of(b), both_ways,
                    tuple(sorted(layout.ranks_of(a) + layout.ranks_of(b))))


def _edges(layout: Layout, a: int, b: int) -> list[tuple[int, int]]:
    """Local rank k of node ``a`` -> local rank k of node ``b``, for every k."""
    return [(r, layout.peer(b, layout.local_ranks[r])) for r in layout.ranks_of(a)]


def node_pair_phases(layout: Layout, pattern: str) -> list[Phase]:
    """The phases of the inter-node pair test, in order.

    * ``"ring"``: one phase, every node at once: node i (in ascending node index) sends to node i+1 and
      receives from node i-1 (around); one :class:`NodePair` per link of the ring, ``i -> i+1``.  On two
      nodes the ring is one pair, both ways at once (``0 <-> 1``).
    * ``"pairwise"``: one phase per unordered pair of nodes, one at a time, both ways at once; the other
      nodes wait.  Only up to :data:`PAIRWISE_MAX_NODES` nodes.

    ValueError with the reason when the job cannot run ``pattern`` (one node, nodes with different local
    ranks, too many nodes for pairwise, an unknown pattern)."""
    if pattern not in PAIR_PATTERNS:
        raise ValueError(f"unknown node pair pattern {pattern!r}; known: {', '.join(PAIR_PATTERNS)}")
    why = node_pair_problem(layout, pattern)
    if why:
        raise ValueError(why)
    ids = layout.node_ids
    if pattern == PAIRWISE:
        return [Phase(tuple(_edges(layout, a, b) + _edges(layout, b, a)), (_pair(layout, a, b, True),))
                for i, a in enumerate(ids) for b in ids[i + 1:]]
    if len(ids) == 2:
        a, b = ids
        return [Phase(tuple(_edges(layout, a, b) + _edges(layout, b, a)), (_pair(layout, a, b, True),))]
    nxt = {a: ids[(i + 1) % len(ids)] for i, a in enumerate(ids)}
    edges = [e for a in ids for e in _edges(layout, a, nxt[a])]
    return [Phase(tuple(edges), tuple(_pair(layout, a, nxt[a], False) for a in ids))]


def node_pair_problem(layout: Layout, pattern: str) -> Optional[str]:
    """Why the job cannot run the pair test ``pattern`` (a skip reason), or None."""
    if layout.n_nodes < 2:
        return "the inter-node pair test needs a job of more than one node; this one has 1"
    if len(set(layout.local_rank_sets().values())) > 1:
        return ("the inter-node pair test pairs local rank k of one node with local rank k of another, so it needs "
                f"the same local ranks on every node; this job's nodes differ: {layout._describe_nodes()}")
    if pattern == PAIRWISE and layout.n_nodes > PAIRWISE_MAX_NODES:
        return (f"pairwise runs the node pairs one at a time, only where the job has at most {PAIRWISE_MAX_NODES} "
                f"nodes; this one has {layout.n_nodes} (the ring covers every node)")
    return None
