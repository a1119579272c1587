"""The one-call driver on this process's TVM runtime (no server): what it unpacks, runs and
packs -- tuples, Relax shapes, bools, empty tensors -- exactly."""

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")

from tvm import relax
from tvm.script import relax as R

from subgraph.properties.remote.driver import LOADER, Plan, driver_bytes, pack_inputs, unpack_outputs

pytestmark = pytest.mark.tvm


@tvm.script.ir_module
class Outputs:
    @R.function
    def main(x: R.Tensor((4,), "float32"), flags: R.Tensor((4,), "bool"), e: R.Tensor((2, 0), "float32")):
        return (R.add(x, x), R.shape([2, 3]), flags, R.add(e, e), R.shape_of(e), R.shape_of(x))


@tvm.script.ir_module
class Vector:
    @R.function
    def main(x: R.Tensor((3,), "int64")):
        return R.add(x, x)


def call(vm, plan, data, probe=False):
    """The driver of ``plan`` loaded as the server loads it, called on ``data`` and ``vm``."""
    driver = relax.VirtualMachine(tvm.get_global_func(LOADER)(bytearray(driver_bytes(plan, probe))), tvm.cpu())
    return driver["call"](data, vm.module)


def test_tuples_shapes_bools_and_empty_tensors_cross_exactly():
    vm = relax.VirtualMachine(relax.build(Outputs, target="llvm"), tvm.cpu())
    inputs = [np.array([0.5, -1.0, 2.0, np.inf], np.float32), np.array([True, False, False, True]),
              np.zeros((2, 0), np.float32)]
    plan = Plan.of([a.shape for a in inputs], [((4,), "float32"), ((2,), "int64"), ((4,), "bool"),
                                               ((2, 0), "float32"), ((2,), "int64"), ((1,), "int64")])
    assert plan.empty_inputs == ((2, (2, 0)),)
    assert plan.kinds == ("tensor", "tensor or shape", "tensor", "empty", "tensor or shape", "tensor or shape")
    data = pack_inputs(inputs)
    learned = plan.learned(call(vm, plan, data, probe=True))
    assert learned.kinds == ("tensor", "shape", "tensor", "empty", "shape", "shape") and learned.known
    got = unpack_outputs(call(vm, learned, data), learned)
    expected = [inputs[0] * 2, np.array([2, 3]), inputs[1], np.zeros((2, 0), np.float32), np.array([2, 0]),
                np.array([4])]
    assert [(a.dtype, a.shape) for a in got] == [(a.dtype, a.shape) for a in expected]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(inputs[0], [0.5, -1.0, 2.0, np.inf])  # the caller's arrays are kept


def test_an_int64_tensor_is_learned_as_a_tensor_and_one_output_is_not_a_tuple():
    vm = relax.VirtualMachine(relax.build(Vector, target="llvm"), tvm.cpu())
    x = np.array([1, -2, 2**40])
    plan = Plan.of([(3,)], [((3,), "int64")])
    learned = plan.learned(call(vm, plan, pack_inputs([x]), probe=True))
    assert learned.kinds == ("tensor",)
    [got] = unpack_outputs(call(vm, learned, pack_inputs([x])), learned)
    assert got.dtype == np.int64 and got.tolist() == [2, -4, 2**41]


def test_plans_that_differ_only_in_output_shapes_share_a_driver():
    small = Plan.of([(1, 3)], [((1, 8), "float32")])
    large = Plan.of([(64, 3)], [((64, 8), "float32")])
    assert small == large and hash(small) == hash(large)
    assert driver_bytes(small) is driver_bytes(large)  # built once
    assert Plan.of([(1, 3)], [((1, 8), "float32"), ((1, 8), "float32")]) != small
