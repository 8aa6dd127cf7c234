"""What `props keys` does: the handlers that the parsers of
`props.tools.commands.keys` name."""

from __future__ import annotations

import argparse
from pathlib import Path

from props.core.domain import signing
from props.core.log import embedded
from props.tools.render import Console, Table

console = Console(highlight=False)


def keys_dir(given: Path | None) -> Path:
    return given or signing.default_dir(embedded.default_home())


async def create_cmd(args: argparse.Namespace) -> int:
    made = signing.create(keys_dir(args.dir), args.name)
    console.print(f"created key {made.name} (fingerprint {made.fingerprint}) in "
                  f"{keys_dir(args.dir)}")
    return 0


async def list_cmd(args: argparse.Namespace) -> int:
    table = Table("name", "fingerprint")
    for key in signing.public_keys(keys_dir(args.dir)):
        table.add_row(key.name, key.fingerprint)
    console.print(table)
    return 0
