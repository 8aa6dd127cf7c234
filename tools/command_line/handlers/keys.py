"""What `props keys` does: the handlers that the parsers of
`props.tools.command_line.commands.keys` name."""

from __future__ import annotations

import argparse
from pathlib import Path

from props.core.domain.archive import signing
from props.core.log import embedded
from props.tools.command_line import render
from props.tools.command_line.render import Console

console = Console(highlight=False)


def keys_dir(given: Path | None) -> Path:
    return given or signing.default_dir(embedded.default_home())


async def create_cmd(args: argparse.Namespace) -> int:
    made = signing.create(keys_dir(args.dir), args.name)
    console.print(f"created key {made.name} (fingerprint {made.fingerprint}) in "
                  f"{keys_dir(args.dir)}")
    return 0


async def list_cmd(args: argparse.Namespace) -> int:
    rows = [{"name": k.name, "fingerprint": k.fingerprint}
            for k in signing.public_keys(keys_dir(args.dir))]
    render.emit(args, rows, [("name", "name"), ("fingerprint", "fingerprint")],
                empty=f"no public keys in {keys_dir(args.dir)} (`props keys create NAME`)")
    return 0
