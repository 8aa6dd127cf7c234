"""Build hook that turns the repository root into the `props` package.

A wheel gets `props/__init__.py` and each top-level folder as `props/<folder>`, so nothing
named `core` lands in site-packages. An editable install gets only a `props/__init__.py` whose
`__path__` is the repository root: `props.core` is `./core`, and edits need no reinstall.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE_FOLDERS = ("core", "projections", "reactors", "schema", "tools")
_DOC = '"""props: evaluate code-review agents on an event-sourced PostgreSQL log."""\n'


class PropsPackageHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root).resolve()
        init = Path(tempfile.mkdtemp(prefix="props-build-")) / "__init__.py"
        if version == "editable":
            init.write_text(_DOC + f"__path__ = [{str(root)!r}]\n")
        else:
            init.write_text(_DOC)
            for folder in PACKAGE_FOLDERS:
                build_data["force_include"][str(root / folder)] = f"props/{folder}"
        build_data["force_include"][str(init)] = "props/__init__.py"
