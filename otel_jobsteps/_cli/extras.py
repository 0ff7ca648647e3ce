"""How to install a missing extra, said so that it works from an index, a checkout or a wheel."""

from __future__ import annotations

__all__ = ["install_hint"]


def install_hint(extra: str) -> str:
    """The install line for ``extra``: the package is installed from a checkout or a wheel."""
    return (
        f"install the {extra} extra: pip install 'otel_jobsteps[{extra}]' from an index,"
        f" '.[{extra}]' in a checkout, or 'dist/<the wheel>.whl[{extra}]'"
    )
