"""`python -m props.reactors.runtimes.local_shim STATE_DIR -- COMMAND...`: one local "container".

The local runtime starts this shim in a session of its own, so it outlives the launcher that
started it (a restarted launcher adopts it, as it adopts a Docker container). The shim runs
the command in a process group of its own under the memory limit, sends its output to
STATE_DIR/logs, and writes STATE_DIR/exit.json when it ends: the exit code (None if killed by
a signal) and whether it ran out of memory. The launcher reads only these files.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path


def _limit_memory(memory_mb: int) -> None:
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(argv: list[str]) -> int:
    state = Path(argv[0])
    memory_mb = int(os.environ.pop("PROPS_SHIM_MEMORY_MB", "0"))
    command = argv[argv.index("--") + 1:]
    with open(state / "logs", "ab") as logs:
        child = subprocess.Popen(
            command, stdout=logs, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=state,  # never the launcher's folder: nothing there is the agent's to import
            process_group=0,  # `kill` signals the group: the command and its children
            preexec_fn=(lambda: _limit_memory(memory_mb)) if memory_mb else None,
        )
        (state / "child.pid").write_text(str(child.pid))
        # A SIGTERM to the shim is passed on, so the command can stop cleanly.
        signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
        code = child.wait()
    tail = (state / "logs").read_bytes()[-4096:]
    # Under RLIMIT_AS an allocation fails rather than the kernel killing the process: Python
    # raises MemoryError; a C program usually aborts. Both count as out of memory.
    oom = code != 0 and (b"MemoryError" in tail or b"Cannot allocate memory" in tail)
    result = {"exit_code": code if code >= 0 else None, "oom_killed": oom}
    tmp = state / "exit.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.rename(state / "exit.json")  # atomic: the launcher sees all of it or nothing
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
