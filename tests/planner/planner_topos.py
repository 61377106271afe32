"""Hardware and topologies shared by the pass tests (explicit H200 numbers, no table lookup)."""

from deepinfer.planner.topology import HardwareSection, ModelSection, ParallelSection, Topology

GIB = 2**30


def h200(gpus_per_node: int = 8, nodes: int = 1) -> HardwareSection:
    return HardwareSection(device="h200", memory_bytes=139 * GIB, hbm_bytes_per_s=4.8e12,
                           bf16_flops_per_s=989e12, fp8_flops_per_s=1979e12, sm_arch=90,
                           gpus_per_node=gpus_per_node, nodes=nodes)


H200 = h200()
RELEASED_8 = Topology(model=ModelSection("builtin:v41-flash"), hardware=H200,
                      parallel=ParallelSection(dp=8, ep=8, engram=8))
