"""zipline's own bcolz bar writers and readers driven in one process, with bcolz or blzarr as bcolz.

Run by tests/test_zipline_bars.py with an interpreter where zipline-reloaded is installed:

    python zipline_bars.py bcolz|blzarr STEP [STEP...]

where each STEP is ``write:DIR`` (daily bars in one writer call, minute bars in two), ``append:DIR``
(the minute writer reopened: two more sessions for every asset, a ``write_cols`` day, then
``truncate`` back), ``read:DIR:OUT`` (every field through ``load_raw_arrays`` of both readers, the
daily reader also reading everything at once, ``get_value``, ``get_last_traded_dt``, the sid
attributes, saved to OUT as .npz) or ``format:NAME`` (blzarr's ``defaults.format`` for what follows).
"""

import os
import sys

WHICH = sys.argv[1]
if WHICH == "blzarr":
    import blzarr
    sys.modules["bcolz"] = blzarr  # before zipline's modules (and its Cython extension) import it

import bcolz  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from zipline.assets import Equity  # noqa: E402
from zipline.assets.exchange_info import ExchangeInfo  # noqa: E402
from zipline.data.bcolz_daily_bars import BcolzDailyBarReader, BcolzDailyBarWriter  # noqa: E402
from zipline.data.bcolz_minute_bars import BcolzMinuteBarReader, BcolzMinuteBarWriter  # noqa: E402
from zipline.utils.calendar_utils import get_calendar  # noqa: E402

assert bcolz.__name__ == {"blzarr": "blzarr", "bcolz": "bcolz"}[WHICH], bcolz.__name__

CAL = get_calendar("XNYS")
START, END = pd.Timestamp("2024-01-02"), pd.Timestamp("2024-03-28")
SESSIONS = CAL.sessions_in_range(START, END)
SIDS = [1, 2, 7]
FIELDS = ["open", "high", "low", "close", "volume"]


def _prices(seed, n, step):
    rng = np.random.default_rng(seed)
    base = 10 + seed % 50 + np.cumsum(rng.uniform(-step, step, n))
    return base, rng.integers(1, 10_000, n).astype(float)


def daily_frame(sid, sessions):
    base, volume = _prices(sid, len(sessions), 0.5)
    return pd.DataFrame({"open": base.round(3), "high": (base + 1).round(3), "low": (base - 1).round(3),
                         "close": (base + 0.25).round(3), "volume": volume}, index=sessions)


def minute_frame(sid, sessions):
    minutes = CAL.sessions_minutes(sessions[0], sessions[-1])
    base, volume = _prices(100 + sid + len(minutes), len(minutes), 0.05)
    df = pd.DataFrame({"open": base.round(3), "high": (base + .1).round(3), "low": (base - .1).round(3),
                       "close": base.round(3), "volume": volume}, index=minutes)
    df.iloc[::17] = np.nan  # minutes without a trade: the writer stores zeros, readers give NaN
    df.loc[df.index[::17], "volume"] = 0
    return df


def write(root):
    os.makedirs(root, exist_ok=True)
    # each asset from a later first session, so first_row, last_row and calendar_offset all differ
    daily = [(sid, daily_frame(sid, SESSIONS[i:])) for i, sid in enumerate(SIDS)]
    BcolzDailyBarWriter(os.path.join(root, "daily.bcolz"), CAL, START, END).write(daily)
    minute_root = os.path.join(root, "minute")
    os.makedirs(minute_root, exist_ok=True)
    writer = BcolzMinuteBarWriter(minute_root, CAL, START, END, 390)
    for sid in SIDS[:2]:
        writer.write_sid(sid, minute_frame(sid, SESSIONS[0:3]))
    # a second write: appends for sids 1 and 2 (after one more session) and creates sid 7, padded
    writer.write([(sid, minute_frame(sid, SESSIONS[4:6])) for sid in SIDS])
    writer.set_sid_attrs(1, factor=3)


def append(root):
    writer = BcolzMinuteBarWriter.open(os.path.join(root, "minute"))
    for sid in SIDS:
        writer.write_sid(sid, minute_frame(sid, SESSIONS[6:8]))
    minutes = CAL.sessions_minutes(SESSIONS[8], SESSIONS[8])
    writer.write_cols(2, minutes, {f: np.full(len(minutes), 77.0 if f == "volume" else 33.5) for f in FIELDS})
    writer.truncate(SESSIONS[7])  # drops the write_cols session again


def _value(reader, sid, dt, field):
    try:
        return reader.get_value(sid, dt, field)
    except Exception as e:  # zipline's NoData* errors: which one is part of the result
        return {"NoDataBeforeDate": -1.0, "NoDataOnDate": -2.0, "NoDataAfterDate": -3.0}[type(e).__name__]


def read(root, out):
    res = {}
    path = os.path.join(root, "daily.bcolz")
    daily = BcolzDailyBarReader(path)
    for f, a in zip(FIELDS, daily.load_raw_arrays(FIELDS, SESSIONS[2], SESSIONS[-3], SIDS)):
        res["daily_" + f] = a
    res["daily_value"] = np.array([_value(daily, sid, SESSIONS[k], f)
                                   for sid in SIDS for k in (0, 1, 5, 40) for f in FIELDS])
    res["daily_last_traded"] = np.array([daily.get_last_traded_dt(sid, SESSIONS[10]).value for sid in SIDS])
    res["daily_first_day"] = np.array([daily.first_trading_day.value])
    res["daily_sessions"] = daily.sessions.values.astype("i8")
    # a reader over the table object rather than its path, reading columns whole
    whole = BcolzDailyBarReader(bcolz.ctable(rootdir=path, mode="r"), read_all_threshold=0)
    for f, a in zip(FIELDS, whole.load_raw_arrays(FIELDS, SESSIONS[0], SESSIONS[-1], SIDS)):
        res["daily_whole_" + f] = a

    minute = BcolzMinuteBarReader(os.path.join(root, "minute"))
    minutes = CAL.sessions_minutes(SESSIONS[0], SESSIONS[7])
    for f, a in zip(FIELDS, minute.load_raw_arrays(FIELDS, minutes[5], minutes[-9], SIDS)):
        res["minute_" + f] = a
    res["minute_value"] = np.array([_value(minute, sid, minutes[k], f) for sid in SIDS
                                    for k in (0, 17, 400, 1000, len(minutes) - 1) for f in FIELDS])
    assets = [Equity(sid, ExchangeInfo("NYSE", "NYSE", "US"), start_date=START, end_date=END) for sid in SIDS]
    res["minute_last_traded"] = np.array([minute.get_last_traded_dt(a, minutes[-1]).value for a in assets])
    res["minute_last_available"] = np.array([minute.last_available_dt.value])
    res["minute_sid_attr"] = np.array([minute.get_sid_attr(1, "factor")])
    np.savez(out, **res)


if __name__ == "__main__":
    for step in sys.argv[2:]:
        name, _, rest = step.partition(":")
        if name == "write":
            write(rest)
        elif name == "append":
            append(rest)
        elif name == "read":
            read(*rest.split(":"))
        elif name == "format":
            bcolz.defaults.format = rest
        else:
            raise SystemExit(f"zipline_bars.py: unknown step {step!r}")
