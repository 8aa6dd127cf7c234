"""Where and as whom a baseline's tool runs when it runs on this machine (the local runtime).

A static analyzer is not inert: astroid's `brain_gi` imports the `gi` it finds beside the
linted files, pylint loads plugins and C extensions, a snapshot can shadow the tool itself.
Four layers, each enough on its own for the attack it was built against, so that one
missing (a tool's next feature that imports) is not the end:

1. The tool's interpreter is isolated (`-I`), started from `/`, with PATH and HOME only
   (never PROPS_HOME, a DSN or a password) and behind a finder (`GUARD`) that refuses any
   module from outside the places it had on its path when it started.
2. The tools' import-executing features are off: astroid's `brain_gi` is unregistered (and
   cannot come back on a cache clear), pylint loads no plugin and no C extension.
3. The example's own pragmas are ignored (`# noqa`, `# nosec`, `# pylint: disable` and
   `skip-file`): a snapshot does not silence its reviewer.
4. When props runs as root, the tool runs as user `nobody` with no supplementary group, on a
   copy of the example's Python files in a folder only root and nobody's group can read
   (0750 root:nogroup): whatever still runs cannot read props' files (`credentials.json`
   under PROPS_HOME, the owner's password). The interpreter starts as root because its
   library may sit in a folder nobody cannot enter (`/root/.pyenv` is 0700): it opens the
   folders of its path, puts them on `sys.path` as `/proc/self/fd/N`, then drops its user
   before it imports the tool. As another user than root, props cannot change user: the
   tool runs as props' own user, with layers 1-3 only (docs/internals/reactors.md says so).

A file of the example that is a symbolic link leading out of the example is never read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

UNPRIVILEGED_USER = "nobody"

# Run as `python -I -c GUARD SETTINGS MODULE ARGS...`: SETTINGS is `Confinement` as JSON.
# Everything before the user drop imports only the standard library.
GUARD = """
import importlib, importlib.machinery, json, os, re, runpy, sys
settings = json.loads(sys.argv.pop(1))
module = sys.argv.pop(1)
_ALLOWED = tuple(os.path.realpath(p) + os.sep for p in sys.path if p)
class _OnlyInstalledCode:
    @staticmethod
    def find_spec(name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None:
            return None
        places = [spec.origin] if spec.has_location and spec.origin else []
        for place in places + list(spec.submodule_search_locations or []):
            if not (os.path.realpath(place) + os.sep).startswith(_ALLOWED):
                raise ImportError(f"props refused to import {name} from {place}: a "
                                  "baseline never runs the example's code")
        return None
if settings["guard_imports"]:
    sys.meta_path.insert(0, _OnlyInstalledCode)
binary = None
if settings["user"] is not None:
    import pwd
    user = pwd.getpwnam(settings["user"])
    if module == "ruff":  # a program, not Python: kept open to be run after the drop
        from ruff import find_ruff_bin  # (installed code: the guard is on)
        binary = os.open(find_ruff_bin(), os.O_RDONLY)
    held = {p: f"/proc/self/fd/{os.open(p, os.O_RDONLY | os.O_DIRECTORY)}"
            for p in sys.path if p and os.path.isdir(p)}
    sys.path[:] = list(held.values())
    def _reachable(place):
        for real, opened in held.items():
            if place == real or place.startswith(real + os.sep):
                return opened + place[len(real):]
        return place
    for loaded in list(sys.modules.values()):  # (importlib.metadata: a package's submodule)
        if isinstance(getattr(loaded, "__path__", None), list):
            loaded.__path__[:] = [_reachable(p) for p in loaded.__path__]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
if binary is not None:
    os.execv(f"/proc/self/fd/{binary}", ["ruff", *sys.argv[1:]])
if module == "pylint":
    import pylint.lint.message_state_handler as pragmas
    pragmas.OPTION_PO = re.compile(r"(?!)")  # pylint has no option to ignore its pragmas
    if settings["tool_imports_off"]:
        from astroid import MANAGER, nodes
        from astroid.brain import brain_gi
        MANAGER.unregister_transform(nodes.Call, brain_gi._register_require_version,
                                     brain_gi._looks_like_require_version)
        MANAGER._failed_import_hooks.remove(brain_gi._import_gi_module)
        brain_gi.register = lambda manager: None  # (a cache clear registers every brain)
sys.argv[0] = module
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def _default_user() -> str | None:
    return UNPRIVILEGED_USER if os.geteuid() == 0 else None


@dataclasses.dataclass(frozen=True)
class Confinement:
    """How a tool runs: `user` to drop to (only root can; None: props' own user), whether
    the finder refuses the example's modules (`guard_imports`) and whether the tools'
    importing features are off (`tool_imports_off`). All on by default; the tests turn
    some off to show that each layer holds alone."""

    user: str | None = dataclasses.field(default_factory=_default_user)
    guard_imports: bool = True
    tool_imports_off: bool = True

    def command(self, python: str, module_arguments: list[str]) -> list[str]:
        return [python, "-I", "-c", GUARD,
                json.dumps(dataclasses.asdict(self)),
                *module_arguments]


def inside(root: Path, files: list[str]) -> list[str]:
    """The files (relative to `root`) that are regular files inside the example: a symbolic
    link leading out of it is never read, and a path that is not plainly relative
    (`../x.py`, `/x.py`, `a/../b.py`) is never read nor copied."""
    real_root = os.path.realpath(root) + os.sep
    return [f for f in files if os.path.normpath(f) == f and not os.path.isabs(f)
            and not f.startswith(os.pardir + os.sep)
            and os.path.realpath(root / f).startswith(real_root) and (root / f).is_file()]


@contextmanager
def readable_copy(root: Path, files: list[str], confinement: Confinement) -> Iterator[Path]:
    """The folder the tool reads: the example itself when the tool runs as props' own
    user, else a copy of `files` that root and the tool's group can read, removed after."""
    if confinement.user is None:
        yield root
        return
    group = pwd.getpwnam(confinement.user).pw_gid
    # /tmp, not TMPDIR: a folder the user can reach (root's TMPDIR may be under /root).
    folder = Path(tempfile.mkdtemp(prefix="props-baseline-", dir="/tmp"))
    try:
        os.chown(folder, 0, group)
        for rel in files:
            target = folder / rel
            for parent in reversed(target.relative_to(folder).parents[:-1]):
                made = folder / parent
                if not made.exists():
                    made.mkdir(mode=0o700)
                    os.chown(made, 0, group)
                    made.chmod(0o750)
            target.write_bytes((root / rel).read_bytes())
            os.chown(target, 0, group)
            target.chmod(0o640)
        folder.chmod(0o750)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
