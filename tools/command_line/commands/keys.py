"""`props keys create|list|trust|distrust|trusted`: the Ed25519 keys that sign export
files, and the signers whose files this deployment trusts.

The keys themselves: props.core.domain.archive.signing; trust: ...archive.trust.
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
    t = cmds.add_parser(
        "trust", help="trust the files a public key signs (this deployment)",
        description="Record that this deployment trusts export files signed by the key in "
        "FILE (a NAME.pub). Once any signer is trusted, `props import` refuses a file none "
        "of the trusted signers signed, or with --untrusted keeps it whole as inert history: "
        "it takes no run id, evaluation or name that a trusted file may bring later. "
        "Recorded as an event (signer.trusted); the owner's decision.")
    t.add_argument("file", type=Path, nargs="+", help="a public key file (NAME.pub)")
    t.set_defaults(handler="keys:trust_cmd", connections=2, owner=True)
    d = cmds.add_parser("distrust", help="stop trusting a signer (by fingerprint)",
                        description="Record that this deployment no longer trusts files "
                        "signed by the key FINGERPRINT (`props keys trusted` lists them). "
                        "What its files brought stays.")
    d.add_argument("fingerprint", help="16 hex characters")
    d.set_defaults(handler="keys:distrust_cmd", connections=2, owner=True)
    tr = cmds.add_parser("trusted", help="the signers this deployment trusts",
                         description="The signers this deployment trusts (props keys trust): "
                         "name and fingerprint. None: every verified file is taken.")
    arguments.add_format(tr)
    tr.set_defaults(handler="keys:trusted_cmd", connections=2)
