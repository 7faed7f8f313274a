"""YAML loading that remembers where each key came from.

Error messages for configs and job specs must name the file and the line, so the
loader records the line of every mapping key. Values are plain Python objects;
mappings are :class:`~slurmkit.values.LineDict`, a ``dict`` with a ``lines`` attribute
(``{key: 1-based line}``) and its own ``line``.
"""

from __future__ import annotations

from slurmkit.core import trust
from slurmkit.errors import ConfigError
from slurmkit.values import LineDict

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, List, Optional

#: Limits on any YAML document slurmkit reads (configs, job specs, tables): a spec is a
#: few KiB, so these only stop hostile or broken input before it costs memory or time.
MAX_BYTES = trust.MAX_YAML_BYTES
MAX_DEPTH = 32
#: values visited (aliases count each time they are used: "billion laughs" expansion)
MAX_NODES = 200_000


_NUL_MESSAGE = (
    "contains a NUL character (an escaped \\0): no command line, environment or file name can carry one"
)


class _NulValue(Exception):
    """A NUL in a scalar: raised where the value is built, given its key path on the way out."""

    def __init__(self, line: int, keys: List[str]):
        super().__init__(line)
        self.line, self.keys = line, keys


def _has_nul(value: Any, clean: Optional[set] = None) -> bool:
    """A NUL in ``value`` or in a list inside it (mappings check their own values).
    ``clean`` holds the ids of lists already found clean: an alias used a million
    times ("billion laughs") is walked once."""
    clean = set() if clean is None else clean
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and "\0" in item:
            return True
        if isinstance(item, list) and id(item) not in clean:
            clean.add(id(item))  # the document holds every list, so ids stay unique
            stack.extend(item)
    return False


_YAML: Optional[tuple] = None  # (yaml, LineLoader) once _yaml() ran


def _yaml():
    """PyYAML and the loader class, imported on first use: importing PyYAML is among the
    larger costs of a start (docs/benchmarks.md), which every command would pay although
    most read no YAML (no site config). Kept in a module global (not ``functools.lru_cache``:
    a job start imports no functools)."""
    global _YAML
    if _YAML is not None:
        return _YAML
    import yaml

    class LineLoader(yaml.SafeLoader):
        """SafeLoader (no arbitrary objects) that builds LineDicts."""

    LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    _YAML = (yaml, LineLoader)
    return _YAML


def _construct_mapping(loader, node) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise ConfigError(
                "mapping key is not a scalar",
                line=key_node.start_mark.line + 1,
                path=getattr(loader, "_sk_path", None),
            ) from None
        if key in result:
            raise ConfigError(
                f"duplicate key {key!r}",
                path=getattr(loader, "_sk_path", None),
                line=key_node.start_mark.line + 1,
            )
        clean = loader.__dict__.setdefault("_sk_clean_lists", set())
        if _has_nul(key):
            raise _NulValue(key_node.start_mark.line + 1, [repr(key)])
        try:
            value = loader.construct_object(value_node, deep=True)
        except _NulValue as exc:
            exc.keys.insert(0, str(key))
            raise
        if _has_nul(value, clean):
            raise _NulValue(value_node.start_mark.line + 1, [str(key)])
        result[key] = value
        result.lines[key] = key_node.start_mark.line + 1
    return result


def _check_shape(data: Any, path: str) -> None:
    """Refuse documents nested deeper than ``MAX_DEPTH`` or with more than ``MAX_NODES``
    values once aliases are expanded (the walk stops at the limit, so it is bounded)."""
    count = 0
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ConfigError(
                f"document too large: more than {MAX_NODES} values (aliases expanded)", path=path
            )
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", path=path)
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)


def load_yaml_text(text: str, path: str = "<string>") -> Any:
    """Parse YAML text; syntax errors, oversized, over-deep or NUL-carrying input (a raw NUL
    byte, or ``"\\0"`` escaped in a double-quoted string) become a one-line
    :class:`ConfigError` (exit 2) naming the file, line and key, never a traceback."""
    if len(text) > MAX_BYTES:
        raise ConfigError(f"too large: {len(text)} characters (limit {MAX_BYTES})", path=path)
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise ConfigError("contains a NUL byte", path=path, line=line)
    yaml, line_loader = _yaml()
    try:
        loader = line_loader(text)  # the reader already refuses control characters here
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {' '.join(str(exc).split())}", path=path) from None
    loader._sk_path = path  # type: ignore[attr-defined]
    try:
        data = loader.get_single_data()
        _check_shape(data, path)
        if _has_nul(data, loader.__dict__.get("_sk_clean_lists")):  # a bare string or list
            raise ConfigError(_NUL_MESSAGE, path=path)
        return data
    except _NulValue as exc:
        raise ConfigError(_NUL_MESSAGE, path=path, line=exc.line, key=".".join(exc.keys)) from None
    except RecursionError:
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", path=path) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"invalid YAML: {problem}", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", path=path) from None
    finally:
        loader.dispose()


def load_yaml_file(path: str) -> Any:
    """Read and parse a YAML file; I/O errors become :class:`ConfigError`."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=path) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path=path) from None
    return load_yaml_text(text, path)


def load_trusted_yaml(path: str) -> Any:
    """Read ``path`` only if the one trust rule (:mod:`slurmkit.core.trust`: root's or this
    account's file, in directories nobody else can write) passes, then parse it like any
    YAML here (line numbers, limits).

    Raises :class:`~slurmkit.core.trust.UntrustedFile` (already logged and counted) when
    the rule fails, ``FileNotFoundError`` when the file is missing, and a one-line
    :class:`ConfigError` for any other read error or bad YAML."""
    try:
        raw = trust.read_strict(path)
    except (trust.UntrustedFile, FileNotFoundError):
        raise
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=path) from None
    try:
        return load_yaml_text(raw.decode("utf-8"), path)
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path=path) from None
