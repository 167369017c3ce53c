"""Import the user's training function from ``module:function`` or ``path/to/script.py:function``.

The current working directory goes on ``sys.path`` first, so ``examples.digits.train:...``
imports from the repository root locally and from the image's working directory in a pod. Ray
hands the driver's ``sys.path`` to its workers, so they import the same module by reference; a
script file is imported under a private module name and pickled by value instead.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ray import cloudpickle


class EntrypointError(ImportError):
    """The entrypoint cannot be imported; the message names it and says why."""


def _fail(entrypoint: str, reason: str) -> EntrypointError:
    return EntrypointError(f"entrypoint {entrypoint!r}: {reason}")


def _import_script(entrypoint: str, script: str) -> ModuleType:
    path = Path(script)
    if not path.is_absolute():
        path = Path.cwd() / path
    if not path.is_file():
        raise _fail(entrypoint, f"script file {str(path)!r} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"_raytrain_entry_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise _fail(entrypoint, f"{str(path)!r} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise _fail(entrypoint, f"running {path} failed: {type(exc).__name__}: {exc}") from exc
    # Workers cannot import a module that exists only under this private name.
    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    return module


def _import_module(entrypoint: str, name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if missing == name or name.startswith(missing + "."):
            reason = (
                f"module {name!r} not found (looked in {os.getcwd()!r} and the installed "
                "packages); check the module path or the image's working directory"
            )
        else:
            reason = f"importing {name!r} failed: it needs module {missing!r}, not installed"
        raise _fail(entrypoint, reason) from exc
    except Exception as exc:
        raise _fail(entrypoint, f"importing {name!r} raised {type(exc).__name__}: {exc}") from exc


def load_entrypoint(entrypoint: str) -> Callable[..., Any]:
    """Return the function ``entrypoint`` names, or raise EntrypointError."""
    target, sep, attr = entrypoint.rpartition(":")
    if not sep or not target or not attr:
        raise _fail(entrypoint, "expected 'module:function' or 'path/to/script.py:function'")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    if target.endswith(".py") or "/" in target:
        module = _import_script(entrypoint, target)
    else:
        module = _import_module(entrypoint, target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise _fail(entrypoint, f"{module.__name__!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise _fail(entrypoint, f"{attr!r} is a {type(obj).__name__}, not a callable")
    return obj  # type: ignore[no-any-return]


def wrap_loop(
    train_fn: Callable[..., Any], around: Callable[[Callable[[], Any]], Any]
) -> Callable[..., Any]:
    """``train_fn`` run through ``around(run)``, with the same name and arity.

    Ray Train calls a training function with the config or with nothing, by its signature, so
    a wrapper must keep it; ``run()`` calls ``train_fn`` with what the wrapper was given. A
    failure message leaves out the frames of this wrapper and of the known ``around`` functions
    (``raytrain_contract.frames.RUNTIME_FRAMES``), so a new one goes there too.
    """
    name = getattr(train_fn, "__name__", "train_loop")
    if inspect.signature(train_fn).parameters:

        def loop_with_config(config: Any) -> Any:
            return around(functools.partial(train_fn, config))

        loop_with_config.__name__ = name
        return loop_with_config

    def loop() -> Any:
        return around(train_fn)

    loop.__name__ = name
    return loop
