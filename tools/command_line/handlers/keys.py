"""What `props keys` does: the handlers that the parsers of
`props.tools.command_line.commands.keys` name."""

from __future__ import annotations

import argparse
from pathlib import Path

from props.core.domain.archive import signing, trust
from props.core.log import embedded, errors
from props.core.log.store import EventStore
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


async def trust_cmd(args: argparse.Namespace, store: EventStore) -> int:
    for path in args.file:
        key = signing.load_public(path)
        changed = await trust.trust(store, key, actor="cli")
        console.print(f"{'trusts' if changed else 'already trusted'}: {key.name} "
                      f"({key.fingerprint}); files no trusted signer signed are refused by "
                      f"`props import` (or, with --untrusted, kept as inert history)",
                      markup=False)
    return 0


async def distrust_cmd(args: argparse.Namespace, store: EventStore) -> int:
    if not await trust.distrust(store, args.fingerprint, actor="cli"):
        raise errors.NotFound(f"no trusted signer {args.fingerprint[:40]!r} (props keys "
                              f"trusted)")
    left = await trust.trusted(store)
    console.print(f"no longer trusts {args.fingerprint}; "
                  f"{len(left)} signer(s) trusted" if left else
                  f"no longer trusts {args.fingerprint}; no signer is trusted: every "
                  f"verified file is taken as it comes", markup=False)
    return 0


async def trusted_cmd(args: argparse.Namespace, store: EventStore) -> int:
    rows = [{"name": s.name, "fingerprint": s.fingerprint} for s in await trust.trusted(store)]
    render.emit(args, rows, [("name", "name"), ("fingerprint", "fingerprint")],
                empty="no signer is trusted: every verified file is taken as it comes "
                      "(props keys trust NAME.pub)")
    return 0
