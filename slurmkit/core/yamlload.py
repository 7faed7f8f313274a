"""YAML loading that remembers where each key came from.

Error messages for configs and job specs must name the file and the line, so the
loader records the line of every mapping key. Values are plain Python objects;
mappings are :class:`LineDict`, a ``dict`` with a ``lines`` attribute
(``{key: 1-based line}``) and its own ``line``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import yaml

from slurmkit.errors import ConfigError


class LineDict(dict):
    """A dict that knows the source line of each of its keys."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lines: Dict[Any, int] = {}
        self.line: Optional[int] = None


class _LineLoader(yaml.SafeLoader):
    """SafeLoader (no arbitrary objects) that builds LineDicts."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise ConfigError("mapping key is not a scalar", line=key_node.start_mark.line + 1,
                              path=getattr(loader, "_sk_path", None)) from None
        if key in result:
            raise ConfigError(f"duplicate key {key!r}", path=getattr(loader, "_sk_path", None),
                              line=key_node.start_mark.line + 1)
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = key_node.start_mark.line + 1
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_text(text: str, path: str = "<string>") -> Any:
    """Parse YAML text; syntax errors become a one-line :class:`ConfigError`."""
    loader = _LineLoader(text)
    loader._sk_path = path  # type: ignore[attr-defined]
    try:
        return loader.get_single_data()
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
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=path) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path=path) from None
    return load_yaml_text(text, path)
