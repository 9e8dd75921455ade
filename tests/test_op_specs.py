"""The op specs (ops/specs.py): every measured op declares its group and kind next to its code."""

from __future__ import annotations

import pytest

from pytest_gpucomm.gate.levels import case_class
from pytest_gpucomm.gate.verdicts import case_group, case_kind
from pytest_gpucomm.ops import collectives, copies, nodes, patterns, specs


def test_every_collective_training_pattern_and_node_pair_is_of_the_collective_group():
    names = [*collectives.OPS, *patterns.PATTERNS, nodes.OP]
    assert {(case_group(n), case_kind(n)) for n in names} == {("collective", "collective")}


def test_host_device_copies_are_of_the_host_kind_and_the_other_copies_of_the_peer_kind():
    kinds = {n: case_kind(n) for n in ("copy", "copy_bidir", "h2d", "d2h", *copies.PATTERN_OPS.values())}
    assert kinds == {"copy": "peer", "copy_bidir": "peer", "h2d": "host", "d2h": "host", "copy_one_to_all": "peer",
                     "copy_all_to_one": "peer", "copy_all_pairs": "peer"}
    assert {case_group(n) for n in kinds} == {"copy"}
    assert case_class(case_kind("h2d"), 1 << 30) == "host<->device copies > 1 MiB"


def test_the_op_a_peer_copy_measures_has_a_spec():
    """The op name the copy code writes into its measurement is the one its spec declares."""
    from pytest_gpucomm.ops.timing import TimingSettings

    pool = copies.BufferPool()
    try:
        m = copies.measure_copy("cpu", "cpu", 4096, TimingSettings(min_time_s=0.001, min_samples=2, max_samples=3,
                                                                     warmup_min_s=0.0), pool, both_ways=True)
    finally:
        pool.clear()
    spec = specs.op_spec(m.op)
    assert spec is not None and (spec.name, spec.group, spec.kind) == ("copy_bidir", "copy", "peer")


def test_an_op_no_module_declares_counts_as_a_copy_between_devices():
    assert specs.op_spec("my_own_op") is None
    assert (case_group("my_own_op"), case_kind("my_own_op")) == ("copy", "peer")


def test_known_ops_lists_each_op_once_collectives_first():
    known = specs.known_ops()
    assert len(known) == len(set(known))
    assert known[:len(collectives.OPS)] == tuple(collectives.OPS)


def test_a_spec_whose_kind_is_not_of_its_group_is_refused_with_both_named():
    with pytest.raises(ValueError, match=r"op 'x' of group 'copy': kind must be one of peer, host, got 'collective'"):
        specs.OpSpec("x", "copy", "collective")
    with pytest.raises(ValueError, match=r"op 'x': group must be one of collective, copy, got 'link'"):
        specs.OpSpec("x", "link", "peer")


def test_an_op_declared_by_two_modules_is_refused(monkeypatch):
    monkeypatch.setattr(nodes, "SPECS", (specs.OpSpec("all_reduce", "collective", "collective"),))
    specs._registry.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"op 'all_reduce' is declared twice: in pytest_gpucomm.ops.nodes"):
            specs.op_spec("all_reduce")
    finally:
        monkeypatch.undo()
        specs._registry.cache_clear()
