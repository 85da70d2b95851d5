"""Files shipped inside the package: the canned SQL in sql/ and the report templates in templates/.

Both live at the top of the repository (the product's layout) and are symlinked into the package, so
an editable install and the wheel read them the same way, through importlib.resources.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

from gpuaudit.errors import GpuauditError


def sql_dir() -> Traversable:
    return files("gpuaudit") / "sql"


def templates_dir() -> Traversable:
    return files("gpuaudit") / "templates"


def sql_names() -> list[str]:
    return sorted(p.name.removesuffix(".sql") for p in sql_dir().iterdir() if p.name.endswith(".sql"))


def load_sql(name: str) -> str:
    """The text of sql/NAME.sql (NAME with or without the .sql suffix)."""
    name = name.removesuffix(".sql")
    path = sql_dir() / f"{name}.sql"
    if not path.is_file():
        raise GpuauditError(f"no canned query named {name!r}; known: {', '.join(sql_names())}")
    return path.read_text(encoding="utf-8")
