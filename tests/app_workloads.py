"""Workloads written the way open-source bcolz applications use bcolz (tests/test_apps.py runs them).

Each workload is plain bcolz code against a module ``bz`` (the real ``bcolz``, or ``blzarr`` imported
as bcolz), split where the applications split it: a *writer* (often another process), sometimes an
*appender* that opens what the writer left with mode 'a', and a *reader* that returns everything it
read as a dict, so that a run can be compared value for value (dtype and Python type included) with
the same workload run on bcolz alone.  The patterns follow zipline's daily and minute bar
writers/readers and other bcolz users: columns opened by path, attributes read on their own,
``'x' in table.attrs.attrs``, ``ctable(rootdir=..., mode='r')``, ``iter``/``iterblocks``/
``whereblocks``, pandas round trips, ``fromdataframe(...).copy(rootdir=...)``, ``walk``.

Run as a script, it performs one step in a fresh process:
``python app_workloads.py MODULE WORKLOAD STEP ROOT`` (MODULE: bcolz, blzarr or blzarr-bcolz, the
latter blzarr with ``defaults.format = 'bcolz'``).
"""

import glob
import importlib
import json
import os
import sys

import numpy as np

MINUTES_PER_DAY = 390
NASSETS = 5


def load(name):
    """The module a step runs with: 'bcolz', 'blzarr' (default layout) or 'blzarr-bcolz'."""
    if name == "blzarr-bcolz":
        mod = importlib.import_module("blzarr")
        mod.defaults.format = "bcolz"
        return mod
    return importlib.import_module(name)


def _bars(sid, ndays, first_day=0):
    """Deterministic OHLCV rows of one asset, as zipline's writer receives them."""
    import pandas as pd
    k = np.arange(ndays, dtype="f8")
    base = 10.0 + sid + (k % 17) * 0.125
    days = pd.date_range("2015-01-02", periods=first_day + ndays, freq="D")[first_day:]
    return pd.DataFrame({"open": base, "high": base + 1.5, "low": base - 0.5, "close": base + 0.25,
                         "volume": (1000 * sid + k * 3).astype("f8")}, index=days)


# ----------------------------------------------------------------------------------------------------
# zipline's daily bars: per-asset ctables from DataFrames, in-memory uint32 carrays grown by appending
# those columns, one on-disk ctable with the row index of each asset in its attributes; the reader
# opens it with mode 'r', checks attrs through `.attrs.attrs`, slices columns per asset.

DAILY_COLUMNS = ("open", "high", "low", "close", "volume", "day", "id")


def daily_write(bz, root):
    columns = {k: bz.carray(np.array([], dtype="uint32")) for k in DAILY_COLUMNS}
    first_row, last_row, offsets = {}, {}, {}
    total = 0
    earliest = None
    for sid in range(1, NASSETS + 1):
        raw = _bars(sid, 40 + 37 * sid, first_day=3 * sid)
        processed = (raw[["open", "high", "low", "close"]] * 1000).round().astype("uint32")
        dates = raw.index.values.astype("datetime64[s]")
        processed["day"] = dates.astype("uint32")
        processed["volume"] = raw.volume.astype("uint32")
        table = bz.ctable.fromdataframe(processed)
        nrows = len(table)
        for name in columns:
            if name == "id":
                columns["id"].append(np.full((nrows,), sid, dtype="uint32"))
            else:
                columns[name].append(table[name])
        day0 = table["day"][0]
        earliest = day0 if earliest is None else min(earliest, day0)
        first_row[str(sid)] = total
        last_row[str(sid)] = total + nrows - 1
        offsets[str(sid)] = 3 * sid
        total += nrows
    full = bz.ctable(columns=[columns[c] for c in DAILY_COLUMNS], names=DAILY_COLUMNS, rootdir=root,
                     mode="w")
    full.attrs["first_trading_day"] = int(earliest)
    full.attrs["first_row"] = first_row
    full.attrs["last_row"] = last_row
    full.attrs["calendar_offset"] = offsets
    full.attrs["calendar_name"] = "XNYS"
    full.attrs["start_session_ns"] = 1420156800000000000
    full.flush()


def daily_read(bz, root):
    table = bz.ctable(rootdir=root, mode="r")
    out = {"names": list(table.names), "len": len(table), "has_calendar": "calendar" in table.attrs.attrs,
           "has_name": "calendar_name" in table.attrs.attrs, "calendar_name": table.attrs["calendar_name"],
           "first_trading_day": table.attrs["first_trading_day"],
           "dtypes": [str(table[c].dtype) for c in table.names], "dtype": str(table.dtype)}
    first = {int(k): v for k, v in table.attrs["first_row"].items()}
    last = {int(k): v for k, v in table.attrs["last_row"].items()}
    for name in ("open", "close", "volume", "day"):
        col = table[name]
        raw = table[name][:]
        out[f"all.{name}"] = raw
        for sid in sorted(first):
            out[f"{name}.{sid}"] = col[first[sid]:last[sid] + 1]
            out[f"{name}.{sid}.via_all"] = raw[first[sid]:last[sid] + 1]
        volumes = table["volume"]
        out[f"spot.{name}"] = [col[i] for i in (0, 7, last[2], len(col) - 1)]
        out[f"spot_types.{name}"] = [type(volumes[i]).__name__ for i in (0, 3)]
    out["row"] = tuple(table[5])
    out["rows"] = table[3:9]
    out["fancy"] = table["close"][[0, 5, 9, 200]]
    out["fancy_rows"] = table[[1, 4, 4, 30]]
    out["mask"] = table["close"][table["id"][:] == 3]
    out["mask_rows"] = table[table["id"][:] == 4]
    out["attrs"] = dict(table.attrs.attrs)
    out["attrs_iter"] = sorted(k for k, _ in table.attrs)
    out["nbytes"] = table.nbytes
    return out


# ----------------------------------------------------------------------------------------------------
# zipline's minute bars: one ctable per asset under 00/00/<sid>.bcolz, created empty with
# expectedlen, its length read from close/meta/sizes, zero-padded and appended by reopening with mode
# 'a' (in another process), attributes set per asset; the reader opens single columns by path and
# reads attributes with bcolz.attrs.attrs; truncation by bcolz.open(rootdir=...) and resize.

MINUTE_COLUMNS = ["open", "high", "low", "close", "volume"]


def _sidpath(root, sid):
    padded = format(sid, "06")
    return os.path.join(root, padded[0:2], padded[2:4], f"{padded}.bcolz")


def _ensure_ctable(bz, root, sid):
    path = _sidpath(root, sid)
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        empty = np.empty(0, np.uint32)
        table = bz.ctable(rootdir=path, columns=[empty] * 5, names=MINUTE_COLUMNS,
                          expectedlen=MINUTES_PER_DAY * 252 * 15, mode="w")
        table.flush()
        return table
    return bz.ctable(rootdir=path, mode="a")


def _ndays_written(root, sid):
    sizes = os.path.join(_sidpath(root, sid), "close", "meta", "sizes")
    if not os.path.exists(sizes):
        return 0
    with open(sizes) as f:
        return json.loads(f.read())["shape"][0] // MINUTES_PER_DAY


def _write_minutes(bz, root, sid, first_day, ndays):
    table = _ensure_ctable(bz, root, sid)
    pad = first_day - _ndays_written(root, sid)
    if pad > 0:
        table.append([np.zeros(pad * MINUTES_PER_DAY, np.uint32)] * 5)
        table.flush()
        table = _ensure_ctable(bz, root, sid)
    n = ndays * MINUTES_PER_DAY
    k = np.arange(n, dtype=np.uint32) + first_day * MINUTES_PER_DAY
    cols = [(k * 7 + sid) % 100_000 + 1000, (k * 7 + sid) % 100_000 + 1500, (k * 7 + sid) % 100_000 + 900,
            (k * 7 + sid) % 100_000 + 1200, np.where(k % 11 == 0, 0, k % 5000 + sid).astype(np.uint32)]
    table.append([c.astype(np.uint32) for c in cols])
    table.flush()
    return table


def minute_write(bz, root):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "metadata.json"), "w") as f:
        json.dump({"minutes_per_day": MINUTES_PER_DAY}, f)
    for sid in range(1, 4):
        table = _write_minutes(bz, root, sid, first_day=sid - 1, ndays=2)
        for key, value in {"start_day": sid - 1, "ohlc_ratio": 1000, "note": "first"}.items():
            table.attrs[key] = value


def minute_append(bz, root):
    """Another process resumes: pads each asset to a later day and appends, then truncates one."""
    for sid in range(1, 4):
        table = _write_minutes(bz, root, sid, first_day=5, ndays=1 + sid)
        table.attrs["note"] = "appended"
        table.attrs["days"] = [5, 5 + sid]
    for path in sorted(glob.glob(os.path.join(root, "*", "*", "*.bcolz"))):
        table = bz.open(rootdir=path)
        if table.len > 7 * MINUTES_PER_DAY:
            table.resize(7 * MINUTES_PER_DAY)
            table.flush()


def minute_read(bz, root):
    out = {}
    for sid in range(1, 4):
        path = _sidpath(root, sid)
        attrs = bz.attrs.attrs(path, "r")
        out[f"attrs.{sid}"] = {k: attrs[k] for k in ("start_day", "ohlc_ratio", "note", "days")}
        try:
            attrs["missing"]
        except KeyError:
            out[f"missing.{sid}"] = "KeyError"
        out[f"ndays.{sid}"] = _ndays_written(root, sid)
        for field in MINUTE_COLUMNS:
            c = bz.carray(rootdir=os.path.join(path, field), mode="r")
            out[f"{field}.{sid}"] = c[:]
            out[f"{field}.{sid}.window"] = c[MINUTES_PER_DAY * 5 + 10:MINUTES_PER_DAY * 6 + 3]
            out[f"{field}.{sid}.value"] = c[MINUTES_PER_DAY * 5 + 17]
            out[f"{field}.{sid}.len"] = len(c)
        table = bz.ctable(rootdir=path, mode="r")
        out[f"size.{sid}"] = (table.size, table.len, len(table), table.shape)
    return out


# ----------------------------------------------------------------------------------------------------
# pandas round trips: fromdataframe(...).copy(rootdir=...) then attributes through bcolz.attrs.attrs
# (mode 'wb', as applications pass), fromdataframe straight to disk, todataframe of the whole table and
# of some columns; attributes holding dates as strings and epoch numbers.

def _frame():
    import pandas as pd
    n = 3000
    return pd.DataFrame({
        # object strings, as pandas before 3 made them (bcolz turns them into a Unicode column)
        "symbol": pd.Series([f"S{i % 37:03d}" for i in range(n)], dtype=object),
        "price": np.arange(n) * 0.01 + 5,
        "qty": (np.arange(n) % 50).astype("i4"),
        # bcolz cannot store datetime64 columns on disk (its meta/storage JSON fails on the default
        # value), so applications store epoch numbers
        "when": pd.date_range("2016-03-01", periods=n, freq="min").values.view("i8"),
        "flag": np.arange(n) % 3 == 0,
    })


def pandas_write(bz, root):
    import pandas as pd
    os.makedirs(root)
    df = _frame()
    ct = bz.ctable.fromdataframe(df)
    ct.copy(rootdir=os.path.join(root, "futures.bcolz"))
    attrs = bz.attrs.attrs(os.path.join(root, "futures.bcolz"), "wb")
    attrs["line_map"] = {"S001": [1, 38], "S002": [2, 39]}
    attrs["created"] = "2016-03-01T09:30:00"
    attrs["epoch_s"] = 1456824600
    direct = bz.ctable.fromdataframe(df[["price", "qty", "when"]], rootdir=os.path.join(root, "direct"),
                                     mode="w")
    direct.attrs["first_day"] = str(pd.Timestamp(df["when"].iloc[0]).date())
    direct.flush()


def pandas_read(bz, root):
    t = bz.ctable(rootdir=os.path.join(root, "futures.bcolz"), mode="r")
    df = t.todataframe()
    d = bz.open(os.path.join(root, "direct"), mode="r")
    out = {"names": list(t.names), "dtypes": {c: str(df[c].dtype) for c in df.columns},
           "columns": list(df.columns), "index": df.index.values,
           "attrs": bz.attrs.attrs(os.path.join(root, "futures.bcolz"), "r").attrs,
           "direct.attrs": d.attrs.getall(), "direct.cols": d.todataframe(columns=["qty", "when"])}
    for c in df.columns:
        out[f"df.{c}"] = df[c].to_numpy()
    out["symbol.dtype"] = str(t["symbol"].dtype)
    out["direct"] = d.todataframe()
    out["direct.when"] = d["when"][:]
    dated = _frame()
    dated["when"] = dated["when"].values.view("M8[ns]")
    out["memory"] = bz.ctable.fromdataframe(dated).todataframe()
    out["memory.dtype"] = str(bz.ctable.fromdataframe(dated).dtype)
    return out


# ----------------------------------------------------------------------------------------------------
# iteration and queries, as reading applications do them: iter(start, stop, step, limit, skip) and
# outcols, iterblocks over tables and columns, whereblocks, where, fetchwhere, eval, walk.

def iterate_write(bz, root):
    os.makedirs(root)
    n = 5000
    bz.ctable(columns=[np.arange(n, dtype="i8"), np.arange(n) * 0.5, (np.arange(n) % 7).astype("i2")],
              names=["a", "b", "g"], rootdir=os.path.join(root, "t"), mode="w", chunklen=512).flush()
    bz.carray(np.arange(n) % 97 * 1.5, rootdir=os.path.join(root, "c"), mode="w", chunklen=300).flush()
    bz.fromiter((i * 3 for i in range(777)), dtype="i4", count=777, rootdir=os.path.join(root, "fi"),
                mode="w").flush()
    bz.zeros(100, dtype="f4", rootdir=os.path.join(root, "z"), mode="w").flush()
    bz.ones(10, dtype="i1", rootdir=os.path.join(root, "o"), mode="w").flush()
    bz.fill(20, 7, dtype="u2", rootdir=os.path.join(root, "fl"), mode="w").flush()
    bz.arange(0, 50, 3, rootdir=os.path.join(root, "ar"), mode="w").flush()


def iterate_read(bz, root):
    t = bz.ctable(rootdir=os.path.join(root, "t"), mode="r")
    c = bz.open(os.path.join(root, "c"), mode="r")
    out = {}
    out["iter"] = [tuple(r) for r in t.iter(10, 2000, 7, limit=50, skip=3)]
    out["iter.outcols"] = [tuple(r) for r in t.iter(0, 100, 3, outcols=["g", "a"])]
    out["iter.fields"] = [r._fields for r in t.iter(0, 2, outcols="b, a")]
    out["iter.first"] = tuple(next(iter(t)))
    out["citer"] = list(c.iter(5, 900, 4, limit=30, skip=2))
    out["citer.iter"] = list(c.iter(100, 200).iter(1, 50, 5))
    out["citer.types"] = sorted({type(x).__name__ for x in c.iter(0, 10)})
    out["iterblocks.t"] = [b for b in bz.iterblocks(t, blen=700, start=33, stop=4000)]
    out["iterblocks.c"] = [b for b in bz.iterblocks(c, blen=256)]
    out["iterblocks.col"] = [b for b in bz.iterblocks(t["b"], blen=1000, start=10)]
    out["whereblocks"] = [b for b in t.whereblocks("(a > 100) & (g == 3)", blen=300, outcols=["a", "b"])]
    out["whereblocks.limit"] = [b for b in t.whereblocks("g < 2", blen=100, limit=250, skip=10)]
    out["where"] = [tuple(r) for r in t.where("(b > 30) & (g != 1)", outcols=["a", "g"], limit=40, skip=5)]
    out["where.nrow"] = [tuple(r) for r in t.where("a < 12", outcols=["nrow__", "b"])]
    out["cwhere"] = list(c.where(c[:] > 140, limit=20))
    fw = t.fetchwhere("(a % 13 == 0) & (g > 2)", outcols=["g", "b"])
    out["fetchwhere"] = (type(fw).__name__, fw[:], [fw[n].chunklen for n in fw.names])
    out["eval"] = t.eval("a * 2 + b")[:]
    out["bz.eval"] = bz.eval("c * 2 + 1", user_dict={"c": c})[:]
    out["sum"] = (c.sum(), t["a"].sum(), t["g"].sum())
    for name in ("fi", "z", "o", "fl", "ar"):
        x = bz.open(os.path.join(root, name), mode="r")
        out[name] = x[:]
        out[name + ".params"] = (x.chunklen, x.cparams.clevel, x.cparams.shuffle, x.cparams.cname)
    out["walk"] = sorted((os.path.relpath(o.rootdir, root), type(o).__name__)
                         for o in bz.walk(root, mode="r"))
    out["walk.ctables"] = sorted(os.path.relpath(o.rootdir, root) for o in bz.walk(root, classname="ctable"))
    out["strided"] = t[100:200:10]
    out["cstrided"] = c[7:900:13]
    return out


WORKLOADS = {
    "daily_bars": {"write": daily_write, "read": daily_read},
    "minute_bars": {"write": minute_write, "append": minute_append, "read": minute_read},
    "pandas": {"write": pandas_write, "read": pandas_read},
    "iterate": {"write": iterate_write, "read": iterate_read},
}


if __name__ == "__main__":
    module, workload, step, root = sys.argv[1:5]
    WORKLOADS[workload][step](load(module), root)
