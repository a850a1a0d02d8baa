"""Errors a newcomer met whose text pointed the wrong way: each now says what is wrong and what to do."""

import os

import numpy as np
import pytest

import blzarr


def test_open_on_a_file_says_it_is_a_file(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello")
    with pytest.raises(blzarr.StorageError) as e:
        blzarr.open(str(p))
    assert "is a file" in str(e.value) and "does not exist" not in str(e.value) and str(p) in str(e.value)
    with pytest.raises(blzarr.StorageError, match="does not exist"):
        blzarr.open(str(tmp_path / "missing"))


def test_open_with_a_bad_mode_names_the_mode(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        blzarr.open(str(tmp_path / "missing"), mode="x")


@pytest.mark.parametrize("expr", ["(px > 1) and (px < 3)", "1 < px < 3", "(px > 1) or (px < 3)",
                                  "not (px > 1)"])
def test_python_boolean_operators_in_a_query_point_to_the_element_wise_ones(expr):
    px = blzarr.carray(np.arange(10.0))
    t = blzarr.ctable([np.arange(10.0)], names=["px"])
    for f in (lambda: px[expr], lambda: t.fetchwhere(expr), lambda: list(t.where(expr)),
              lambda: blzarr.eval(expr, user_dict={"px": px})):
        with pytest.raises(ValueError, match="&") as e:
            f()
        assert "ambiguous" in str(e.value)


def test_a_generator_points_to_fromiter():
    with pytest.raises(TypeError, match="fromiter"):
        blzarr.carray(i for i in range(3))
    assert blzarr.fromiter((i for i in range(3)), dtype="i8", count=3)[:].tolist() == [0, 1, 2]


def test_two_writers_of_one_process_are_not_called_another_process(tmp_path):
    p = str(tmp_path / "c")
    blzarr.carray(np.arange(10), rootdir=p, mode="w").flush()
    a1, a2 = blzarr.open(p), blzarr.open(p)
    a1.append([1])
    a1.flush()
    with pytest.raises(blzarr.ConcurrentWriterError) as e:
        a2.append([2])
    assert "another object of this process" in str(e.value)


def test_missing_optional_packages_say_how_to_install(monkeypatch):
    from blzarr.io import pandas_hdf5
    import builtins
    real = builtins.__import__

    def fake(name, *a, **k):
        if name.split(".")[0] in ("pandas", "tables"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake)
    t = blzarr.ctable([np.arange(3)], names=["a"])
    with pytest.raises(ImportError, match="pip install pandas"):
        t.todataframe()


# =============================================================================== first-day cosmetics
def test_print_versions_shows_a_plain_blosc_date(capsys):
    blzarr.print_versions()
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("C-Blosc")][0]
    version, date = blzarr.blosc_version()          # bcolz's tuple, unchanged
    assert version in line and "$" not in line and "Date::" not in line


def test_info_of_object_and_tiny_carrays_says_what_it_means(tmp_path):
    from test_cli import run
    o = str(tmp_path / "objects")
    blzarr.carray(np.array([{"a": 1}], dtype=object), rootdir=o, mode="w").flush()
    rc, out, err = run("info", o)
    assert rc == 0 and "(- a chunk)" not in out and "pickled object a chunk" in out
    assert "(- a file)" not in out
    tiny = str(tmp_path / "tiny")
    blzarr.carray(np.arange(5), rootdir=tiny, mode="w").flush()
    rc, out, err = run("info", tiny)
    ratio = [ln for ln in out.splitlines() if ln.startswith("ratio")][0]
    assert "less than one chunk" in ratio
    big = str(tmp_path / "big")
    blzarr.carray(np.arange(100_000), rootdir=big, mode="w").flush()
    rc, out, err = run("info", big)
    assert "less than one chunk" not in out
