"""The ``blzarr`` command line (also ``python -m blzarr``).

    blzarr info ROOT [--json]        what a carray or ctable directory holds
    blzarr ls DIR [--json]           the carrays and ctables below a directory
    blzarr verify ROOT...            check every header, offset, checksum and chunk; exit 1 on damage
    blzarr convert SRC DST --format blz|bcolz [--cname C] [--clevel N] [--shuffle S]
    blzarr bench [OPTIONS]           the benchmark harness (python -m bench in a checkout)

Errors print one line on stderr and exit non-zero (1; 2 for a bad command line).  `main(argv)`
returns the exit status instead of exiting.

Inspecting (info, ls, verify) never unpickles anything, so directories of Python objects are opened
for it without ``allow_pickle``; converting them needs ``--allow-pickle``.
"""

import argparse
import json
import os
import sys

import numpy as np

import blzarr
from blzarr import _superchunk
from blzarr.bench import command as bench_command
from blzarr.storage import intent, replace, tablejournal
from blzarr.storage.locking import LockError, lock_dir
from blzarr.containers.carray.array import (carray, commit_creation, compression_ratio, creation_completed_by_caller,
                                          human_readable_size)
from blzarr.query import chunked_eval as _ce
from blzarr.containers.ctable.table import _committed_rows as committed_rows, _record_prev, check_name, ctable
from blzarr.errors import storage_error
from blzarr.storage.files import ROOTDIRS_FILE, ObjectPath, creation_debris, detect, detect_store, read_json
from blzarr.storage.bytestore import find_objects, is_url, join, occupied, open_bytestore, overlaps

PROG = "blzarr"
CHECKSUM_NAMES = [name for _, (name, _) in sorted(_superchunk.CHECKSUMS.items())]
# a conversion of more uncompressed bytes than this shows progress
PROGRESS_BYTES = 256 * 1024 * 1024
# rows are copied in blocks of about this many uncompressed bytes
COPY_BLOCK_BYTES = 8 * 1024 * 1024
SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2, "0": 0, "1": 1, "2": 2}


class CLIError(Exception):
    """An error to report on one line (exit status 1)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(f"{self.prog}: error: {message} (see '{self.prog} --help')")


class _UsageError(Exception):
    pass


# ---------------------------------------------------------------------------------------- helpers
# --storage-options of the command being run (fsspec options for URLs such as s3://bucket/x)
_remote = {"storage_options": None}


def _kw(path):
    """The keyword arguments that open `path`: its storage options when it is a URL."""
    return {"storage_options": _remote["storage_options"]} if is_url(path) else {}


def _store(path):
    return open_bytestore(path, _remote["storage_options"])


def _exists(path):
    if is_url(path):
        store = _store(path)
        return detect_store(store) is not None or bool(store.list(""))
    return os.path.exists(path)


def _detect(path):
    return detect_store(_store(path)) if is_url(path) else detect(path)


def _open(path, allow_pickle=True):
    path = os.fspath(path)
    if not _exists(path):
        raise CLIError(f"'{path}' does not exist")
    kind = _detect(path)
    if kind is None:
        raise CLIError(f"'{path}' holds neither a carray nor a ctable")
    # opening reads metadata and chunk headers only: nothing is unpickled
    if kind == "ctable":
        return ctable(rootdir=path, mode="r", allow_pickle=allow_pickle, **_kw(path))
    return carray(rootdir=path, mode="r", allow_pickle=allow_pickle, **_kw(path))


def _disk_bytes(path):
    if is_url(path):
        store = _store(path)
        try:
            return int(store.fs.du(store.path, total=True))
        except Exception:
            return 0
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


def _ratio(nbytes, cbytes):
    """The compression ratio nbytes / cbytes (as the repr and ``info`` show it), rounded like them."""
    return round(compression_ratio(nbytes, cbytes), 2) if cbytes else None


def _n(count, word, plural=None):
    """'1 chunk', '2 chunks', '0 rows': a count with its noun in the right number."""
    return f"{count} {word if count == 1 else (plural or word + 's')}"


def _fmt_ratio(r):
    """A ratio as the repr and ``info`` print it: two decimals."""
    return "-" if r is None else f"{r:.2f}"


def _jsonable(v):
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": len(v)}
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _codec(cp):
    names = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}
    return {"cname": cp.cname, "clevel": cp.clevel, "shuffle": names.get(cp.shuffle, cp.shuffle),
            "quantize": cp.quantize}


def carray_info(c):
    """A JSON-able dict describing the carray `c`."""
    atom = c.chunklen * c.atomsize if c.dtype.kind != "O" else None
    d = {"path": c.rootdir, "type": "carray", "format": c.format or "memory", "dtype": str(c.dtype),
         "shape": list(c.shape), "chunklen": c.chunklen, "chunk_bytes": atom, "nchunks": c.nchunks,
         "nleftover": c.nleftover, "codec": _codec(c.cparams), "nbytes": int(c.nbytes),
         "cbytes": int(c.cbytes)}
    if c.rootdir:
        d["disk_bytes"] = _disk_bytes(c.rootdir)
    d["ratio"] = _ratio(d["nbytes"], d["cbytes"])
    layout = c.chunkstore.describe()     # what the layout adds (superchunk files in BLZ)
    if layout:
        k = layout["superchunklen"]
        d["superchunklen"] = k
        d["superchunk_bytes"] = k * atom if isinstance(k, int) and atom else None
        d["files"] = layout["files"]
        d["checksum"] = layout["checksum"]
        d["reserve"] = layout["reserve"]
        d["meta"] = _jsonable(dict(c.meta.items()))
        d["vlmeta"] = _jsonable(dict(c.vlmeta.items()))
    d["attrs"] = _jsonable(c.attrs.getall())
    d["statistics"] = c.stats_state()
    return d


def _stats_text(st):
    if st is None:
        return "none (not kept for this dtype)"
    if not st["chunks"]:
        return "no full chunk yet"
    text = f"min/max/NaN of {st['known']} of {_n(st['chunks'], 'chunk')}"
    if st["known"] < st["chunks"]:
        text += " (the others, missing or stale, are computed at the first query)"
    return text


def ctable_info(t):
    d = {"path": t.rootdir, "type": "ctable", "format": t.format or "memory", "nrows": len(t),
         "ncols": len(t.names), "dtype": str(t.dtype), "nbytes": int(t.nbytes), "cbytes": int(t.cbytes)}
    if t.rootdir:
        d["disk_bytes"] = _disk_bytes(t.rootdir)
    d["ratio"] = _ratio(d["nbytes"], d["cbytes"])
    d["attrs"] = _jsonable(t.attrs.getall())
    cols = []
    for n in t.names:
        ci = carray_info(t.cols[n])
        ci["name"] = n
        cols.append(ci)
    d["columns"] = cols
    return d


def _fmt_value(v):
    if isinstance(v, (dict, list)):
        return json.dumps(v) if v else "-"
    return "-" if v is None else str(v)


def _size(n):
    return "-" if n is None else f"{human_readable_size(n)}" + ("" if n >= 1024 else " B")


def _table(rows, header):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def _codec_text(c):
    return f"{c['cname']}:{c['clevel']}:{c['shuffle']}" + (f" q{c['quantize']}" if c["quantize"] else "")


def _kv(pairs):
    w = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(w)}  {_fmt_value(v)}" for k, v in pairs)


def _stats_short(st):
    return "-" if st is None else f"{st['known']}/{st['chunks']}"


def _partial_note(d):
    """Why a carray shorter than one chunk shows a tiny ratio and more on disk than its data."""
    if d.get("nchunks") == 0 and d.get("nleftover") and d.get("chunk_bytes"):
        return (" (less than one chunk: cbytes counts the partial chunk whole, uncompressed, until it "
                "fills; on disk it is compressed, beside the headers and metadata)")
    return ""


def render_info(d):
    if d["type"] == "carray":
        layout = {"blz": "blz (superchunk files)", "bcolz": "bcolz 1.x (one file a chunk)"}.get(
            d["format"], d["format"])
        pairs = [("path", d["path"]), ("type", "carray"), ("layout", layout), ("dtype", d["dtype"]),
                 ("shape", tuple(d["shape"])),
                 ("chunklen", f"{d['chunklen']} ({_size(d['chunk_bytes'])} a chunk)" if d["chunk_bytes"]
                  else f"{d['chunklen']} (one pickled object a chunk)"),
                 ("chunks", f"{d['nchunks']} full + {_n(d['nleftover'], 'leftover row')}")]
        if d["format"] == "blz":
            per_file = f" ({_size(d['superchunk_bytes'])} a file)" if d["superchunk_bytes"] else ""
            pairs += [("superchunklen", f"{_n(d['superchunklen'], 'chunk')}{per_file}, {_n(d['files'], 'file')}"),
                      ("checksum", d["checksum"]), ("reserve", d["reserve"])]
        pairs += [("codec", _codec_text(d["codec"])), ("nbytes", _size(d["nbytes"])),
                  ("cbytes", _size(d["cbytes"])), ("on disk", _size(d.get("disk_bytes"))),
                  ("ratio", _fmt_ratio(d["ratio"]) + _partial_note(d)),
                  ("statistics", _stats_text(d["statistics"])),
                  ("attrs", d["attrs"])]
        if d["format"] == "blz":
            pairs += [("meta", d["meta"]), ("vlmeta", d["vlmeta"])]
        if "query" in d:
            pairs.append(("query", d["query"]))
        return _kv(pairs)
    pairs = [("path", d["path"]), ("type", "ctable"), ("layout", d["format"]),
             ("rows", d["nrows"]), ("columns", d["ncols"]), ("nbytes", _size(d["nbytes"])),
             ("cbytes", _size(d["cbytes"])), ("on disk", _size(d.get("disk_bytes"))),
             ("ratio", _fmt_ratio(d["ratio"])), ("attrs", d["attrs"])]
    if "query" in d:
        pairs.append(("query", d["query"]))
    rows = []
    for c in d["columns"]:
        sc = c.get("superchunklen")
        rows.append([c["name"], c["dtype"], tuple(c["shape"][1:]) or "", c["chunklen"],
                     "-" if sc is None else sc, _codec_text(c["codec"]), c.get("checksum") or "-",
                     _size(c["nbytes"]), _size(c["cbytes"]), _size(c.get("disk_bytes")),
                     _fmt_ratio(c["ratio"]), _stats_short(c["statistics"])])
    header = ["column", "dtype", "atom", "chunklen", "superchunk", "codec", "checksum", "nbytes",
              "cbytes", "on disk", "ratio", "statistics"]
    return _kv(pairs) + "\n\n" + _table(rows, header)


def _explain(obj, expression):
    """The plan line of `expression` (a ctable's columns, or a carray under any one name) over `obj`."""
    try:
        if isinstance(obj, carray):
            # the one array of a carray's query may have any name: x, or the one its author uses
            _, names = _ce._operand_names(expression)
            free = [n for n in names if n not in _ce._PY_NAMESPACE]
            if len(free) > 1:
                raise CLIError(f"cannot plan the query {expression!r}: a carray's query names one array "
                               f"(x, or any one name), and this one names {', '.join(map(repr, free))}")
            return str(blzarr.explain(expression, user_dict={free[0] if free else "x": obj}))
        return str(obj.explain(expression))
    except (NameError, ValueError, TypeError, SyntaxError) as e:
        raise CLIError(f"cannot plan the query {expression!r}: {e}") from None


# ---------------------------------------------------------------------------------------- commands
def cmd_info(args, out):
    obj = _open(args.root)
    d = carray_info(obj) if isinstance(obj, carray) else ctable_info(obj)
    if args.where:
        d["query"] = _explain(obj, args.where)
    print(json.dumps(d, indent=2) if args.json else render_info(d), file=out)
    return 0


def _objects_below(root):
    """(path, kind) of every carray/ctable at or below `root`, not descending into them."""
    if is_url(root):
        try:
            yield from find_objects(_store(root))
        except OSError as e:
            raise CLIError(f"cannot list '{root}': {e}") from None
        return
    kind = detect(root)
    if kind is not None:
        yield root, kind
        return
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as e:
        raise CLIError(f"cannot list '{root}': {e.strerror or e}") from None
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            yield from _objects_below(e.path)


def cmd_ls(args, out):
    root = args.dir
    if is_url(root):
        root = root.rstrip("/")
        if not _exists(root):
            raise CLIError(f"'{root}' does not exist")
    elif not os.path.isdir(root):
        raise CLIError(f"'{root}' is not a directory")
    rows, records, bad = [], [], 0
    for path, kind in _objects_below(root):
        if is_url(root):
            rel = path[len(root):].lstrip("/") or root.rsplit("/", 1)[-1]
        else:
            rel = os.path.relpath(path, root) if path != root else os.path.basename(os.path.normpath(root))
        try:
            obj = _open(path)
        except Exception as e:  # one damaged entry must not hide the others
            bad += 1
            records.append({"path": rel, "type": kind, "error": _message(e)})
            rows.append([rel, kind, "?", "?", "?", "?", "?", "?", f"DAMAGED: {_message(e)}"])
            continue
        if isinstance(obj, carray):
            shape, dtype = list(obj.shape), str(obj.dtype)
        else:
            shape, dtype = [len(obj), len(obj.names)], _n(len(obj.names), "column")
        nb, cb, disk = int(obj.nbytes), int(obj.cbytes), _disk_bytes(path)
        records.append({"path": rel, "type": kind, "format": obj.format, "shape": shape, "dtype": dtype,
                        "nbytes": nb, "cbytes": cb, "disk_bytes": disk, "ratio": _ratio(nb, cb)})
        rows.append([rel, kind, obj.format, tuple(shape), dtype, _size(nb), _size(cb), _size(disk),
                     _fmt_ratio(_ratio(nb, cb))])
    if args.json:
        print(json.dumps(records, indent=2), file=out)
    elif rows:
        print(_table(rows, ["path", "type", "layout", "shape", "dtype", "nbytes", "cbytes", "on disk",
                            "ratio"]),
              file=out)
    else:
        print(f"no carray or ctable below '{root}'", file=out)
    return 1 if bad else 0


def verify_carray(path):
    """Check one carray directory completely; return a summary line, raise on damage."""
    c = carray(rootdir=path, mode="r", allow_pickle=True, **_kw(path))   # metadata, layout, leftover chunk
    summary = c.verify()    # BLZ: headers, metadata, offsets, checksums; bcolz: every chunk's structure
    for i in range(c.nchunks):
        try:
            c.chunks[i].decompress()   # every chunk decoded (the bytes of objects are not unpickled)
        except Exception as e:
            raise type(e)(f"chunk {i} of '{path}': {_message(e)}") from None
    c.free_cachemem()
    notes = []
    if c.format == "bcolz":
        extra = c.chunkstore.stray_files(c.nchunks + (1 if c.nleftover else 0))
        if extra:
            notes.append(f"{_n(len(extra), 'stray chunk file')} beyond the data ({extra[0]}...): "
                         "ignored by readers")
        what = f"{_n(c.nchunks, 'chunk')} + {_n(c.nleftover, 'leftover row')} decoded"
    else:
        partial = " (the last one partial)" if c.nleftover and summary["chunks"] > c.nchunks else ""
        what = (f"{_n(summary['chunks'], 'chunk')}{partial} in {_n(summary['files'], 'file')}, "
                f"{summary['checksum']} checksums verified, all decoded")
    return f"carray, {c.format}, {c.dtype}, shape {c.shape}: {what}", notes


def verify_ctable(path):
    """Check a ctable directory: its column list, every column completely, their lengths."""
    where = ObjectPath(_store(path), ROOTDIRS_FILE) if is_url(path) else os.path.join(path, ROOTDIRS_FILE)
    meta = read_json(where, "ctable column list")
    if not isinstance(meta, dict) or not isinstance(meta.get("names"), list):
        raise CLIError(f"'{where}' must hold a JSON object with a 'names' list")
    notes = []
    # an interrupted rewrite of several columns on object storage: the columns are their aside copies
    aside = tablejournal.aside_columns(meta, str(where)) if is_url(path) else {}
    if aside:
        notes.append(f"an interrupted rewrite of the columns {sorted(aside)} left a journal: their copies as "
                     "before it are what readers read, and the next writer restores them")
    for n in meta["names"]:
        try:
            n = check_name(n)
            _, nn = verify_carray(join(path, aside.get(n, n)))
        except Exception as e:
            raise CLIError(f"column {n!r}: {_message(e)}") from None
        notes += [f"column {n!r}: {x}" for x in nn]
    t = ctable(rootdir=path, mode="r", allow_pickle=True, **_kw(path))   # equal lengths, attributes
    cols = {n: carray(rootdir=join(path, aside.get(n, n)), mode="r", allow_pickle=True, **_kw(path))
            for n in t.names}
    lengths = {n: len(c) for n, c in cols.items()}
    rows, short = committed_rows(lengths, _record_prev(cols[t.names[-1]]) if cols else None)
    if short:
        raise CLIError(f"the columns {short} hold fewer rows than the last column ({lengths}): rows "
                       "are missing (blzarr.salvage copies what is readable)")
    longer = [n for n, v in lengths.items() if v > rows]
    if longer:
        notes.append(f"the columns {longer} hold rows past the table's {rows} (an interrupted write): "
                     "the next writer drops them")
    if not is_url(path):
        notes += [f"an interrupted operation on {n!r} left an intent record or a hidden leftover: the "
                  "next writer completes or removes it" for n in intent.pending(path)]
    return f"ctable, {t.format}, {_n(len(t), 'row')}, {_n(len(t.names), 'column')} verified", notes


def cmd_verify(args, out):
    targets, problems = {}, []
    for root in args.roots:
        if not _exists(root):
            problems.append(f"'{root}' does not exist")
            continue
        found = list(_objects_below(root)) if is_url(root) or os.path.isdir(root) else []
        if not found and is_url(root) and creation_debris(_store(root)):
            # the state before a creation that was interrupted: nothing stored, nothing damaged
            print(f"EMPTY    {root}: nothing is stored there but the objects of an interrupted creation "
                  "(the next writer with mode 'w' removes them)", file=out)
            continue
        if not found:
            problems.append(f"'{root}' holds no carray or ctable")
        targets.update((path, kind) for path, kind in found if path not in targets)
    if not targets:
        if not problems:
            return 0
        raise CLIError("; ".join(problems))
    damaged = 0
    for path, kind in targets.items():
        try:
            read, moved = path, []
            if is_url(path):
                st, kind, rec = replace.resolve(_store(path), kind)
                if rec is not None:
                    read = st.root
                    moved = [f"an interrupted replacement left the new {kind} complete at '{read}': readers read "
                             "it there, and the next writer puts it in place"]
            if kind == "carray":
                line, notes = verify_carray(read)
            else:
                line, notes = verify_ctable(read)
            notes = moved + notes
        except Exception as e:
            damaged += 1
            print(f"DAMAGED  {path}: {_message(e)}", file=out)
            for first, last, why in getattr(e, "damaged", None) or []:
                if len(e.damaged) > 1:      # every damaged range, one a line
                    print(f"  chunks {first}-{last}: {why}", file=out)
            continue
        print(f"OK       {path}: {line}", file=out)
        for note in notes:
            print(f"  note: {note}", file=out)
    n = len(targets)
    summary = f"{_n(n, 'object')} verified: {n - damaged} OK" + (f", {damaged} damaged" if damaged else "")
    print(summary, file=out)
    if damaged or problems:
        raise CLIError("; ".join(problems + ([f"{damaged} of {_n(n, 'object')} damaged"] if damaged else [])))
    return 0


class _Progress:
    """tqdm when installed, else a plain line every 10%; nothing for short work."""

    def __init__(self, total, enabled, label):
        self.total, self.done, self.bar, self.enabled, self.label = total, 0, None, enabled, label
        self.next_pct = 10
        if not enabled or total <= 0:
            self.enabled = False
            return
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            self.bar = tqdm(total=total, unit="B", unit_scale=True, desc=label, file=sys.stderr)

    def update(self, n):
        if not self.enabled:
            return
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        pct = self.done * 100 // self.total
        while pct >= self.next_pct:
            print(f"{self.label}: {self.next_pct}%", file=sys.stderr, flush=True)
            self.next_pct += 10

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _cparams_for(args, src_cp):
    kw = src_cp.to_dict()
    if args.cname is not None:
        kw["cname"] = args.cname
    if args.clevel is not None:
        kw["clevel"] = args.clevel
    if args.shuffle is not None:
        kw["shuffle"] = SHUFFLES[args.shuffle]
    try:
        return blzarr.cparams(**kw)
    except (ValueError, TypeError) as e:
        raise CLIError(f"bad compression parameters: {_message(e)}") from None


def _blz_opts(args, src):
    opts = {}
    if args.checksum is not None:
        opts["checksum"] = None if args.checksum == "none" else args.checksum
    elif src.format == "blz":
        opts["checksum"] = src.chunkstore.describe()["checksum"]
    if args.superchunklen is not None:
        opts["superchunklen"] = args.superchunklen
    if src.format == "blz" and len(src.meta):
        opts["meta"] = dict(src.meta.items())
    return opts


def _copy_rows(src_cols, append, nrows, atombytes, progress):
    # blocks of whole source chunks: every chunk is decompressed once
    cl = max(src_cols[0].chunklen, 1) if src_cols else 1
    blen = max(1, COPY_BLOCK_BYTES // max(atombytes, 1) // cl) * cl
    for s in range(0, nrows, blen):
        e = min(s + blen, nrows)
        append([c[s:e] for c in src_cols])
        progress.update((e - s) * atombytes)


def _convert_carray(src, dst, fmt, args, progress):
    cp = _cparams_for(args, src.cparams)
    kw = dict(cparams=cp, chunklen=args.chunklen or src.chunklen, expectedlen=len(src), format=fmt)
    if src.dtype.kind != "O":
        kw["dflt"] = src.dflt[()]
    if fmt == "blz":
        kw.update(_blz_opts(args, src))
    elif args.checksum is not None or args.superchunklen is not None:
        raise CLIError("--checksum and --superchunklen need --format blz")
    # (at a URL, committed once filled and given its attributes: an interrupt leaves nothing there)
    with creation_completed_by_caller(dst):
        out = carray(np.empty((0,) + src.shape[1:], dtype=src.dtype), rootdir=dst, mode="w", **kw, **_kw(dst))
    _copy_rows([src], lambda parts: out.append(parts[0]), len(src), src.atomsize or 8, progress)
    out.flush()
    for k, v in src.attrs:
        out.attrs[k] = v
    if src.format == "blz" and fmt == "blz":
        for k, v in src.vlmeta.items():
            out.vlmeta[k] = v
    commit_creation(out)
    return out


def _convert_ctable(src, dst, fmt, args, progress):
    if args.checksum is not None or args.superchunklen is not None:
        raise CLIError("--checksum and --superchunklen are not supported for ctables")
    def column(n):
        c = src.cols[n]
        kw = dict(cparams=_cparams_for(args, c.cparams), chunklen=args.chunklen or c.chunklen)
        if c.dtype.kind != "O":
            kw["dflt"] = c.dflt[()]
        return carray(np.empty((0,) + c.shape[1:], dtype=c.dtype), **kw), kw
    # each column keeps its own chunk length: the constructor gives every column of carrays the one
    # it is passed (or, as bcolz, the one their length chooses), so the others are added one by one
    first, kw = column(src.names[0])
    out = ctable([first], src.names[:1], rootdir=dst, mode="w", format=fmt, auto_flush=False,
                 chunklen=kw["chunklen"], **_kw(dst))
    for n in src.names[1:]:
        col, kw = column(n)
        out.addcol(col, n, chunklen=kw["chunklen"])
    atombytes = sum(src.cols[n].atomsize or 8 for n in src.names)
    _copy_rows([src.cols[n] for n in src.names], out.append, len(src), atombytes, progress)
    out.flush()
    for k, v in src.attrs:
        out.attrs[k] = v
    for n in src.names:
        for k, v in src.cols[n].attrs:
            out.cols[n].attrs[k] = v
    return out


def cmd_convert(args, out):
    src_path, dst = os.fspath(args.src), os.fspath(args.dst)
    if not _exists(src_path):
        raise CLIError(f"source '{src_path}' does not exist")
    kind = _detect(src_path)
    if kind is None:
        raise CLIError(f"source '{src_path}' holds neither a carray nor a ctable")
    if overlaps(dst, src_path):
        raise CLIError(f"destination '{dst}' overlaps the source '{src_path}'")
    # (at a URL, objects of a creation that never committed are nothing: they are replaced)
    if (occupied(dst, _remote["storage_options"]) if is_url(dst) else os.path.lexists(dst)) and not args.overwrite:
        raise CLIError(f"destination '{dst}' already exists (pass --overwrite to replace it)")
    parent = None if is_url(dst) else os.path.dirname(os.path.abspath(dst))
    if parent is not None and not os.path.isdir(parent):
        raise CLIError(f"the directory of the destination, '{parent}', does not exist")
    try:
        src = (ctable if kind == "ctable" else carray)(rootdir=src_path, mode="r",
                                                     allow_pickle=args.allow_pickle, **_kw(src_path))
    except blzarr.PickleNotAllowedError:
        raise CLIError(f"'{src_path}' holds pickled Python objects: converting them unpickles them, "
                       "which can run code; pass --allow-pickle if you trust the data") from None
    fmt = args.format or src.format
    if parent is None:
        # object storage has no rename: the copy is built aside and switched in (blzarr.storage.replace)
        return _convert_to_url(src, src_path, dst, kind, fmt, args, out)
    # DST's writer lock, held until the copy replaced it: never replace what another process writes
    dst_lock = None
    if os.path.isdir(dst) and not os.path.islink(dst):
        try:
            dst_lock = lock_dir(dst)
        except LockError as e:
            raise CLIError(f"cannot replace '{dst}': {_message(e)}") from None
    try:
        # the copy is written beside DST, then swapped in (blzarr.storage.intent): an interrupt leaves DST as it
        # was, or the complete copy
        tmp = intent.stage_path(dst)
        show = args.progress if args.progress is not None else src.nbytes > PROGRESS_BYTES
        progress = _Progress(int(src.nbytes), show, f"convert {os.path.basename(src_path)}")
        report = None
        try:
            if args.salvage:
                # everything readable is copied; what is not is reported below
                report = blzarr.salvage(src_path, tmp, format=fmt)
            else:
                res = (_convert_ctable if kind == "ctable" else _convert_carray)(src, tmp, fmt, args, progress)
                res.close()
                del res
            try:
                intent.publish(tmp, dst)
            except OSError as e:
                err = storage_error(e, f"cannot put the converted copy at '{dst}'")
                if intent.committed(e):
                    err.blzarr_committed = True
                raise err from e
        except BaseException as e:
            intent.abandon(tmp, e)
            raise
        finally:
            progress.close()
    finally:
        if dst_lock is not None:
            dst_lock.release()
    _print_converted(src, src_path, dst, kind, fmt, args, out, "on disk")
    if report is not None:
        for first, end, col, why in report["lost"]:
            print(f"LOST rows {first}-{end - 1}{f' of column {col!r}' if col else ''}: {why}", file=out)
        print(f"salvaged: {_n(report['rows'] - report['lost_rows'], 'row')} copied, "
              f"{_n(report['lost_rows'], 'row')} lost (written as the default value)", file=out)
        return 1 if report["lost"] else 0
    return 0


def _print_converted(src, src_path, dst, kind, fmt, args, out, where):
    """The line saying what convert wrote, read back from the reopened destination."""
    new = _open(dst, allow_pickle=args.allow_pickle)
    nb, cb, disk = int(new.nbytes), int(new.cbytes), _disk_bytes(dst)
    print(f"converted {kind} '{src_path}' ({src.format}) -> '{dst}' ({fmt}): {_n(len(new), 'row')}, "
          f"{_size(nb)} -> {_size(cb)} compressed (ratio {_fmt_ratio(_ratio(nb, cb))}), {_size(disk)} {where}",
          file=out)


def _convert_to_url(src, src_path, dst, kind, fmt, args, out):
    show = args.progress if args.progress is not None else src.nbytes > PROGRESS_BYTES
    progress = _Progress(int(src.nbytes), show, f"convert {src_path.rstrip('/').rsplit('/', 1)[-1]}")
    targets = []

    def make(url):
        targets.append(url)
        res = (_convert_ctable if kind == "ctable" else _convert_carray)(src, url, fmt, args, progress)
        res.flush()
        return res
    try:
        # what is at DST is replaced by one switch once the copy is complete (blzarr.storage.replace)
        store = _store(dst)
        replace.build(store.root, store, make, lambda: None)
    except BaseException:
        if targets == [store.root]:     # a new dataset written in place: its objects go
            try:
                store.remove_all()
            except Exception:
                pass
        raise
    finally:
        progress.close()
    _print_converted(src, src_path, dst, kind, fmt, args, out, "stored")
    return 0


def cmd_bench(argv, out):
    """``blzarr bench ARGS``: the benchmark harness (blzarr.bench), with the options of ``python -m bench``."""
    try:
        return int(bench_command.main(list(argv), prog=f"{PROG} bench") or 0)
    except SystemExit as e:   # --help, or a bad option (argparse exits 2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)


# ---------------------------------------------------------------------------------------- main
def _message(e):
    if isinstance(e, KeyError) and e.args:
        return str(e.args[0])
    text = str(e) or type(e).__name__
    return text.splitlines()[0] if text.strip() else type(e).__name__


def _storage_arg(s):
    s.add_argument("--storage-options", metavar="JSON", type=_json_object,
                   help="fsspec options for URL arguments (s3://..., http(s)://...), a JSON object, "
                        "e.g. '{\"anon\": true}'; default: $BLZARR_STORAGE_OPTIONS")


def _json_object(text):
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return obj


def _int_in(lo, hi=None):
    """An argparse type: an integer from `lo` to `hi` (a bad one is a bad command line, exit 2)."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{v} is not in {lo}-{hi}" if hi is not None else f"{v} < {lo}")
        return v
    return parse


def build_parser():
    """The argparse parser of the command line: one subcommand (info, ls, verify, convert, bench) each."""
    p = _Parser(prog=PROG, description="Inspect, check and convert blzarr/bcolz carrays and ctables.")
    p.add_argument("--version", action="version", version=f"{PROG} {blzarr.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    s = sub.add_parser("info", help="layout, dtype, shape, chunking, codec, ratio, attrs and metalayers")
    s.add_argument("root", metavar="ROOT", help="a carray or ctable directory (or URL)")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _storage_arg(s)
    s.add_argument("--where", metavar="EXPR",
                   help="also tell what the query EXPR reads (its columns by name; a carray under any "
                        "one name, e.g. x): "
                        "blocks skipped, taken whole and scanned, from the per-chunk statistics")
    s.set_defaults(func=cmd_info)
    s = sub.add_parser("ls", help="the carrays and ctables below a directory")
    s.add_argument("dir", metavar="DIR", help="a directory (or URL): every carray and ctable below it")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _storage_arg(s)
    s.set_defaults(func=cmd_ls)
    s = sub.add_parser("verify", help="check every header, offset, checksum and chunk (exit 1 on damage)",
                       description="Check a carray or ctable (or every one below a directory): metadata, "
                                   "and every chunk decoded; in the BLZ layout also every superchunk header, "
                                   "offsets table and chunk checksum.  The bcolz layout has no checksums: "
                                   "damage that still decodes cannot be seen there.  Exit status 1 when any "
                                   "is damaged (or a ROOT is missing), and the summary names how many.")
    s.add_argument("roots", metavar="ROOT", nargs="+",
                   help="carray or ctable directories (or URLs), or directories of them: every one found "
                        "is verified, then a summary; exit 1 if any is damaged or missing")
    _storage_arg(s)
    s.set_defaults(func=cmd_verify)
    s = sub.add_parser("convert", help="copy a carray or ctable chunk by chunk into another layout/codec")
    s.add_argument("src", metavar="SRC", help="the carray or ctable to copy (a directory or URL)")
    s.add_argument("dst", metavar="DST", help="where the copy goes (must not exist, unless --overwrite)")
    s.add_argument("--format", choices=("blz", "bcolz"), help="layout of DST (default: the source's)")
    s.add_argument("--cname", choices=blzarr.blosc_compressor_list(), metavar="CNAME",
                   help="codec: " + ", ".join(blzarr.blosc_compressor_list()))
    s.add_argument("--clevel", type=_int_in(0, 9), help="compression level 0-9")
    s.add_argument("--shuffle", choices=sorted(SHUFFLES), help="shuffle filter")
    s.add_argument("--chunklen", type=_int_in(1), help="rows per chunk (default: the source's)")
    s.add_argument("--checksum", choices=CHECKSUM_NAMES, metavar="CHECKSUM",
                   help="BLZ: checksum of each chunk: " + ", ".join(CHECKSUM_NAMES))
    s.add_argument("--superchunklen", type=_int_in(1), help="BLZ: chunks per superchunk file")
    s.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    s.add_argument("--allow-pickle", action="store_true",
                   help="allow converting data of Python objects (unpickling can run code)")
    s.add_argument("--salvage", action="store_true",
                   help="copy everything readable of a damaged SRC (unreadable chunks become the default "
                        "value) and list the rows lost; exits 1 when some were")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="always show progress (default: only for long work)")
    g.add_argument("--no-progress", dest="progress", action="store_false")
    _storage_arg(s)
    s.set_defaults(func=cmd_convert)
    sub.add_parser("bench", add_help=False,
                   help="time blzarr against bcolz, blosc2, zarr and NumPy (python -m bench in a checkout; "
                        "`blzarr bench --help` for its options, --quick for a one-minute run)")
    return p


def main(argv=None, out=None):
    """main(argv=None, out=None)

    Run the ``blzarr`` command line and return its exit status (the console script and
    ``python -m blzarr`` exit with it).

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name (default: ``sys.argv[1:]``), e.g.
        ``["info", "data.blz", "--json"]``.
    out : file, optional
        Where the results go (default: ``sys.stdout``); errors always go to ``sys.stderr``, one
        line each.

    Returns
    -------
    int
        0 on success, 1 on an error or on damage found by ``verify``, 2 for a bad command line,
        130 when interrupted.

    Examples
    --------
    >>> import numpy as np, blzarr, shutil
    >>> from blzarr.cli import main
    >>> a = blzarr.arange(1000, rootdir="cli_example/a", mode="w", chunklen=100)
    >>> t = blzarr.ctable([np.arange(3)], names=["x"], rootdir="cli_example/t", mode="w", format="bcolz")
    >>> main(["ls", "cli_example"])
    path  type    layout  shape    dtype     nbytes   cbytes    on disk ...
    ----  ------  ------  -------  --------  -------  --------  ...
    a     carray  blz     (1000,)  int64     7.81 KB  ...
    t     ctable  bcolz   ...
    0
    >>> main(["verify", "cli_example/a"])
    OK       cli_example/a: carray, blz, int64, shape (1000,): 10 chunks in 1 file, crc32 checksums verified, all decoded
    1 object verified: 1 OK
    0
    >>> main(["convert", "cli_example/a", "cli_example/b", "--format", "bcolz", "--cname", "zlib"])
    converted carray 'cli_example/a' (blz) -> 'cli_example/b' (bcolz): 1000 rows, 7.81 KB -> ... compressed (ratio ...), ... on disk
    0
    >>> blzarr.open("cli_example/b").cparams.cname
    'zlib'
    >>> shutil.rmtree("cli_example")
    """
    out = out or sys.stdout
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:   # every option after it is the harness's own (blzarr bench --help)
        return cmd_bench(argv[1:], out)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as e:
        print(str(e), file=sys.stderr)
        return 2
    except SystemExit as e:  # --help, --version
        return int(e.code or 0)
    so = getattr(args, "storage_options", None)
    if so is None and os.environ.get("BLZARR_STORAGE_OPTIONS"):
        try:
            so = _json_object(os.environ["BLZARR_STORAGE_OPTIONS"])
        except argparse.ArgumentTypeError as e:
            print(f"{PROG}: error: BLZARR_STORAGE_OPTIONS is {e}", file=sys.stderr)
            return 2
    _remote["storage_options"] = so
    try:
        return args.func(args, out)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as e:  # every failure is one line, never a traceback
        print(f"{PROG} {args.command}: error: {_message(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
