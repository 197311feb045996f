"""Django's date formats for English (the site's LANGUAGE_CODE), from the one definition in
core/dates.py, so a date printed without a filter reads like every other one."""
from __future__ import annotations

from core.dates import CLOCK, DAY, MOMENT

DATE_FORMAT = DAY
SHORT_DATE_FORMAT = DAY
DATETIME_FORMAT = MOMENT
SHORT_DATETIME_FORMAT = MOMENT
TIME_FORMAT = CLOCK
