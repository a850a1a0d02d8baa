"""The blzarr command line: info, ls, verify, convert, bench, through main(argv) and a subprocess."""

import io
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import blzarr
from helpers import flip_byte
from blzarr import cli


def run(*argv):
    """(status, stdout, stderr) of `blzarr argv`, run in-process."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stderr
    sys.stderr = err
    try:
        rc = cli.main(list(argv), out=out)
    finally:
        sys.stderr = old
    return rc, out.getvalue(), err.getvalue()


def one_error_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def store(tmp_path):
    """A directory holding a BLZ carray, a bcolz carray and a BLZ ctable (one nested)."""
    a = np.arange(6000, dtype="f8").reshape(-1, 3)
    c = blzarr.carray(a, rootdir=str(tmp_path / "a"), format="blz", chunklen=100, superchunklen=3,
                      meta={"units": "m"})
    c.attrs["origin"] = "test"
    c.vlmeta["note"] = "hello"
    c.flush()
    b = blzarr.carray(np.arange(1234, dtype="i4"), rootdir=str(tmp_path / "sub" / "b"), format="bcolz",
                      chunklen=100)
    b.flush()
    t = blzarr.ctable([np.arange(500), np.array(["x", "yy"] * 250), np.linspace(0, 1, 500)],
                      names=["i", "s", "f"], rootdir=str(tmp_path / "sub" / "deeper" / "t"), format="blz",
                      chunklen=64)
    t.attrs["k"] = [1, 2]
    t.flush()
    return tmp_path, a


def test_info_carray_text_and_json(store):
    root, a = store
    rc, out, err = run("info", str(root / "a"))
    assert rc == 0 and err == ""
    for needle in ("blz (superchunk files)", "float64", "(2000, 3)", "chunklen", "100", "superchunklen",
                   "3 chunks", "crc32", "lz4", "origin", "units", "note"):
        assert needle in out, needle
    rc, out, _ = run("info", str(root / "a"), "--json")
    d = json.loads(out)
    assert d["type"] == "carray" and d["format"] == "blz" and d["shape"] == [2000, 3]
    assert d["dtype"] == "float64" and d["chunklen"] == 100 and d["chunk_bytes"] == 100 * 24
    assert d["superchunklen"] == 3 and d["superchunk_bytes"] == 3 * 100 * 24
    assert d["files"] == 7   # 20 chunks, 3 a file
    assert d["nbytes"] == a.nbytes and d["ratio"] == round(a.nbytes / d["cbytes"], 2)   # nbytes / cbytes
    assert d["codec"]["cname"] == blzarr.defaults.cparams["cname"]
    assert d["attrs"] == {"origin": "test"} and d["meta"] == {"units": "m"} and d["vlmeta"] == {"note": "hello"}


def test_info_bcolz_and_ctable(store):
    root, _ = store
    rc, out, _ = run("info", str(root / "sub" / "b"), "--json")
    d = json.loads(out)
    assert rc == 0 and d["format"] == "bcolz" and d["nchunks"] == 12 and d["nleftover"] == 34
    assert "superchunklen" not in d
    rc, out, _ = run("info", str(root / "sub" / "deeper" / "t"))
    assert rc == 0
    assert "ctable" in out and "rows     500" in out
    for name, dt in (("i", "int64"), ("s", "<U2"), ("f", "float64")):
        assert any(line.split()[:2] == [name, dt] for line in out.splitlines()), (name, out)
    d = json.loads(run("info", str(root / "sub" / "deeper" / "t"), "--json")[1])
    assert [c["name"] for c in d["columns"]] == ["i", "s", "f"]
    assert d["nrows"] == 500 and d["attrs"] == {"k": [1, 2]}
    assert all(c["chunklen"] == 64 and c["format"] == "blz" for c in d["columns"])


def test_info_errors_are_one_line(tmp_path):
    rc, out, err = run("info", str(tmp_path / "nope"))
    assert rc == 1 and out == ""
    assert "does not exist" in one_error_line(err) and "nope" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = run("info", str(tmp_path / "empty"))
    assert rc == 1 and "neither a carray nor a ctable" in one_error_line(err)
    # a damaged meta file: named, no traceback
    c = blzarr.carray(np.arange(10), rootdir=str(tmp_path / "c"), format="bcolz")
    c.flush()
    with open(tmp_path / "c" / "meta" / "storage", "w") as f:
        f.write("{not json")
    rc, _, err = run("info", str(tmp_path / "c"))
    assert rc == 1 and "storage" in one_error_line(err)


def test_bad_command_lines_exit_2():
    rc, _, err = run("frobnicate")
    assert rc == 2 and "invalid choice" in one_error_line(err)
    rc, _, err = run("info")
    assert rc == 2 and "ROOT" in one_error_line(err)
    rc, _, err = run("convert", "a", "b", "--format", "zarr")
    assert rc == 2 and "--format" in one_error_line(err)
    rc, out, _ = run("--version")
    assert rc == 0


def test_ls(store):
    root, _ = store
    rc, out, err = run("ls", str(root))
    assert rc == 0 and err == ""
    lines = out.splitlines()
    paths = [ln.split()[0] for ln in lines[2:]]
    assert paths == ["a", os.path.join("sub", "b"), os.path.join("sub", "deeper", "t")]
    recs = json.loads(run("ls", str(root), "--json")[1])
    assert [(r["type"], r["format"], r["shape"]) for r in recs] == [
        ("carray", "blz", [2000, 3]), ("carray", "bcolz", [1234]), ("ctable", "blz", [500, 3])]
    # a ctable's columns are not listed on their own; an empty dir says so
    (root / "nothing").mkdir()
    rc, out, _ = run("ls", str(root / "nothing"))
    assert rc == 0 and "no carray or ctable" in out
    rc, _, err = run("ls", str(root / "missing"))
    assert rc == 1 and "not a directory" in one_error_line(err)


def test_ls_reports_damaged_entries_and_goes_on(store):
    root, _ = store
    os.remove(root / "sub" / "b" / "meta" / "sizes")
    rc, out, _ = run("ls", str(root))
    assert rc == 1
    bad = [ln for ln in out.splitlines() if "DAMAGED" in ln]
    assert len(bad) == 1 and bad[0].startswith(os.path.join("sub", "b"))
    assert any(ln.startswith("a ") for ln in out.splitlines())


def test_verify_ok(store):
    root, _ = store
    rc, out, err = run("verify", str(root))
    assert rc == 0 and err == ""
    assert out.count("OK ") == 3
    assert "crc32 checksums verified" in out
    rc, out, _ = run("verify", str(root / "sub" / "b"))
    assert rc == 0 and "13 chunks" not in out and "12 chunks + 34 leftover" in out



def test_verify_blz_checksum_damage(store):
    root, _ = store
    path = root / "a" / "data" / "__2__.bin"
    flip_byte(path, os.path.getsize(path) - 40)   # inside the last chunk of file 2
    rc, out, err = run("verify", str(root / "a"))
    assert rc == 1
    line = [ln for ln in out.splitlines() if ln.startswith("DAMAGED")]
    assert len(line) == 1 and "__2__.bin" in line[0]
    assert "damaged" in one_error_line(err)
    # the whole directory: the other objects still verified, exit 1
    rc, out, _ = run("verify", str(root))
    assert rc == 1 and out.count("OK ") == 2 and out.count("DAMAGED") == 1


def test_verify_bcolz_damage(store):
    root, _ = store
    chunk = root / "sub" / "b" / "data" / "__5.blp"
    data = chunk.read_bytes()
    chunk.write_bytes(data[:len(data) // 2])   # truncated
    rc, out, _ = run("verify", str(root / "sub" / "b"))
    assert rc == 1 and "__5.blp" in out
    os.remove(chunk)
    rc, out, _ = run("verify", str(root / "sub" / "b"))
    assert rc == 1 and "__5.blp" in out and "missing" in out


def test_verify_ctable_names_the_column(store):
    root, _ = store
    t = root / "sub" / "deeper" / "t"
    path = t / "f" / "data" / "__1__.bin"
    flip_byte(path, os.path.getsize(path) - 30)
    rc, out, _ = run("verify", str(t))
    assert rc == 1 and "column 'f'" in out and "__1__.bin" in out


def test_verify_nothing_there(tmp_path):
    rc, _, err = run("verify", str(tmp_path))
    assert rc == 1 and "holds no carray or ctable" in one_error_line(err)


@pytest.mark.parametrize("fmt", ["bcolz", "blz"])
def test_convert_carray(store, fmt):
    root, a = store
    src = root / ("a" if fmt == "bcolz" else "sub/b")
    dst = root / "out"
    rc, out, err = run("convert", str(src), str(dst), "--format", fmt, "--cname", "zstd", "--clevel", "7",
                       "--shuffle", "bitshuffle")
    assert rc == 0 and "converted carray" in out and err == ""
    c = blzarr.open(str(dst), mode="r")
    s = blzarr.open(str(src), mode="r")
    assert c.format == fmt and c.dtype == s.dtype and c.shape == s.shape and c.chunklen == s.chunklen
    assert (c.cparams.cname, c.cparams.clevel, c.cparams.shuffle) == ("zstd", 7, blzarr.BITSHUFFLE)
    assert_array_equal(c[:], s[:])
    assert c.attrs.getall() == s.attrs.getall()
    assert run("verify", str(dst))[0] == 0
    if fmt == "bcolz":
        import bcolz   # what blzarr writes in the bcolz layout opens in bcolz
        assert_array_equal(bcolz.open(str(dst), mode="r")[:], a)


def test_convert_keeps_blz_options_and_metalayers(store):
    root, a = store
    dst = root / "copy"
    rc, _, _ = run("convert", str(root / "a"), str(dst), "--checksum", "sha256", "--superchunklen", "5",
                   "--chunklen", "250")
    assert rc == 0
    d = json.loads(run("info", str(dst), "--json")[1])
    assert (d["format"], d["checksum"], d["superchunklen"], d["chunklen"]) == ("blz", "sha256", 5, 250)
    assert d["meta"] == {"units": "m"} and d["vlmeta"] == {"note": "hello"} and d["attrs"] == {"origin": "test"}
    assert_array_equal(blzarr.open(str(dst))[:], a)


def test_convert_ctable(store):
    root, _ = store
    src = root / "sub" / "deeper" / "t"
    dst = root / "t_bcolz"
    rc, out, _ = run("convert", str(src), str(dst), "--format", "bcolz", "--clevel", "9")
    assert rc == 0 and "converted ctable" in out
    s, t = blzarr.open(str(src)), blzarr.open(str(dst))
    assert t.format == "bcolz" and t.names == s.names and t.dtype == s.dtype
    assert all(t.cols[n].cparams.clevel == 9 and t.cols[n].chunklen == 64 for n in t.names)
    assert (t[:] == s[:]).all()
    assert t.attrs.getall() == {"k": [1, 2]}
    import bcolz
    bt = bcolz.open(str(dst), mode="r")
    assert (bt[:] == s[:]).all()


def test_convert_refusals(store):
    root, _ = store
    a = str(root / "a")
    rc, _, err = run("convert", a, str(root / "sub" / "b"))
    assert rc == 1 and "already exists" in one_error_line(err)
    rc, _, err = run("convert", a, a)
    assert rc == 1 and "overlaps" in one_error_line(err)
    rc, _, err = run("convert", a, str(root / "x"), "--cname", "nosuchcodec")
    assert rc == 2 and "nosuchcodec" in one_error_line(err)          # a bad command line
    assert not (root / "x").exists()
    assert not [p for p in os.listdir(root) if "converting" in p]   # no temporary left behind
    rc, _, err = run("convert", str(root / "sub" / "b"), str(root / "y"), "--format", "bcolz", "--checksum", "md5")
    assert rc == 1 and "--format blz" in one_error_line(err)
    rc, _, err = run("convert", str(root / "missing"), str(root / "z"))
    assert rc == 1 and "does not exist" in one_error_line(err)
    # --overwrite replaces
    rc, _, _ = run("convert", a, str(root / "sub" / "b"), "--overwrite", "--format", "bcolz")
    assert rc == 0 and blzarr.open(str(root / "sub" / "b")).shape == (2000, 3)


def test_convert_objects_need_allow_pickle(tmp_path):
    objs = [{"a": 1}, [1, 2], "three", None]
    c = blzarr.carray(objs, dtype=object, rootdir=str(tmp_path / "o"), format="bcolz")
    c.flush()
    rc, _, err = run("convert", str(tmp_path / "o"), str(tmp_path / "o2"), "--format", "blz")
    assert rc == 1 and "--allow-pickle" in one_error_line(err)
    assert run("info", str(tmp_path / "o"))[0] == 0     # inspecting unpickles nothing
    assert run("verify", str(tmp_path / "o"))[0] == 0
    rc, _, _ = run("convert", str(tmp_path / "o"), str(tmp_path / "o2"), "--format", "blz", "--allow-pickle")
    assert rc == 0
    assert list(blzarr.open(str(tmp_path / "o2"), allow_pickle=True)[:]) == objs


def test_convert_progress(store, monkeypatch, capsys):
    root, _ = store
    # plain progress lines when tqdm is missing
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setattr(cli, "COPY_BLOCK_BYTES", 2400)   # one 100-row chunk of the source a block
    rc = cli.main(["convert", str(root / "a"), str(root / "p1"), "--progress"])
    err = capsys.readouterr().err
    assert rc == 0 and "100%" in err and err.count("%") == 10
    # nothing at all for short work by default
    rc = cli.main(["convert", str(root / "a"), str(root / "p2")])
    assert rc == 0 and capsys.readouterr().err == ""
    monkeypatch.delitem(sys.modules, "tqdm")
    pytest.importorskip("tqdm")
    rc = cli.main(["convert", str(root / "a"), str(root / "p3"), "--progress"])
    err = capsys.readouterr().err
    assert rc == 0 and "100%" in err and "|" in err   # tqdm's bar


def test_bench_passes_its_options_to_the_harness(monkeypatch):
    calls = []
    monkeypatch.setattr(cli.bench_command, "main", lambda argv, prog: calls.append((argv, prog)) or 0)
    rc, _, _ = run("bench", "--quick", "--peers", "numpy", "--json", "r.json")
    assert rc == 0 and calls == [(["--quick", "--peers", "numpy", "--json", "r.json"], "blzarr bench")]


def _options(help_text):
    return {w.rstrip(",") for w in help_text.split() if w.startswith("--")}


def test_bench_help_lists_the_options_of_python_m_bench(capsys):
    rc = cli.main(["bench", "--help"])
    text = capsys.readouterr().out
    assert rc == 0 and text.startswith("usage: blzarr bench")
    with pytest.raises(SystemExit) as e:
        cli.bench_command.parse(["--help"])
    mine = capsys.readouterr().out
    assert e.value.code == 0 and "usage: python -m bench" in mine
    assert _options(text) == _options(mine) >= {"--quick", "--n", "--peers", "--ops", "--json", "--extra"}
    # a bad option value is a bad command line: exit 2, the harness does not start
    rc = cli.main(["bench", "--peers", "nosuchlib"])
    assert rc == 2 and "invalid choice" in capsys.readouterr().err


def test_console_script_entry_point():
    tomllib = pytest.importorskip("tomllib")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    module, func = scripts["blzarr"].split(":")
    import importlib
    assert getattr(importlib.import_module(module), func) is cli.main


def test_subprocess_python_m_blzarr(store):
    root, _ = store
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-m", "blzarr", "info", str(root / "a"), "--json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["shape"] == [2000, 3]
    p = subprocess.run([sys.executable, "-m", "blzarr", "verify", str(root / "nope")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1 and p.stdout == ""
    assert "does not exist" in one_error_line(p.stderr)


# ----------------------------------------------------------------------------- the command line
@pytest.mark.parametrize("argv, what", [
    (["--cname", "foo"], "argument --cname: invalid choice: 'foo'"),
    (["--clevel", "12"], "argument --clevel: 12 is not in 0-9"),
    (["--clevel", "x"], "argument --clevel: 'x' is not an integer"),
    (["--checksum", "crc64"], "argument --checksum: invalid choice: 'crc64'"),
    (["--chunklen", "0"], "argument --chunklen: 0 < 1"),
    (["--superchunklen", "-3"], "argument --superchunklen: -3 < 1"),
    (["--shuffle", "sideways"], "argument --shuffle: invalid choice"),
])
def test_a_bad_option_value_is_a_bad_command_line(store, argv, what):
    root, _ = store
    dst = root / "never"
    rc, out, err = run("convert", str(root / "a"), str(dst), *argv)
    line = one_error_line(err)
    assert rc == 2 and out == "" and line.startswith("blzarr convert: error: " + what), line
    assert not dst.exists()


def test_verify_several_paths_and_directories(store):
    root, _ = store
    b, t = root / "sub" / "b", root / "sub" / "deeper" / "t"
    rc, out, err = run("verify", str(root / "a"), str(root / "sub"), str(b))   # b twice: verified once
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert [ln.split()[0] for ln in lines[:-1]] == ["OK"] * 3
    assert lines[-1] == "3 objects verified: 3 OK"
    # one damaged, one missing: the others are still verified, exit 1, the summary says so
    path = root / "a" / "data" / "__2__.bin"
    flip_byte(path, os.path.getsize(path) - 40)
    rc, out, err = run("verify", str(root / "a"), str(root / "nope"), str(t))
    assert rc == 1
    assert out.count("DAMAGED") == 1 and out.count("OK ") == 1
    assert out.splitlines()[-1] == "2 objects verified: 1 OK, 1 damaged"
    line = one_error_line(err)
    assert f"'{root / 'nope'}' does not exist" in line and "1 of 2 objects damaged" in line


def test_positional_arguments_have_help(capsys):
    for command, names in [("info", ["ROOT"]), ("ls", ["DIR"]), ("verify", ["ROOT"]),
                           ("convert", ["SRC", "DST"])]:
        assert cli.main([command, "--help"]) == 0
        text = capsys.readouterr().out
        section = text.split("positional arguments:")[1].split("options:")[0]
        for name in names:
            helpline = [ln for ln in section.splitlines() if ln.strip().startswith(name)]
            assert helpline and len(helpline[0].split()) > 1, (command, name, section)


def test_counts_have_the_right_plural(tmp_path):
    c = blzarr.carray(np.arange(10), rootdir=str(tmp_path / "one" / "c"), chunklen=10, format="blz")
    c.close()
    b = blzarr.carray(np.arange(11), rootdir=str(tmp_path / "one" / "b"), chunklen=10, format="bcolz")
    b.close()
    t = blzarr.ctable({"x": np.arange(1)}, rootdir=str(tmp_path / "one" / "t"))
    t.close()
    texts = []
    for argv in (["info", str(tmp_path / "one" / "c")], ["ls", str(tmp_path / "one")],
                 ["verify", str(tmp_path / "one")], ["verify", str(tmp_path / "one" / "t")],
                 ["convert", str(tmp_path / "one" / "t"), str(tmp_path / "t2")]):
        rc, out, err = run(*argv)
        assert rc == 0, err
        texts.append(out)
    text = "\n".join(texts)
    for wrong in ("1 chunks", "1 columns", "1 files", "1 rows", "1 objects", "file(s)", "object(s)",
                  "1 leftover rows"):
        assert wrong not in text, wrong
    for right in ("1 chunk in 1 file", "1 column", "1 row", "1 chunk + 1 leftover row",
                  "3 objects verified"):
        assert right in text, right
