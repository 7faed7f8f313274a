"""Site configuration (``slurmkit.yaml``): location, sections, validation at load.

The file is looked up in this order: an explicit path (``--config``), then
``$SLURMKIT_CONFIG``, then ``/etc/slurmkit/slurmkit.yaml``; with none present the
built-in defaults apply. ``etc/slurmkit.yaml`` in the repository is the annotated
example.

Each top-level section's schema lives next to the code that uses it (for example
``slurmkit.health.config``); this module only knows where to find them, so the
prolog pays only for the schemas it loads. Unknown sections and keys are rejected
with the list of valid ones, and every error names the file, the line and the key
path.
"""

from __future__ import annotations

import os

from slurmkit.core.schema import Field, Section, validate
from slurmkit.core.trust import MAX_YAML_BYTES as MAX_CONFIG_BYTES
from slurmkit.errors import ConfigError
from slurmkit.values import LineDict

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the hooks' path)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

DEFAULT_PATH = "/etc/slurmkit/slurmkit.yaml"
ENV_VAR = "SLURMKIT_CONFIG"

SLURM_SCHEMA = Section(
    {
        "timeout": Field(
            "float", 30.0, "Seconds before any single Slurm command is killed.", min=1, nullable=False
        ),
        "bin_dir": Field(
            "str", None, "Directory holding sbatch, scontrol, ...; default: search PATH, then /usr/bin."
        ),
    },
    "How slurmkit calls the Slurm CLI.",
)

PATHS_SCHEMA = Section(
    {
        "state_dir": Field(
            "str", "/var/lib/slurmkit", "Node-local state: verdict cursors, health log.", nullable=False
        ),
        "shared_dir": Field(
            "str",
            "/var/lib/slurmkit/shared",
            "Shared storage for sweep results read by every node's prolog.",
            nullable=False,
        ),
        "shared_owner": Field(
            "str",
            "root",
            "Account the sweep jobs run as: besides root, the only owner "
            "whose verdict files the prolog believes (see docs/security.md).",
            nullable=False,
        ),
        "metrics_dir": Field(
            "str",
            "/var/lib/prometheus/node-exporter",
            "node_exporter textfile-collector directory for *.prom files.",
            nullable=False,
        ),
        "log_dir": Field(
            "str", "/var/log/slurmkit", "JSON-lines logs (health verdicts, kill audit).", nullable=False
        ),
    },
    "Where slurmkit keeps its files.",
)

#: section name -> "module:attribute" of its schema (a Section Field).
SECTION_SCHEMAS: Dict[str, str] = {
    "submit": "slurmkit.submit.config:SITE_SCHEMA",
    "health": "slurmkit.health.config:SITE_SCHEMA",
    "sweep": "slurmkit.sweep.config:SITE_SCHEMA",
    "report": "slurmkit.report.config:SITE_SCHEMA",
}
BUILTIN_SECTIONS: Dict[str, Field] = {"slurm": SLURM_SCHEMA, "paths": PATHS_SCHEMA}
#: builtin sections first, so errors in the basics are reported before the others
VALID_SECTIONS = sorted(BUILTIN_SECTIONS) + sorted(SECTION_SCHEMAS)


def section_schema(name: str) -> Field:
    if name in BUILTIN_SECTIONS:
        return BUILTIN_SECTIONS[name]
    import importlib  # only when a section is validated: a hook's config comes from the cache

    module, _, attr = SECTION_SCHEMAS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def config_path(explicit: Optional[str] = None) -> Optional[str]:
    """The config file to read, or ``None`` when only defaults apply."""
    if explicit:
        return explicit
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    return DEFAULT_PATH if os.path.exists(DEFAULT_PATH) else None


class SiteConfig:
    """Validated site configuration. Sections are validated lazily on first access,
    but unknown section names are rejected at load."""

    def __init__(self, raw: LineDict, path: Optional[str]):
        self.raw = raw
        self.path = path
        self._cache: Dict[str, Any] = {}

    def section(self, name: str) -> Dict[str, Any]:
        if name not in self._cache:
            if name not in VALID_SECTIONS:
                raise KeyError(name)
            value = self.raw.get(name)
            data = value if value is not None else LineDict()
            if isinstance(data, LineDict) and data.line is None and name in self.raw.lines:
                data.line = self.raw.lines[name]
            self._cache[name] = validate(data, section_schema(name), self.path, name)
        return self._cache[name]

    def validate_all(self) -> "SiteConfig":
        for name in VALID_SECTIONS:
            self.section(name)
        return self

    def __getitem__(self, name: str) -> Dict[str, Any]:
        return self.section(name)


def _load_trusted(path: str) -> Any:
    """Root reads a config only from a root-owned file nobody else can write (the config
    decides what root does on every node; see docs/security.md)."""
    from slurmkit.core import trust
    from slurmkit.core.yamlload import load_trusted_yaml

    try:
        return load_trusted_yaml(path)
    except trust.UntrustedFile as exc:
        raise ConfigError(f"not trusted (root reads only root's files): {exc.why}", path=path) from None
    except FileNotFoundError:
        raise ConfigError("cannot read: No such file or directory", path=path) from None


def _site_config(raw: Any, p: Optional[str]) -> SiteConfig:
    """The top level checked (a mapping of known sections); sections validated on use."""
    if raw is None:
        raw = LineDict()
    if not isinstance(raw, dict):
        raise ConfigError("the top level must be a mapping of sections", path=p, line=1)
    for key in raw:
        if key not in VALID_SECTIONS:
            raise ConfigError(
                f"unknown section {key!r}; valid sections: {', '.join(VALID_SECTIONS)}",
                path=p,
                line=raw.lines.get(key) if isinstance(raw, LineDict) else None,
            )
    return SiteConfig(raw, p)


def load_site_config(path: Optional[str] = None, *, full: bool = False) -> SiteConfig:
    """Load and validate the site config.

    With ``full`` every section is validated now; otherwise only the section names
    are checked here and each section when first used (the prolog touches two).
    """
    p = config_path(path)
    raw: Any = LineDict()
    if p is not None:
        if not os.path.exists(p):
            raise ConfigError("config file not found", path=p)
        from slurmkit.core.yamlload import load_yaml_file  # not at the top: a job start reads no YAML

        raw = _load_trusted(p) if os.geteuid() == 0 else load_yaml_file(p)
    cfg = _site_config(raw, p)
    return cfg.validate_all() if full else cfg


#: The sections a hook (prolog, epilog, HealthCheckProgram) reads.
HOOK_SECTIONS = ("health", "paths", "slurm")


def load_hook_sections(path: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
    """The validated :data:`HOOK_SECTIONS`, from the root-only cache when the config file is
    the one they were derived from (:mod:`slurmkit.core.cache`), so that a job start parses
    no YAML unless the config changed.

    The config file itself is opened under the trust rule every time (its owner, mode and
    directories may change without changing its contents) and its bytes are read for the
    key; only the parsing and validation are skipped. Errors are those of
    :func:`load_site_config`.
    """
    from slurmkit.core import cache, trust

    p = config_path(path)
    if p is None:
        cfg = SiteConfig(LineDict(), None)
        return {name: cfg.section(name) for name in HOOK_SECTIONS}

    def parse_and_validate(content: bytes) -> Dict[str, Dict[str, Any]]:
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError("not UTF-8 text", path=p) from None
        from slurmkit.core.yamlload import load_yaml_text  # only when the config changed

        cfg = _site_config(load_yaml_text(text, p), p)
        return {name: cfg.section(name) for name in HOOK_SECTIONS}

    try:
        # the kind names the sections, so an entry always holds the ones asked for
        sections = cache.load_derived(
            p, "config-" + "-".join(HOOK_SECTIONS), parse_and_validate, MAX_CONFIG_BYTES
        )
    except trust.UntrustedFile as exc:
        raise ConfigError(f"not trusted (root reads only root's files): {exc.why}", path=p) from None
    except FileNotFoundError:
        raise ConfigError("config file not found", path=p) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=p) from None
    return sections


def named_file_problems(cfg: SiteConfig) -> List[str]:
    """Files and directories the config names that cannot be used (``config validate``).

    A typo in such a path would otherwise show only when the file is first needed (the
    Xid table: when the first Xid arrives), so each is opened now. Each problem is one
    line naming the file, the line and the key. (Parsing the files is their owners' job:
    ``slurmkit config validate`` also loads the Xid table through slurmkit.health.checks.xid.)
    """
    problems: List[str] = []

    def where(section: str, *keys: str) -> str:
        line = None
        node: Any = cfg.raw.get(section)
        for k in keys:
            if isinstance(node, LineDict) and k in node:
                line = node.lines.get(k, line)
                node = node[k]
            else:
                break
        prefix = f"{cfg.path}:{line}: " if cfg.path and line else (f"{cfg.path}: " if cfg.path else "")
        return prefix + ".".join((section, *keys))

    def need_file(path: Optional[str], section: str, *keys: str) -> None:
        if not path:
            return
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError as exc:
            problems.append(f"{where(section, *keys)}: {path}: {exc.strerror or exc}")

    def need_dir(path: Optional[str], section: str, *keys: str) -> None:
        if path and not (os.path.isdir(path) and os.access(path, os.R_OK | os.X_OK)):
            problems.append(f"{where(section, *keys)}: {path}: not a readable directory")

    health = cfg.section("health")
    table = health["checks"]["xid"]["table"]
    need_file(table, "health", "checks", "xid", "table")
    submit = cfg.section("submit")
    need_file(submit["template"], "submit", "template")
    need_dir(submit["nccl_profiles_dir"], "submit", "nccl_profiles_dir")
    return problems
