"""The two-node swarm the swarm tests run on (props.tools.checks.swarm.rig), up once per
session and down at its end. Where it cannot run (not root, packages missing) the tests are
skipped with the reason; under PROPS_REQUIRE_SWARM=1 (CI) they fail instead."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from props.reactors.runtimes.swarm_runtime import SwarmRuntime
from props.tools.checks.swarm import rig

SWARM_DIR = Path("/tmp/props-swarm-pxsw")
PREFIX = "pxsw"  # its network namespaces, bridge and veths (the recipe's own is sw2n)


def swarm_required() -> bool:
    return os.environ.get("PROPS_REQUIRE_SWARM") == "1"


@pytest.fixture(scope="session")
def swarm() -> Iterator[rig.Rig]:
    reason = rig.missing()
    if reason is not None:
        if swarm_required():
            pytest.fail(f"{reason}; PROPS_REQUIRE_SWARM=1 demands a swarm")
        pytest.skip(f"NORUN: {reason}")
    t0 = time.monotonic()
    made = rig.up(SWARM_DIR, PREFIX)
    print(f"\ntwo-node swarm up in {time.monotonic() - t0:.1f} s")
    try:
        yield made
    finally:
        t0 = time.monotonic()
        made.down()
        print(f"\ntwo-node swarm down in {time.monotonic() - t0:.1f} s")


@asynccontextmanager
async def opened_swarm(made: rig.Rig, **options: Any) -> AsyncIterator[SwarmRuntime]:
    async with SwarmRuntime.connect(made.manager, node_engines=[made.manager, made.worker],
                                    **options) as rt:
        yield rt
