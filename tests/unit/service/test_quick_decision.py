"""The quick lane held against the full start: one skip decision (issue 29 item 4).

For generated pairs of (config, environment, key files), a run "before" commits, things
change, and then both decide whether the next plain ``skuferry sync`` may skip:

- the full start: ``load_settings`` (a config that does not load cannot skip), the check
  that the CMS is the one the state mirrors (another key or URL: the run looks the CMS
  up first, issue 37, so it is no plain skip) and the engine's skip decision over the
  source it opens;
- the quick lane: its reading and its record.

Every decision must be the same. Generated: the case of ``SKUFERRY_*`` names, ``$VAR`` and
``${VAR}`` in the file and inside variables' values, the source path written relative,
absolute, through ``$CAT_DIR`` or set by a variable, the mapping changed through the
environment, the API key inline, from the environment, from a key file (relative,
absolute, through ``$KEY_DIR``, systemd's credentials) that is rotated, emptied, removed
or made readable by everyone.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from skuferry.config.load import load_settings
from skuferry.errors import ConfigError
from skuferry.models import RunOptions, RunSummary
from skuferry.service import quick
from skuferry.sources.change_token import RACY_S
from skuferry.sources.dispatch import open_source
from skuferry.state import binding
from skuferry.state.mirror import Mirror
from skuferry.sync import skip

KEY = "sk-decision-1"
EXAMPLES = 150

CASES: dict[str, Callable[[str], str]] = {
    "upper": str.upper,
    "lower": str.lower,
    "title": str.title,
    "mixed": lambda name: "".join(c.lower() if n % 2 else c.upper() for n, c in enumerate(name)),
}


@dataclass(frozen=True)
class World:
    """One side of a pair: what the config file, the environment and the key files say."""

    path: str  # how the source path is written
    cat_dir: str  # "a" or "b": which of two catalogs $CAT_DIR names
    name_column: str  # "file:Name", "file:Title", "env:Name", "env:Title"
    key: str  # where the API key is
    key_file: str  # what became of the key file
    ratio: str | None  # SKUFERRY_SAFETY__MAX_CHANGE_RATIO, or unset
    state: str  # how the state path is written
    case: str  # the case of SKUFERRY_* names
    noise: str  # a variable the config does not read


worlds = st.builds(
    World,
    path=st.sampled_from(
        ["${CAT_DIR}", "$CAT_DIR", "relative", "absolute", "env-nested", "env-plain"]
    ),
    cat_dir=st.sampled_from(["a", "b"]),
    name_column=st.sampled_from(["file:Name", "file:Title", "env:Name", "env:Title"]),
    key=st.sampled_from(["inline", "env", "file-rel", "file-abs", "file-var", "credentials"]),
    key_file=st.sampled_from(["ok", "rotated", "empty", "missing", "loose"]),
    ratio=st.sampled_from([None, "0.5", "0.9"]),
    state=st.sampled_from(["relative", "absolute", "variable"]),
    case=st.sampled_from(sorted(CASES)),
    noise=st.sampled_from(["x", "y"]),
)
FIELDS = list(World.__dataclass_fields__)
PLAIN = World("absolute", "a", "file:Name", "file-abs", "ok", None, "absolute", "upper", "x")


@st.composite
def pairs(draw: st.DrawFn) -> tuple[World, World]:
    before = replace(draw(worlds), key_file="ok")  # a run that loaded, and committed
    other = draw(worlds)
    changed = draw(st.sets(st.sampled_from(FIELDS), max_size=3))
    return before, replace(before, **{name: getattr(other, name) for name in changed})


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two catalogs, old enough for their ``stat()`` to count (made once: a file younger
    than RACY_S is always read)."""
    base = tmp_path_factory.mktemp("decision")
    for folder, price in (("a", "1.00"), ("b", "2.00")):
        (base / folder).mkdir()
        (base / folder / "catalog.csv").write_text(
            f"SKU,Name,Title,Price\nSKU-1,Drill,Drill (2026),{price}\n", encoding="utf-8"
        )
    time.sleep(RACY_S + 0.1)
    return base


def _setup(world: World, root: Path, here: Path) -> tuple[Path, dict[str, str]]:
    """Write the config and the key file of ``world`` in ``here``; its environment."""
    case = CASES[world.case]
    env = {"CAT_DIR": str(root / world.cat_dir), "NOISE": world.noise, "HERE": str(here)}
    catalog = root / world.cat_dir / "catalog.csv"
    path = {
        "${CAT_DIR}": "${CAT_DIR}/catalog.csv",
        "$CAT_DIR": "$CAT_DIR/catalog.csv",
        "relative": f"../../{world.cat_dir}/catalog.csv",
        "absolute": str(catalog),
    }.get(world.path, str(root / "a" / "catalog.csv"))  # the variables below win
    if world.path == "env-nested":
        env[case("SKUFERRY_SOURCE__PATH")] = "${CAT_DIR}/catalog.csv"
    elif world.path == "env-plain":
        env["SKUFERRY_SOURCE_PATH"] = str(catalog)
    where, column = world.name_column.split(":")
    if where == "env":
        env[case("SKUFERRY_MAPPING__FIELDS__NAME")] = column
    if world.ratio is not None:
        env[case("SKUFERRY_SAFETY__MAX_CHANGE_RATIO")] = world.ratio
    keys = here / "keys"
    key_line = {
        "inline": f'api_key = "{KEY}"',
        "env": "",
        "file-rel": 'api_key_file = "keys/api_key"',
        "file-abs": f'api_key_file = "{keys / "api_key"}"',
        "file-var": 'api_key_file = "${KEY_DIR}/api_key"',
        "credentials": "",
    }[world.key]
    if world.key == "env":
        env["SKUFERRY_API_KEY"] = KEY
    elif world.key == "file-var":
        env["KEY_DIR"] = str(keys)
    elif world.key == "credentials":
        env["CREDENTIALS_DIRECTORY"] = str(keys)
    _key_file(keys / "api_key", world.key_file)
    state = {
        "relative": "state/skuferry.db",
        "absolute": str(here / "state" / "skuferry.db"),
        "variable": "${HERE}/state/skuferry.db",
    }[world.state]
    config = here / "skuferry.toml"
    config.write_text(
        f"""
[api]
base_url = "http://127.0.0.1:9"
auth_check_minutes = 0
{key_line}

[source]
type = "csv"
path = "{path}"

[mapping]
key = "sku"
[mapping.fields]
sku = "SKU"
name = "{column if where == "file" else "Name"}"
price = {{ column = "Price", type = "decimal" }}

[state]
path = "{state}"
""",
        encoding="utf-8",
    )
    config.chmod(0o600)
    return config, env


def _key_file(path: Path, fate: str) -> None:
    path.parent.mkdir(exist_ok=True)
    path.unlink(missing_ok=True)
    if fate == "missing":
        return
    path.write_text({"ok": KEY, "rotated": KEY + "-rotated", "empty": ""}.get(fate, KEY) + "\n")
    path.chmod(0o644 if fate == "loose" else 0o600)


def _full_start(config: Path, env: dict[str, str]) -> str:
    """What the full start decides: "fails" (the config does not load), "read" or "skip"."""
    try:
        loaded = load_settings(config, env=env)
    except ConfigError:
        return "fails"
    if not loaded.state.path.is_file():
        return "read"
    mirror = Mirror(loaded.state.path)
    try:
        current = binding.Binding.of(loaded.api.base_url, loaded.api_keys)
        if binding.compare(binding.recorded(mirror), current) is not None:
            return "bind"  # the run looks the CMS up before it may skip (write.workspace)
        found = skip.decide(
            loaded,
            mirror,
            open_source(loaded.source),
            options=RunOptions(),
            full_pull=False,
            pending=lambda: skip.has_pending_work(mirror, skip.pending_states(loaded), None),
        )
    finally:
        mirror.close()
    return "skip" if found.skip else "read"


def _lane(config: Path, env: dict[str, str]) -> str:
    """What the quick lane decides: "skip", or "full start"."""
    found = quick.read(quick.Call(str(config)), env)
    if found is None or found.state_path is None:
        return "full start"
    mirror = Mirror(found.state_path)
    try:
        return "full start" if quick._still_holds(mirror, found) is None else "skip"
    finally:
        mirror.close()


def _commit(config: Path, env: dict[str, str]) -> None:
    """A run that loaded the config and committed: its change token and the lane's record."""
    loaded = load_settings(config, env=env)
    loaded.state.path.parent.mkdir(exist_ok=True)
    mirror = Mirror(loaded.state.path)
    try:
        found = skip.decide(
            loaded,
            mirror,
            open_source(loaded.source),
            options=RunOptions(full=True),
            full_pull=True,
            pending=lambda: False,
        )
        skip.remember(mirror, found.token, RunSummary())
        # the CMS it ran against (write.workspace binds the state at every run's start)
        current = binding.Binding.of(loaded.api.base_url, loaded.api_keys)
        mirror.set_meta(binding.META, current.to_json())
    finally:
        mirror.close()
    prepared = quick.prepare(loaded)
    assert prepared is not None, "a config the lane takes"
    quick.remember(prepared, loaded.state.path)


def test_the_quick_lane_decides_as_the_full_start(root: Path) -> None:
    seen: Counter[str] = Counter()
    numbers = itertools.count()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(pair=pairs())
    # each answer at least once, whatever the draws: unchanged, changed, and a load that fails
    @example(pair=(PLAIN, PLAIN))
    @example(pair=(PLAIN, replace(PLAIN, cat_dir="b")))
    @example(pair=(PLAIN, replace(PLAIN, key_file="missing")))
    def decide(pair: tuple[World, World]) -> None:
        before, after = pair
        here = root / "runs" / str(next(numbers))
        here.mkdir(parents=True)
        _commit(*_setup(before, root, here))
        config, env = _setup(after, root, here)
        lane, full = _lane(config, env), _full_start(config, env)
        seen[f"{full}, lane {lane}"] += 1
        assert (lane == "skip") == (full == "skip"), (before, after, lane, full)

    decide()
    print(dict(seen))  # the counts the report quotes (pytest -s)
    # both answers were asked for: neither side can pass by always saying the same
    assert seen["skip, lane skip"] > 0 and seen["read, lane full start"] > 0, seen
    assert seen["fails, lane full start"] > 0, seen
