"""`props keys create|list`: the Ed25519 keys that sign export files (props.core.domain.signing)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from props.core.domain import signing
from props.core.log import embedded
from props.tools.render import Console, Table

console = Console(highlight=False)


def keys_dir(given: Path | None) -> Path:
    return given or signing.default_dir(embedded.default_home())


def add_parser(sub: Any) -> None:
    k = sub.add_parser("keys", help="keys that sign export files",
                       description="Ed25519 keys for `props export --sign NAME`. A key is a "
                       "pair NAME.key (private, readable by you only) and NAME.pub (give it "
                       "to whoever imports your files: `props import --trusted-keys DIR` "
                       "accepts files signed by the .pub files in DIR). Default folder: "
                       "$PROPS_HOME/keys.")
    cmds = k.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    c = cmds.add_parser("create", help="make a new key pair",
                        description="Make NAME.key and NAME.pub; an existing key is never "
                        "overwritten.")
    c.add_argument("name", help="letters, digits, '.', '_' and '-'")
    c.add_argument("--dir", type=Path, help="the keys folder (default $PROPS_HOME/keys)")
    c.set_defaults(handler=create_cmd)
    lst = cmds.add_parser("list", help="the public keys in a folder, with fingerprints",
                          description="Each NAME.pub in the folder and its fingerprint (what "
                          "imported events name as their signer).")
    lst.add_argument("--dir", type=Path, help="the keys folder (default $PROPS_HOME/keys)")
    lst.set_defaults(handler=list_cmd)


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
