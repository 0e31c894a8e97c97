"""Bad input, found by a machine: magic argument lines, values files and KEY=VALUE flags either parse -- to exactly
what was written -- or raise a raynb error that says what to do. Never a traceback from inside raynb, never a
different value. Examples Hypothesis found are kept below as plain tests."""

from __future__ import annotations

import shlex
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raynb._magic_args import parse_cluster_line, parse_train_line, split_datasets
from raynb._settings import parse_assignments
from raynb.errors import RaynbError, UsageError
from raynb.manifest import load_values

FAST = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
WORDS = st.sampled_from(
    [
        "--workers",
        "-n",
        "2",
        "--gpu",
        "false",
        "--cpus-per-worker",
        "0.5",
        "--config",
        "{'lr': 0.1}",
        "--name",
        "r1",
        "--out",
        "run",
        "--env",
        "A=1",
        "--nccl",
        "full",
        "--strict-efa",
        "--datasets",
        "train=ds",
        "'",
        '"',
        "=",
        "--",
        "up",
        "down",
        "--local",
        "--values",
        "f.env",
        "--set",
        "K=V",
        "--num-gpus",
        "-1",
        "x y",
        "{",
        "}",
        "list",
        "logs",
        "--tail",
        "bench",
        "--sizes",
        "1M",
        "render",
        "--help",
        "status",
        "--no-auth",
        "--k8s",
    ]
)
LINES = st.one_of(st.lists(WORDS, max_size=8).map(" ".join), st.text(max_size=60))


def _is_a_raynb_refusal(e: BaseException) -> bool:
    return isinstance(e, RaynbError) and bool(e.fix)


@FAST
@given(LINES)
@example("--config")
@example("--out 'a b'")
@example('--env "A B=1"')
@example("--datasets train=")
def test_raytrain_lines(line: str) -> None:
    try:
        args, config = parse_train_line(line)
    except Exception as e:  # noqa: BLE001 - the property is about what escapes
        assert _is_a_raynb_refusal(e), repr(e)
        return
    assert args.out is None or args.out.isidentifier()
    assert config is None or config.strip()


@FAST
@given(LINES)
@example("up --set 'bad key=1'")
@example("logs --tail many")
@example('render "')
@example("up --local --set K=V --set 'A=x y' --values f.env")
@example("logs worker-1 --tail 5")
@example("bench --sizes 1M,64M --compare-tcp")
def test_raycluster_lines(line: str) -> None:
    try:
        args = parse_cluster_line(line)
    except Exception as e:  # noqa: BLE001
        assert _is_a_raynb_refusal(e), repr(e)
        return
    # parsed: to exactly what was written
    tokens = shlex.split(line)
    assert args.command == (tokens[0] if tokens else None), (line, args)

    def after(flag: str) -> list[str]:
        return [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == flag]

    if hasattr(args, "overrides"):
        assert args.overrides == after("--set"), (line, args)
    for flag, attr, conv, default in (
        ("--values", "values", str, None),
        ("--tail", "tail", int, 200),
        ("--sizes", "sizes", str, None),
    ):
        if hasattr(args, attr):
            written = after(flag)
            assert getattr(args, attr) == (conv(written[-1]) if written else default), (line, args)
    for flag, attr in (("--local", "local"), ("--k8s", "k8s"), ("--force", "force"), ("--compare-tcp", "compare_tcp")):
        if hasattr(args, attr):
            assert getattr(args, attr) == (flag in tokens), (line, args)


KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
VALUES = st.text(max_size=30)


@FAST
@given(st.dictionaries(KEYS, VALUES, max_size=5))
def test_assignments_round_trip(d: dict[str, str]) -> None:
    assert parse_assignments([f"{k}={v}" for k, v in d.items()], "--env") == d


@FAST
@given(st.lists(st.text(max_size=20), max_size=4))
@example(["A B=1"])
@example(["=1"])
def test_assignments_parse_or_refuse(items: list[str]) -> None:
    try:
        out = parse_assignments(items, "--set")
    except Exception as e:  # noqa: BLE001
        assert _is_a_raynb_refusal(e), repr(e)
        return
    for item in items:
        k = item.partition("=")[0]
        assert out[k] == [i.partition("=")[2] for i in items if i.partition("=")[0] == k][-1]


VALUE_KEYS = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True)
SAFE = st.text(alphabet=string.ascii_letters + string.digits + "._-/:@+,=%", min_size=0, max_size=20)
ANY_LINE_TEXT = st.text(alphabet=st.characters(blacklist_characters="\n\r'", blacklist_categories=("Cs",)), max_size=20)


def _quote(v: str) -> str:
    return "'" + v + "'"  # single quotes: literal to the shell


@FAST
@given(
    values=st.dictionaries(VALUE_KEYS, st.one_of(SAFE, ANY_LINE_TEXT), max_size=6),
    export=st.booleans(),
    comments=st.booleans(),
)
def test_values_files_round_trip(values: dict[str, str], export: bool, comments: bool, tmp_path: Path) -> None:
    lines = ["# a values file"] if comments else []
    for k, v in values.items():
        lines.append(f"{'export ' if export else ''}{k}={_quote(v)}{'  # note' if comments else ''}")
    f = tmp_path / "v.env"
    f.write_text("\n".join(lines) + "\n")
    assert load_values(f) == values


@FAST
@given(text=st.text(max_size=80))
@example(text='K="a #b')
@example(text="K=a b")
@example(text="K=$HOME/x")
@example(text="K='ok'x")
@example(text='K="\\$x"')
def test_values_files_parse_or_refuse(text: str, tmp_path: Path) -> None:
    f = tmp_path / "v.env"
    f.write_text(text)
    try:
        out = load_values(f)
    except Exception as e:  # noqa: BLE001
        assert _is_a_raynb_refusal(e), repr(e)
        return
    assert all(isinstance(v, str) for v in out.values())


# --- examples found by Hypothesis (or by reading), kept as plain tests ---------------------------------------------


def test_a_quoted_hash_is_not_a_comment(tmp_path: Path) -> None:
    f = tmp_path / "v.env"
    f.write_text('A="a #b"  # comment\nB=\'x y\'\nC="q\\"uote"\nD=plain # c\n')
    assert load_values(f) == {"A": "a #b", "B": "x y", "C": 'q"uote', "D": "plain"}


@pytest.mark.parametrize("line", ['K="open', "K=a b", "K=$HOME/x", "K='ok'x", 'K="$x"'])
def test_values_the_shell_would_read_differently_are_refused(line: str, tmp_path: Path) -> None:
    f = tmp_path / "v.env"
    f.write_text(line + "\n")
    with pytest.raises(RaynbError) as e:
        load_values(f)
    assert "line 1" in e.value.what and e.value.fix


def test_env_keys_must_be_names() -> None:
    with pytest.raises(UsageError) as e:
        parse_assignments(["A B=1"], "%%raytrain: --env")
    assert e.value.fix == "e.g. --env NCCL_DEBUG=INFO"


def test_datasets_split_before_names_only() -> None:
    assert split_datasets("train=ray.data.from_items([1, 2]),val=v") == [
        ("train", "ray.data.from_items([1, 2])"),
        ("val", "v"),
    ]
