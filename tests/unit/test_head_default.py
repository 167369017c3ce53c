"""The head's default size: room above what Ray and the runtime hold on the head of the smallest
loop, and the CRD says the default the builders give."""

from __future__ import annotations

from decimal import Decimal

from raytrain_operator.api import crd as crdgen
from raytrain_operator.builders import quantities
from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES

GIB = Decimal(2**30)
#: Ray's memory monitor kills a process once its pod uses this share of the memory limit
#: (`RAY_memory_usage_threshold`, default 0.95).
RAY_THRESHOLD = Decimal("0.95")
#: The head of the smallest loop (`nn.Linear(10, 2)` on two workers, three reports) at its peak:
#: usage less inactive file of a Ray 2.60 head (`--num-cpus=0`, the driver submitted as a job)
#: in a memory cgroup of its own, a worker node beside it. 2.16 GiB: over the threshold of 2Gi.
SMALLEST_LOOP_HEAD = Decimal(2_319_691_776)
#: What a driver that holds a little data (a small dataset, a bigger model) may add on top.
HEADROOM = GIB


def test_the_default_head_leaves_room_above_what_the_smallest_loop_holds() -> None:
    limit = quantities.parse(DEFAULT_HEAD_RESOURCES["limits"]["memory"])
    assert RAY_THRESHOLD * limit - SMALLEST_LOOP_HEAD >= HEADROOM, (
        f"Ray kills at {RAY_THRESHOLD * limit / GIB:.2f} GiB with a "
        f"{DEFAULT_HEAD_RESOURCES['limits']['memory']} head; the smallest loop holds "
        f"{SMALLEST_LOOP_HEAD / GIB:.2f} GiB there"
    )
    # The scheduler places the head where the memory it may use is free.
    assert (
        DEFAULT_HEAD_RESOURCES["requests"]["memory"] == DEFAULT_HEAD_RESOURCES["limits"]["memory"]
    )


def test_the_crd_states_the_default_the_builders_give() -> None:
    schema = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    resources = schema["properties"]["spec"]["properties"]["head"]["properties"]["resources"]
    requests, limits = DEFAULT_HEAD_RESOURCES["requests"], DEFAULT_HEAD_RESOURCES["limits"]
    said = (
        f"replace the whole default ({requests['cpu']} CPU and {requests['memory']} requested, "
        f"a {limits['memory']} memory limit)"
    )
    assert said in " ".join(resources["description"].split())
