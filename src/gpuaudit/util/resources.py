"""Files shipped inside the package: the canned SQL in sql/ and the report templates in templates/.

Both live at the top of the repository (the product's layout) and are symlinked into the package, so
an editable install and the wheel read them the same way, through importlib.resources.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

from gpuaudit.errors import GpuauditError


def _sql_dir() -> Traversable:
    return files("gpuaudit") / "sql"


def templates_dir() -> Traversable:
    return files("gpuaudit") / "templates"


def _sql_names() -> list[str]:
    return sorted(p.name.removesuffix(".sql") for p in _sql_dir().iterdir() if p.name.endswith(".sql"))


# The analyzer's own stage-1 queries carry this prefix; `gpuaudit sql --list` shows the others (user queries).
_ANALYZER_PREFIX = "analysis_"


def user_queries() -> list[tuple[str, str]]:
    """(name, one-line description) of the canned user queries: sql/*.sql without the analyzer's, the
    description being the first line of each file's leading `-- ` comment."""
    out = []
    for name in _sql_names():
        if name.startswith(_ANALYZER_PREFIX):
            continue
        first = load_sql(name).lstrip().splitlines()[0] if load_sql(name).strip() else ""
        out.append((name, first.removeprefix("--").strip()))
    return out


def load_sql(name: str) -> str:
    """The text of sql/NAME.sql (NAME with or without the .sql suffix)."""
    name = name.removesuffix(".sql")
    path = _sql_dir() / f"{name}.sql"
    if not path.is_file():
        raise GpuauditError(f"no canned query named {name!r}; known: {', '.join(_sql_names())}")
    return path.read_text(encoding="utf-8")
