"""The sandbox's rate limiter (both modes, fake clock) and its seeded fault draws."""

from __future__ import annotations

import pytest

from skuferry.errors import UsageError
from skuferry.sandbox.faults import FaultPicker, Faults
from skuferry.sandbox.limits import Decision, RateLimiter, TierLimit, min_elapsed
from tests.fakes import FakeClock


def limiter(
    clock: FakeClock, *, mode: str = "window", per_key: int = 2, per_workspace: int = 3
) -> RateLimiter:
    limits = {"write": TierLimit(per_key=per_key, per_workspace=per_workspace)}
    return RateLimiter(limits, mode=mode, clock=clock)  # type: ignore[arg-type]


def write(rl: RateLimiter, key: str = "a", workspace: str = "ws") -> Decision:
    return rl.check(key=key, workspace=workspace, tier="write")


# -- window mode -------------------------------------------------------------------


def test_window_admits_n_per_key_then_refuses_until_the_window_ends() -> None:
    clock = FakeClock()
    rl = limiter(clock)
    assert write(rl).allowed
    assert write(rl).allowed
    refused = write(rl)
    assert refused == Decision(allowed=False, retry_after=60, scope="key")
    clock.now = 1010.5
    assert write(rl).retry_after == 50  # ceil(49.5)
    clock.now = 1059.9
    assert write(rl).retry_after == 1  # 0.1 s left still says 1, never 0
    clock.now = 1060.0
    assert write(rl).allowed  # a new window


def test_windows_are_aligned_to_the_epoch_not_to_the_first_request() -> None:
    clock = FakeClock(now=100.0)
    rl = limiter(clock)  # epoch 100
    clock.now = 159.0
    assert write(rl).allowed
    assert write(rl).allowed
    assert write(rl).retry_after == 1
    clock.now = 160.0
    assert write(rl).allowed


def test_window_workspace_cap_spans_keys() -> None:
    clock = FakeClock()
    rl = limiter(clock, per_key=2, per_workspace=3)
    assert write(rl, "a").allowed
    assert write(rl, "a").allowed
    assert write(rl, "b").allowed
    refused = write(rl, "b")
    assert not refused.allowed
    assert refused.scope == "workspace"
    assert write(rl, "c", workspace="other").allowed  # another workspace is untouched


def test_refused_requests_consume_nothing_in_window_mode() -> None:
    clock = FakeClock()
    rl = limiter(clock, per_key=2, per_workspace=3)
    write(rl, "a")
    write(rl, "a")
    for _ in range(5):
        assert not write(rl, "a").allowed  # refused by the key cap: workspace not charged
    assert write(rl, "b").allowed  # the workspace's third slot is still there


def test_tiers_are_independent_and_unknown_tiers_unlimited() -> None:
    clock = FakeClock()
    rl = RateLimiter(
        {"write": TierLimit(1, 1), "read": TierLimit(1, 1)}, mode="window", clock=clock
    )
    assert rl.check(key="a", workspace="w", tier="write").allowed
    assert not rl.check(key="a", workspace="w", tier="write").allowed
    assert rl.check(key="a", workspace="w", tier="read").allowed
    for _ in range(10):
        assert rl.check(key="a", workspace="w", tier="egress").allowed


# -- bucket mode -------------------------------------------------------------------


def test_bucket_starts_full_and_refills_at_n_per_minute() -> None:
    clock = FakeClock()
    rl = limiter(clock, mode="bucket", per_key=6, per_workspace=100)  # 0.1 token/s
    for _ in range(6):
        assert write(rl).allowed
    refused = write(rl)
    assert refused == Decision(allowed=False, retry_after=10, scope="key")
    clock.now += 2.5
    assert write(rl).retry_after == 8  # ceil(7.5)
    clock.now += 7.5
    assert write(rl).allowed
    assert not write(rl).allowed


def test_a_burst_smaller_than_the_minute_refills_at_the_minute_rate() -> None:
    # issue 12: a gateway like nginx limit_req rate=10r/s burst=20, told "600 per minute"
    clock = FakeClock()
    limits = {"write": TierLimit(per_key=600, per_workspace=600)}
    rl = RateLimiter(limits, mode="bucket", clock=clock, burst=20)
    assert sum(write(rl).allowed for _ in range(25)) == 20
    assert write(rl) == Decision(allowed=False, retry_after=1, scope="workspace")
    clock.now += 1.0  # ten tokens back, never more than twenty
    assert sum(write(rl).allowed for _ in range(15)) == 10
    clock.now += 60.0
    assert sum(write(rl).allowed for _ in range(25)) == 20
    assert min_elapsed(1200, 600, "bucket", burst=20) == pytest.approx(118.0)
    with pytest.raises(UsageError):
        RateLimiter(limits, mode="window", clock=clock, burst=20)


def test_bucket_never_holds_more_than_its_capacity() -> None:
    clock = FakeClock()
    rl = limiter(clock, mode="bucket", per_key=2, per_workspace=100)
    clock.now += 3600
    assert write(rl).allowed
    assert write(rl).allowed
    assert not write(rl).allowed


def test_refused_requests_consume_nothing_in_bucket_mode() -> None:
    clock = FakeClock()
    rl = limiter(clock, mode="bucket", per_key=1, per_workspace=100)  # one token per minute
    assert write(rl).allowed
    for step in range(5):
        clock.now += 10
        assert write(rl).retry_after == 60 - 10 * (step + 1)
    clock.now += 10
    assert write(rl).allowed  # refusals did not push the token further away


def test_bucket_workspace_cap_spans_keys_and_names_the_longer_wait() -> None:
    clock = FakeClock()
    rl = limiter(clock, mode="bucket", per_key=2, per_workspace=3)
    write(rl, "a")
    write(rl, "a")
    write(rl, "b")
    refused = write(rl, "a")  # both scopes empty: key refills in 30 s, workspace in 20 s
    assert (refused.scope, refused.retry_after) == ("key", 30)
    refused_b = write(rl, "b")  # key b still has a token: only the workspace refuses
    assert (refused_b.scope, refused_b.retry_after) == ("workspace", 20)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(UsageError):
        RateLimiter({}, mode="leaky", clock=FakeClock())  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        RateLimiter({"write": TierLimit(0, 1)}, mode="window", clock=FakeClock())


def test_min_elapsed_follows_each_mode() -> None:
    assert min_elapsed(0, 60, "window") == 0.0
    assert min_elapsed(60, 60, "window") == 0.0
    assert min_elapsed(61, 60, "window") == 60.0
    assert min_elapsed(180, 60, "window") == 120.0
    assert min_elapsed(60, 60, "bucket") == 0.0
    assert min_elapsed(180, 60, "bucket") == 120.0
    assert min_elapsed(61, 60, "bucket") == 1.0


# -- fault draws -------------------------------------------------------------------


def test_fault_draws_replay_with_the_same_seed() -> None:
    faults = Faults(drop_after_commit=0.3, error_before_commit=0.3)

    def draws(seed: int) -> list[str | None]:
        picker = FaultPicker(faults, seed=seed)
        return [picker.pick(is_write=True, is_product_write=True) for _ in range(50)]

    first = draws(7)
    assert first == draws(7)
    assert {"drop_after_commit", "error_before_commit", None} == set(first)


def test_faults_apply_to_product_writes_only_by_default() -> None:
    picker = FaultPicker(Faults(reset=1.0), seed=1)
    assert picker.pick(is_write=True, is_product_write=True) == "reset"
    assert picker.pick(is_write=True, is_product_write=False) is None
    assert picker.pick(is_write=False, is_product_write=False) is None
    picker.set(Faults(reset=1.0, scope="all"))
    assert picker.pick(is_write=False, is_product_write=False) == "reset"


def test_fault_settings_are_validated() -> None:
    with pytest.raises(UsageError):
        Faults(drop_after_commit=0.7, reset=0.5)
    with pytest.raises(UsageError):
        Faults(reset=-0.1)
    with pytest.raises(UsageError):
        Faults.from_json({"drop": 1})
    assert Faults.from_json({"reset": 1, "garbage": "html"}) == Faults(reset=1.0, garbage="html")
