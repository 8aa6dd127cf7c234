"""A slim Python base image made here, for building the how-to's critic image offline.

The how-to's Dockerfile starts `FROM python:3.12-slim`; no registry can be reached on a test
machine, so its `BASE` argument names this one instead: the host's own interpreter and
standard library (no site-packages, no Debian marker that refuses pip), the shared libraries
they load, pip, and the psycopg wheels the machine's pip finds, served by `/etc/pip.conf` as
an offline index. The Dockerfile's own steps then run unchanged: `pip install psycopg[binary]`
installs from those wheels, as it would from PyPI.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pip

# Not in a slim image: tests, GUIs, the static library to embed Python, compiled caches.
_SKIP = re.compile(r"/(test|tests|idlelib|tkinter|turtledemo|ensurepip|lib2to3|site-packages|"
                   r"dist-packages|__pycache__|config-[^/]*)(/|$)|/EXTERNALLY-MANAGED$|"
                   r"/_test\w*\.cpython|/_tkinter\.")
_LDD = re.compile(r"(/\S+) \(0x")
_GLIBC = {"libc", "libm", "libpthread", "libdl", "librt", "libutil", "libresolv", "libanl",
          "libnss_files", "libnss_dns"}


def _stdlib() -> Iterator[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*")):
        if path.is_file() and not _SKIP.search(path.as_posix()):
            yield path


def _libraries(binaries: list[Path]) -> set[str]:
    """The shared libraries (and the loader) the binaries load, as ldd names them."""
    done = subprocess.run(["ldd", *map(str, binaries)], capture_output=True, text=True,
                          check=False, timeout=120)
    found = set(_LDD.findall(done.stdout))
    # All of glibc, as any Debian image has it: a wheel's own libraries (psycopg's libpq)
    # load its parts the interpreter does not (libpthread, libdl, libresolv).
    libc = next(Path(p).parent for p in found if Path(p).name == "libc.so.6")
    return found | {str(p) for p in libc.glob("lib*.so.*") if p.name.split(".so")[0] in _GLIBC}


def _at(path: str) -> str:
    """Where a host file lies in the image: its folder resolved (/lib -> usr/lib), its name
    kept (a library's soname link), relative to the root."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))[1:]


def _site_packages(python: Path) -> str:
    """Where the interpreter itself (not this virtual environment) installs packages."""
    return subprocess.run([str(python), "-I", "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def rootfs(wheels: Path) -> bytes:
    """The base image's root filesystem as a tar."""
    python = Path(os.path.realpath(sys.executable))
    files = list(_stdlib())
    binaries = [python, *(f for f in files if f.suffix == ".so")]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for d in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{d}"):
                info = tarfile.TarInfo(d)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(f"/{d}")
                tar.addfile(info)
        for d in ("tmp", "etc", "proc", "sys", "dev", "run", "root"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for path in [str(python), *map(str, files), *sorted(_libraries(binaries))]:
            tar.add(os.path.realpath(path), arcname=_at(path), recursive=False)
        for name in ("usr/local/bin/python", "usr/bin/python3"):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, str(python)
            tar.addfile(info)
        tar.add(Path(pip.__file__).parent, arcname=f"{_site_packages(python)[1:]}/pip")
        tar.add(wheels, arcname="wheels")
        for name, text in (("etc/pip.conf", "[global]\nno-index = true\nfind-links = /wheels\n"
                            "disable-pip-version-check = true\n"),
                           ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                            "nobody:x:65534:65534::/tmp:/bin/sh\n")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    return out.getvalue()


def psycopg_wheels(target: Path) -> Path:
    """psycopg[binary]'s wheels for this interpreter, from the machine's own pip index."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary",
                    ":all:", "--dest", str(target), "psycopg[binary]>=3.2,<4"],
                   check=True, timeout=600, capture_output=True)
    return target
