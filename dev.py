#!/usr/bin/env python3
"""Bootstrap and run skuferry's jobs with nothing but Python 3.11+.

    python3 dev.py demo      # the embedded default: sandbox API + sample catalog
    python3 dev.py test      # the whole test suite
    python3 dev.py test --fast   # the unit layer: no servers, processes or long runs
    python3 dev.py lint      # ruff check, ruff format --check, mypy, import layers, docs --strict
    python3 dev.py docs      # the config reference from the schema, then the site in site/
    python3 dev.py docs --serve  # ... served with live reload at http://127.0.0.1:8000
    python3 dev.py bench     # benchmarks (prints figures; slow)

It creates ``.venv`` beside this file on first use and reinstalls when
pyproject.toml changes; everything else is the venv's own tools.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".skuferry-installed"
FAST = "not integration and not slow and not reliability"  # `dev.py test --fast`


def _python() -> Path:
    return BIN / ("python.exe" if os.name == "nt" else "python")


def ensure_venv() -> None:
    if sys.version_info < (3, 11):
        sys.exit(f"skuferry needs Python 3.11 or newer (this is {sys.version.split()[0]})")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and _python().exists():
        return
    if not _python().exists():
        print("dev.py: creating .venv", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("dev.py: installing skuferry and its dev tools into .venv", file=sys.stderr)
    subprocess.run(
        [str(_python()), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True
    )
    subprocess.run(
        [str(_python()), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[dev]"], check=True
    )
    STAMP.write_text(wanted)


def run(*argv: str, env: dict[str, str] | None = None) -> int:
    return subprocess.run([str(_python()), *argv], cwd=ROOT, env=env, check=False).returncode


def docs_build(*argv: str) -> int:
    """``mkdocs build --strict``: a broken link, anchor or nav entry fails it."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner, not ours
    argv = ("-m", "mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"), *argv)
    return subprocess.run([str(_python()), *argv], cwd=ROOT, env=env, check=False).returncode


def tool(name: str, *argv: str) -> int:
    """Run a console script of the venv that has no ``python -m`` form."""
    exe = BIN / (f"{name}.exe" if os.name == "nt" else name)
    return subprocess.run([str(exe), *argv], cwd=ROOT, check=False).returncode


def main() -> int:
    args = sys.argv[1:] or ["help"]
    job, rest = args[0], args[1:]
    if job in {"help", "-h", "--help"}:
        print(__doc__)
        return 0
    ensure_venv()
    if job == "demo":
        return run("-m", "skuferry", "demo", *rest)
    if job == "test":
        if "--fast" in rest:  # the inner loop: no servers, no processes, no long runs
            rest = [arg for arg in rest if arg != "--fast"]
            env = {**os.environ}
            env.setdefault("SKUFERRY_MACHINE_EXAMPLES", "10")  # the run machine, briefly
            return run("-m", "pytest", "-m", FAST, *rest, env=env)
        return run("-m", "pytest", *rest)
    if job == "lint":
        return (
            run("-m", "ruff", "check", ".")
            or run("-m", "ruff", "format", "--check", ".")
            or run("-m", "mypy")
            or tool("lint-imports")  # the layers contract: [tool.importlinter]
            or docs_build()
        )
    if job == "docs":  # regenerate the reference, then build: docs/reference/config.md is committed
        reference = run("-m", "skuferry.config.reference", "docs/reference/config.md")
        if reference or "--serve" not in rest:
            return reference or docs_build(*rest)
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        rest = [arg for arg in rest if arg != "--serve"]
        serve = [str(_python()), "-m", "mkdocs", "serve", *rest]
        return subprocess.run(serve, cwd=ROOT, env=env, check=False).returncode
    if job == "bench":
        return run("-m", "bench", *rest)
    if job == "skuferry":
        return run("-m", "skuferry", *rest)
    print(f"dev.py: unknown job {job!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
