"""`props keys create|list`: the Ed25519 keys that sign export files.

The keys themselves: props.core.domain.archive.signing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from props.tools.command_line import arguments


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
    c.set_defaults(handler="keys:create_cmd")
    lst = cmds.add_parser("list", help="the public keys in a folder, with fingerprints",
                          description="Each NAME.pub in the folder and its fingerprint (what "
                          "imported events name as their signer).")
    lst.add_argument("--dir", type=Path, help="the keys folder (default $PROPS_HOME/keys)")
    arguments.add_format(lst)
    lst.set_defaults(handler="keys:list_cmd")
