"""When runs happen: ``[schedule]`` as an APScheduler 3 trigger.

Crontab expressions are translated, not passed through: APScheduler 3 counts
weekdays from Monday = 0, crontab from Sunday = 0 (and 7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skuferry.config.schema import ScheduleSettings
from skuferry.errors import ConfigError

if TYPE_CHECKING:  # imported where used: apscheduler loads asyncio (~40 ms); a sync without
    # a cron schedule never needs it
    from apscheduler.triggers.cron import CronTrigger
    from apscheduler.triggers.interval import IntervalTrigger

DEFAULT_INTERVAL_MINUTES = 15.0

_DOW = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _weekday(token: str) -> int:
    if token.isdigit() and int(token) <= 7:
        return int(token)
    if token.lower() in _DOW:
        return _DOW.index(token.lower())
    raise ValueError(f"bad day of week {token!r}")


def crontab_weekdays(field: str) -> str:
    """A crontab day-of-week field (0 and 7 are Sunday) as APScheduler 3 day names.

    APScheduler 3 counts weekdays from Monday = 0 (its ``from_crontab`` passes the
    numbers through unchanged), so ``1-5`` would mean Tuesday to Saturday there.
    """
    days: list[str] = []
    for part in field.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"bad step in {part!r}")
        if body == "*" and not step_text:
            return "*"
        if body == "*":
            low, high = 0, 6
        elif "-" in body:
            first, last = body.split("-", 1)
            low, high = _weekday(first), _weekday(last)
            if high == 0 and low > 0:  # "fri-sun"
                high = 7
        else:
            low = _weekday(body)
            high = 6 if step_text else low
        if low > high:
            raise ValueError(f"bad range {part!r}")
        days.extend(_DOW[d] for d in range(low, high + 1, step))
    return ",".join(dict.fromkeys(days))


def build_trigger(
    schedule: ScheduleSettings, *, interval_s: float | None = None
) -> IntervalTrigger | CronTrigger:
    """The APScheduler trigger for ``[schedule]``; ``interval_s`` overrides it (tests)."""
    from apscheduler.triggers.interval import IntervalTrigger

    jitter = schedule.jitter_s or None
    if interval_s is not None:
        return IntervalTrigger(seconds=interval_s, jitter=jitter)
    problems = schedule_problems(schedule)  # a model built by hand skipped load_settings
    if problems:
        raise ConfigError(problems)
    if schedule.cron is None:
        return IntervalTrigger(
            minutes=schedule.interval_minutes or DEFAULT_INTERVAL_MINUTES, jitter=jitter
        )
    return cron_trigger(schedule.cron, jitter=jitter)


def schedule_problems(schedule: ScheduleSettings) -> list[str]:
    """The rules of ``[schedule]`` (cron or an interval, a valid crontab), checked once here."""
    if schedule.interval_minutes is not None and schedule.cron is not None:
        return ["at 'schedule': set interval_minutes or cron, not both"]
    if schedule.cron is not None:
        try:
            cron_trigger(schedule.cron)
        except ValueError as exc:
            return [
                "at 'schedule.cron': not a valid 5-field crontab expression "
                f"(minute hour day month weekday): {exc}"
            ]
    return []


def cron_trigger(expression: str, *, jitter: int | None = None) -> CronTrigger:
    """A 5-field crontab expression as a trigger; ValueError says what is wrong."""
    from apscheduler.triggers.cron import CronTrigger

    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields (minute hour day month weekday), got {len(fields)}")
    minute, hour, day, month, weekday = fields
    # Note: like all APScheduler cron triggers, day and day_of_week must both match
    # (classic cron matches either when both are restricted).
    return CronTrigger(
        minute=minute,
        hour=hour,
        day=day,
        month=month,
        day_of_week=crontab_weekdays(weekday),
        jitter=jitter,
    )


def describe_schedule(schedule: ScheduleSettings, *, interval_s: float | None = None) -> str:
    if interval_s is not None:
        return f"every {interval_s:g} s"
    if schedule.cron is not None:
        return f"cron {schedule.cron}"
    return f"every {schedule.interval_minutes or DEFAULT_INTERVAL_MINUTES:g} min"
