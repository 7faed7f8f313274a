"""A small declarative schema for configs and job specs.

Why not pydantic: the node-side install stays light (click, PyYAML, psutil, Jinja2),
and the schema needs three things pydantic makes awkward: errors carrying the YAML
file *and line*, the list of valid keys on an unknown key, and an export to JSON
Schema for editors. A schema is a tree of :class:`Field` objects; :func:`validate`
returns plain dicts with every default filled in.
"""

from __future__ import annotations

from slurmkit.errors import ConfigError
from slurmkit.values import LineDict, Value, is_finite

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

_MISSING = object()


class Field(Value):
    """One key of a schema.

    ``type`` is one of ``str int float number bool list dict section any``.
    ``items`` types list elements or dict values; ``fields`` holds a section's keys.
    ``check`` may return an error message (or ``None``) for values that pass the type.
    """

    type: str
    default: Any
    doc: str
    choices: Optional[Sequence[Any]]
    min: Optional[float]
    max: Optional[float]
    items: Optional[Field]
    fields: Optional[Dict[str, Field]]
    required: bool
    nullable: bool
    check: Optional[Callable[[Any], Optional[str]]]
    examples: List[Any]

    def __init__(
        self,
        type: str,  # the name since the dataclass; the builtin is not used here
        default: Any = None,
        doc: str = "",
        choices: Optional[Sequence[Any]] = None,
        min: Optional[float] = None,
        max: Optional[float] = None,
        items: Optional[Field] = None,
        fields: Optional[Dict[str, Field]] = None,
        required: bool = False,
        nullable: bool = True,
        check: Optional[Callable[[Any], Optional[str]]] = None,
        examples: Optional[List[Any]] = None,
    ) -> None:
        self.type = type
        self.default = default
        self.doc = doc
        self.choices = choices
        self.min = min
        self.max = max
        self.items = items
        self.fields = fields
        self.required = required
        self.nullable = nullable
        self.check = check
        self.examples = [] if examples is None else examples


def Section(fields: Dict[str, Field], doc: str = "") -> Field:  # noqa: N802 (reads like a type)
    return Field("section", fields=fields, doc=doc, nullable=False)


class _Ctx(Value):
    path: Optional[str]
    key: str
    line: Optional[int]

    def __init__(self, path: Optional[str], key: str, line: Optional[int]) -> None:
        self.path = path
        self.key = key
        self.line = line

    def error(self, message: str) -> ConfigError:
        return ConfigError(message, path=self.path, line=self.line, key=self.key or None)

    def child(self, key: Any, container: Any, index: bool = False) -> "_Ctx":
        line = self.line
        if isinstance(container, LineDict):
            line = container.lines.get(key, container.line or line)
        name = f"{self.key}[{key}]" if index else (f"{self.key}.{key}" if self.key else str(key))
        return _Ctx(self.path, name, line)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
        LineDict: "a mapping",
    }.get(type(value), type(value).__name__)


def valid_keys_text(fields: Mapping[str, Field]) -> str:
    return ", ".join(sorted(fields))


def _nonfinite(value: Any, depth: int = 0) -> bool:
    """A NaN or infinity anywhere in ``value`` (YAML writes them ``.nan``, ``.inf``).

    NaN compares false with everything, so a NaN deadline or timeout passes every
    ``min``/``max`` and then disables the limit it stands for: refused everywhere, also
    inside free-form mappings and lists that have no schema of their own."""
    if isinstance(value, float):
        return not is_finite(value)
    if depth < 64 and isinstance(value, dict):
        return any(_nonfinite(v, depth + 1) for v in value.values())
    if depth < 64 and isinstance(value, list):
        return any(_nonfinite(v, depth + 1) for v in value)
    return False


def _validate(value: Any, spec: Field, ctx: _Ctx) -> Any:
    if isinstance(value, float) and _nonfinite(value):
        raise ctx.error(f"must be a finite number, got {value!r}")
    free_form = spec.type == "any" or (spec.type in ("list", "dict") and spec.items is None)
    if free_form and _nonfinite(value):  # nothing below looks inside these
        raise ctx.error("contains NaN or infinity; use finite numbers")
    if value is None:
        if spec.nullable and spec.type != "section":
            return None
        if spec.type == "section":
            value = LineDict()
        else:
            raise ctx.error("must not be null")
    t = spec.type
    if t == "any":
        out = value
    elif t == "str":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ctx.error(f"expected a string, got {_type_name(value)}")
        out = value if isinstance(value, str) else str(value)
    elif t == "bool":
        if not isinstance(value, bool):
            raise ctx.error(f"expected true or false, got {_type_name(value)} {value!r}")
        out = value
    elif t == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(f"expected an integer, got {_type_name(value)} {value!r}")
        out = value
    elif t in ("float", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.error(f"expected a number, got {_type_name(value)} {value!r}")
        out = float(value) if t == "float" else value
    elif t == "list":
        if (
            isinstance(value, (str, int, float))
            and not isinstance(value, bool)
            and spec.items
            and spec.items.type == "str"
        ):
            value = [value]  # a single string where a list of strings is expected
        if not isinstance(value, list):
            raise ctx.error(f"expected a list, got {_type_name(value)}")
        out = [
            (_validate(v, spec.items, ctx.child(i, value, index=True)) if spec.items else v)
            for i, v in enumerate(value)
        ]
    elif t == "dict":
        if not isinstance(value, dict):
            raise ctx.error(f"expected a mapping, got {_type_name(value)}")
        out = {}
        for k, v in value.items():
            c = ctx.child(k, value)
            if not isinstance(k, str):
                raise c.error(f"keys must be strings, got {_type_name(k)}")
            out[k] = _validate(v, spec.items, c) if spec.items else v
    elif t == "section":
        if not isinstance(value, dict):
            raise ctx.error(f"expected a mapping, got {_type_name(value)}")
        out = validate_section(value, spec.fields or {}, ctx)
    else:  # pragma: no cover - schema bug
        raise AssertionError(f"unknown schema type {t}")
    if spec.choices is not None and out not in spec.choices:
        raise ctx.error(f"must be one of {', '.join(map(str, spec.choices))}; got {out!r}")
    if spec.min is not None and isinstance(out, (int, float)) and out < spec.min:
        raise ctx.error(f"must be >= {spec.min:g}, got {out!r}")
    if spec.max is not None and isinstance(out, (int, float)) and out > spec.max:
        raise ctx.error(f"must be <= {spec.max:g}, got {out!r}")
    if spec.check is not None:
        problem = spec.check(out)
        if problem:
            raise ctx.error(problem)
    return out


def validate_section(value: Mapping, fields: Mapping[str, Field], ctx: _Ctx) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key in value:
        if key not in fields:
            c = ctx.child(key, value)
            raise ConfigError(
                f"unknown key {key!r}; valid keys: {valid_keys_text(fields)}",
                path=c.path,
                line=c.line,
                key=ctx.key or None,
            )
    for key, spec in fields.items():
        c = ctx.child(key, value)
        if key in value:
            out[key] = _validate(value[key], spec, c)
        elif spec.required:
            raise ConfigError(
                f"missing required key {key!r}",
                path=ctx.path,
                line=getattr(value, "line", None) or ctx.line,
                key=ctx.key or None,
            )
        elif spec.type == "section":
            out[key] = _validate(LineDict(), spec, c)
        else:
            import copy  # only when validating (a hook's config comes from the cache)

            out[key] = copy.deepcopy(spec.default)
    return out


def validate(data: Any, schema: Field, path: Optional[str] = None, key: str = "") -> Any:
    """Validate ``data`` against ``schema``; raise :class:`ConfigError` on the first problem."""
    line = getattr(data, "line", None)
    return _validate(data, schema, _Ctx(path, key, line))


def defaults(schema: Field) -> Any:
    return validate(LineDict(), schema)


def deep_merge(base: Any, override: Any) -> Any:
    """Merge ``override`` onto ``base``: mappings merge key by key, other values replace.

    Line information of ``override`` is kept, so errors point at the file that set
    the value.
    """
    if isinstance(base, dict) and isinstance(override, dict):
        out = LineDict(base)
        if isinstance(base, LineDict):
            out.lines.update(base.lines)
            out.line = base.line
        for k, v in override.items():
            out[k] = deep_merge(base[k], v) if k in base else v
            if isinstance(override, LineDict) and k in override.lines:
                out.lines[k] = override.lines[k]
        if isinstance(override, LineDict) and override.line:
            out.line = override.line
        return out
    return override


def parse_set_option(item: str) -> Dict[str, Any]:
    """``a.b.c=value`` → ``{"a": {"b": {"c": value}}}``; the value is parsed as YAML.

    So ``--set nodes=4`` gives an int, ``--set env.MSG='hello world'`` a string and
    ``--set exclude=[n1,n2]`` a list.
    """
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE (e.g. nodes=2, requeue.max_retries=3)")
    from slurmkit.core.yamlload import load_yaml_text  # not at the top: a job start reads no YAML

    try:
        value = load_yaml_text(raw, "--set") if raw.strip() else ""
    except ConfigError:
        value = raw  # not YAML: take it verbatim as a string
    out: Dict[str, Any] = {}
    cur = out
    parts = key.strip().split(".")
    if any(not p for p in parts):
        raise ConfigError(f"--set {item!r}: empty component in key {key!r}")
    for p in parts[:-1]:
        cur[p] = {}
        cur = cur[p]
    cur[parts[-1]] = value
    return out


_JSON_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
    "section": "object",
}


def to_json_schema(spec: Field, title: Optional[str] = None) -> Dict[str, Any]:
    """Export a schema as JSON Schema (draft 2020-12) for editor completion."""
    out: Dict[str, Any] = {}
    if spec.type != "any":
        jt: Any = _JSON_TYPES[spec.type]
        out["type"] = [jt, "null"] if spec.nullable and spec.type != "section" else jt
    if spec.doc:
        out["description"] = spec.doc
    if spec.type == "list" and spec.items:
        out["items"] = to_json_schema(spec.items)
        if spec.items.type == "str":
            out["type"] = ["array", "string", "null"] if spec.nullable else ["array", "string"]
    if spec.type == "dict" and spec.items:
        out["additionalProperties"] = to_json_schema(spec.items)
    if spec.type == "section":
        out["properties"] = {k: to_json_schema(f) for k, f in (spec.fields or {}).items()}
        out["additionalProperties"] = False
        req = [k for k, f in (spec.fields or {}).items() if f.required]
        if req:
            out["required"] = req
    if spec.choices is not None:
        out["enum"] = list(spec.choices) + ([None] if spec.nullable and spec.type != "section" else [])
    if spec.min is not None:
        out["minimum"] = spec.min
    if spec.max is not None:
        out["maximum"] = spec.max
    if spec.default is not None and spec.type != "section":
        out["default"] = spec.default
    if spec.examples:
        out["examples"] = spec.examples
    if title:
        out = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **out}
    return out
