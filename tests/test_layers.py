"""The import layering of docs/architecture.md, checked on every import the package makes
(module level and inside functions): layers point down, and only ``backends/cuda`` imports a GPU
library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gpuzarr"

#: module-name prefix -> layer; the longest prefix decides. A module may import its own layer
#: and the layers below it, never one above.
LAYERS: dict[str, int] = {
    "gpuzarr": 100,  # the package's __init__ alone: the public names
    "gpuzarr.__main__": 100,
    "gpuzarr.cli": 100,  # the command line: on top of everything, like __main__
    "gpuzarr.creation": 95,  # zeros, ones, array, *_like: wrappers of api.create and open_array
    "gpuzarr.save_load": 95,  # save, load: wrappers of api.create_array, create_group and open
    "gpuzarr.debug_info": 100,  # a report over everything: versions, the GPU probe, the settings
    "gpuzarr.copying": 95,  # copies between stores, encoding kept or changed (the CLI's copy)
    "gpuzarr.loader": 95,  # crop batches for training: above the facade (uses Array.read_batch)
    "gpuzarr.integrations": 95,  # Dask and xarray on top of the public API
    "gpuzarr.api": 90,
    "gpuzarr.tensorstore.open": 85,  # opens TensorStore specs into Arrays
    "gpuzarr.core": 80,  # the facade: Array, Group, FieldArray
    "gpuzarr.tensorstore": 70,  # pure JSON: specs, schemas, chunk-layout choice
    "gpuzarr.consolidated": 66,  # consolidated metadata, read and kept true above node documents
    "gpuzarr.hierarchy": 65,  # node documents and the mode table, which TensorStore flags use too
    "gpuzarr.attributes": 65,
    "gpuzarr.backends": 60,
    "gpuzarr.layout": 50,
    "gpuzarr.parallel": 50,
    "gpuzarr.plan": 45,
    "gpuzarr.codecs": 40,
    "gpuzarr.store": 35,
    "gpuzarr.tensorstore.kvstore": 30,  # kvstore JSON, which store.make_store parses
    "gpuzarr.store.paths": 25,  # the path rules, which kvstore JSON applies too
    "gpuzarr.store.shown": 25,  # URLs as messages show them, which kvstore JSON's messages use too
    "gpuzarr.metadata": 20,
    "gpuzarr.errors": 0,
    "gpuzarr.config": 0,
    "gpuzarr.futures": 0,  # futures of work on the request pool; config only
    "gpuzarr.buffers": 0,
    "gpuzarr.output_pool": 0,  # host output buffers handed out again; config and buffers only
}

GPU_LIBRARIES = ("cupy", "cupyx", "kvikio", "nvidia", "cuda")
GPU_PACKAGE = "gpuzarr.backends.cuda"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``, nested ones included."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # "from . import config" imports the module gpuzarr.config.
            names = [f"{target}.{a.name}" for a in node.names]
            found += [(node.lineno, n if _is_module(n) else target) for n in names]
    return found


def _is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    root = PACKAGE.parent
    return (root / relative).with_suffix(".py").exists() or (root / relative / "__init__.py").exists()


def _layer(module: str) -> int | None:
    best = None
    for prefix, layer in LAYERS.items():
        covers = module == prefix or (prefix != "gpuzarr" and module.startswith(prefix + "."))
        if covers and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return None if best is None else best[1]


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    assert [m for m in map(_module_name, MODULES) if _layer(m) is None] == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_imports_point_down(path: Path) -> None:
    module = _module_name(path)
    own = _layer(module)
    assert own is not None
    upward = [
        f"line {line}: {target} (layer {_layer(target)} > {own})"
        for line, target in _imports(path)
        if target.startswith("gpuzarr") and (_layer(target) or 0) > own
    ]
    assert upward == [], f"{module} imports upward"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_only_the_cuda_backend_imports_gpu_libraries(path: Path) -> None:
    module = _module_name(path)
    if module == GPU_PACKAGE or module.startswith(GPU_PACKAGE + "."):
        return
    gpu = [f"line {line}: {t}" for line, t in _imports(path) if t.split(".")[0] in GPU_LIBRARIES]
    assert gpu == []


def test_the_check_sees_nested_and_relative_imports() -> None:
    # The CUDA reader imports CuPy-backed code lazily; the select module imports the runtime
    # probe inside a function: both must be visible to the checks above.
    select = dict((t, line) for line, t in _imports(PACKAGE / "backends" / "select.py"))
    assert "gpuzarr.backends.cuda.runtime" in select
    assert _layer("gpuzarr.backends.cuda.reader") == 60 and _layer("gpuzarr.tensorstore.open") == 85
