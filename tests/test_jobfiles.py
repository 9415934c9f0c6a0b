"""The job files' schemas (hpcqa/record/jobfiles): every field of every file, given every kind of JSON value a
program, a hand edit or a dying node could leave, is either read as its rule says or the file is Damaged naming
that field -- never an exception, never a value of another type, never a control character in the message. And
what a schema reads, it writes back (to_json), unknown keys kept."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from hpcqa.record.jobfiles import (
    controller,
    failure,
    fields,
    marks,
    phase,
    progress,
    report,
    results,
)
from hpcqa.record.jobfiles.fields import Damaged
from hpcqa.text import CONTROL

SCHEMAS = {
    "progress": (progress.parse, progress.Progress, {}),
    "results": (results.parse, results.Results, {}),
    "report": (report.parse, report.Report, {"rank": 0}),
    "phase": (phase.parse, phase.PhaseRecord, {"rank": 0, "phase": "training"}),
    "failure": (failure.parse, failure.Failure, {"rank": 0}),
    "controller": (controller.parse, controller.Controller, {"pid": 4242, "identity": "boot:1"}),
    "checkpoint mark": (
        lambda obj, file="mark": fields.parse(marks.CheckpointMark, obj, file),
        marks.CheckpointMark,
        {},
    ),
    "master address": (
        lambda obj, file="address": fields.parse(marks.MasterAddress, obj, file),
        marks.MasterAddress,
        {"address": "10.0.0.1"},
    ),
}

# every kind of JSON value: null, booleans, whole numbers (negative, huge), floats (huge, tiny), text (markup,
# escape sequences, a bidi override), lists (empty, of numbers, of text, of objects), objects
VALUES = [
    None,
    True,
    False,
    0,
    7,
    -1,
    10**13,
    2**64,
    1.5,
    -2.5,
    1e308,
    1e-300,
    "",
    "text",
    "[bold]",
    "\x1b]0;x\x07",
    "\u202etxt",
    [],
    [1, 2],
    ["a"],
    [{"a": 1}],
    {},
    {"a": 1},
    {"a": None},
    [None],
    {"signal": "SIGTERM", "step": 3},
]


def _top_fields(cls):
    return [f for f in dataclasses.fields(cls) if f.name != "extra"]


def _accepts(tp, v) -> bool:
    """Whether `v` fits the annotation `tp` by an independent reading of the rules (the oracle for the parser)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        rule = next(a for a in args[1:] if isinstance(a, fields.Range))
        return _accepts(args[0], v) and rule.low <= v <= rule.high
    if origin in (typing.Union, __import__("types").UnionType):
        return v is None or any(_accepts(a, v) for a in args if a is not type(None))
    if tp is typing.Any:
        return True
    if origin is tuple:
        return isinstance(v, list) and all(_accepts(args[0], x) for x in v)
    if origin is dict:
        return isinstance(v, dict) and all(_accepts(args[1], x) for x in v.values())
    if dataclasses.is_dataclass(tp):
        return isinstance(v, dict) and not isinstance(fields.parse(tp, v, "x"), Damaged)
    if tp is bool:
        return isinstance(v, bool)
    if tp is str:
        return isinstance(v, str)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if tp is int:
        return isinstance(v, int) and abs(v) < 2**63
    return tp is float


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_every_field_given_every_json_value_is_read_or_named(kind):
    parse, cls, minimal = SCHEMAS[kind]
    hints = typing.get_type_hints(cls, include_extras=True)
    assert not isinstance(parse(minimal), Damaged)
    tried = 0
    for f in _top_fields(cls):
        key = f.metadata.get("key", f.name)
        for v in VALUES:
            got = parse({**minimal, key: v})
            tried += 1
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if v is None:  # null is missing: the default, or for a required field a damaged file
                assert isinstance(got, Damaged) == required, (key, got)
                continue
            if isinstance(got, Damaged):
                assert key in got.why and not CONTROL.search(got.why), (key, v, got)
                assert not _accepts(hints[f.name], v) or kind == "controller", (key, v, got.why)
            else:
                assert _accepts(hints[f.name], v), (key, v, getattr(got, f.name))
                back = fields.to_json(getattr(got, f.name))
                assert json.dumps(back, sort_keys=True) == json.dumps(v, sort_keys=True), key
    assert tried >= len(VALUES) * len(_top_fields(cls))


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_what_is_not_an_object_is_damaged_and_unknown_keys_are_kept(kind):
    parse, cls, minimal = SCHEMAS[kind]
    for top in ([], "x", 3, None, [minimal]):
        got = parse(top)
        assert isinstance(got, Damaged) and "not an object" in got.why, top
    got = parse({**minimal, "a_key_of_tomorrow": {"nested": [1, "x"]}})
    assert not isinstance(got, Damaged)
    assert got.to_json()["a_key_of_tomorrow"] == {"nested": [1, "x"]}
    assert got.to_json() == {**minimal, "a_key_of_tomorrow": {"nested": [1, "x"]}}


def test_nested_fields_are_named_with_their_path():
    got = results.parse({"efficiency": {"tokens": {"padding_share": "x"}}})
    assert isinstance(got, Damaged) and got.why.startswith("efficiency.tokens.padding_share"), got
    got = results.parse({"notices": [{"signal": "SIGTERM"}, {"step": -3}]})
    assert isinstance(got, Damaged) and got.why.startswith("notices[1].step"), got
    got = report.parse({"rank": 0, "usage": {"cpu_s": 1.0, "wall_s": 2.0}})
    assert isinstance(got, Damaged) and got.why == "usage.cpus is missing", got


def test_a_writer_is_held_to_the_schema_its_readers_use(tmp_path):
    """The rank writes through the same schema: a value its readers would refuse is hpcqa's bug, raised at once."""
    progress.write(tmp_path / "p.json", {"step": 3, "total_steps": 8, "loss": 1.5})
    got = progress.read(tmp_path / "p.json")
    assert isinstance(got, progress.Progress) and (got.step, got.loss) == (3, 1.5)
    with pytest.raises(ValueError, match="step"):
        progress.write(tmp_path / "q.json", {"step": "3"})
    assert not (tmp_path / "q.json").exists()
    with pytest.raises(ValueError, match="rank"):
        report.write(tmp_path / "r.json", {"host": "n1"})
    # a value read back and written again (a job's notices into its results) is written as its JSON, not as text
    from hpcqa.record.jobfiles.parts import Notice

    results.write(tmp_path / "res.json", {"notices": [Notice(signal="SIGTERM", step=4)]})
    got = results.read(tmp_path / "res.json")
    assert isinstance(got, results.Results) and got.notices[0].step == 4


def test_the_reader_names_the_file_and_the_field(tmp_path):
    (tmp_path / "results.json").write_text('{"f1": "high"}')
    got = results.read(tmp_path / "results.json")
    assert got == Damaged("results.json", 'f1 "high" is not a number')
    assert str(got) == 'results.json: f1 "high" is not a number'
    assert results.read(tmp_path / "missing.json") is None
    (tmp_path / "cut.json").write_text('{"f1": 3')
    assert results.read(tmp_path / "cut.json") == Damaged(
        "cut.json", "not JSON (cut short, or not hpcqa's)"
    )
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert "not JSON" in str(results.read(tmp_path / "deep.json"))


@pytest.mark.process
def test_the_api_and_the_cli_read_logs_and_records_through_the_same_code(tmp_path):
    """One job folder holding a FIFO where rank 0's log goes, a 2 GiB (sparse) log for rank 1, and a damaged
    results.json: `hpcqa logs`, `hpcqa status JOB` and the Python API each answer at once, in bounded memory, with
    the same words (the API used to read the log whole with read_text: a hang on the FIFO, 2 GiB in memory)."""
    import os
    import resource
    import signal

    from hpcqa import api
    from hpcqa.errors import JobFailed, UsageError
    from hpcqa.record import registry
    from tests.conftest import run_cli

    job = tmp_path / "job"
    (job / "ranks").mkdir(parents=True)
    os.mkfifo(job / "7_0_log.err")
    with open(job / "7_1_log.err", "wb") as f:
        f.seek(2 << 30)  # 2 GiB of NULs before the end, no disk used
        f.write(b"\nthe last line\n")
    (job / "results.json").write_text('{"status": "COMPLETED", "f1": "\\u001b]0;x\\u0007"}')
    reg_path = tmp_path / "r.sqlite"
    registry.Registry(reg_path).add_many(
        [
            dict(
                id="7",
                name="n",
                executor="local",
                folder=str(job),
                config={},
                source="x",
                nodes=1,
                world_size=2,
            )
        ]
    )
    signal.alarm(60)  # a FIFO that blocked would fail the test, not hang it
    try:
        j = api.Job("7", registry=str(reg_path))
        with pytest.raises(UsageError) as e:
            j.logs(0)
        assert "not a regular file" in e.value.message
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert j.logs(1, lines=1) == "the last line\n"
        whole = j.logs(1)  # capped at 64 MiB from the end, the cut said first
        assert whole.startswith("[hpcqa: the log's first ") and whole.endswith("the last line\n")
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grew < 600 << 10, f"{grew} KiB"  # KiB: a copy or two of 64 MiB, never 2 GiB
        del whole
        v = j.view()
        assert v.results is None and v.damaged == [
            'results.json: f1 "\\u001b]0;x\\u0007" is not a number'
        ]
        for bad in ("*", -1, True, 1.0):  # a rank is a number: "*" was globbed into any rank's log
            with pytest.raises(UsageError):
                j.logs(bad)
        assert j.state() == "COMPLETED"  # its files say so (a results file, no failure)
        with pytest.raises(JobFailed, match="results.json: f1"):  # named, not "ended COMPLETED"
            j.results(wait=False)
        cli = run_cli("logs", "7", "--rank", "0", "--registry", str(reg_path))
        assert cli.returncode == 2 and "not a regular file" in cli.stderr, cli.stderr
        cli = run_cli("logs", "7", "--rank", "1", "-n", "1", "--registry", str(reg_path))
        assert cli.returncode == 0 and cli.stdout == "the last line\n", cli.stdout[-200:]
        cli = run_cli("status", "7", "--registry", str(reg_path), env={"COLUMNS": "200"})
        text = " ".join(cli.stdout.split())
        assert cli.returncode == 0 and "\x1b" not in cli.stdout
        assert 'results.json: f1 "\\u001b]0;x\\u0007" is not a number: not used' in text, text
    finally:
        signal.alarm(0)


# ------------------------------------------------------------------------------ a blind re-test's findings


def test_what_a_blind_retest_sent_is_a_damaged_file_not_a_crash_a_hang_or_escapes(tmp_path):
    """Probes a helper that never saw these tests sent at the readers (each was a traceback, a hang or raw escape
    bytes): an integer past a float's range in a float field, nesting past the reader's depth, text and lists longer
    than hpcqa writes, an object key carrying escape sequences, scores outside 0-100."""
    import time

    assert "not a finite number" in str(progress.parse({"loss": 10**309}))
    assert "not a finite number" in str(report.parse({"rank": 0, "started": 10**309}))
    deep = tmp_path / "deep.json"
    deep.write_text('{"metrics": {"a": ' + "[" * 500 + "]" * 500 + "}}")
    assert "nested deeper than" in str(results.read(deep))
    t0 = time.process_time()
    for big in (
        {"rank": 0, "cpus": [0] * 5_000_000},
        {"rank": 0, "host": "h" * 3_000_000},
        {"rank": 0, "preload": {str(i): None for i in range(100_000)}},
    ):
        got = report.parse(big)
        assert isinstance(got, Damaged) and "more than any hpcqa writes" in got.why, got
    assert time.process_time() - t0 < 5  # refused by size, not checked item by item
    got = report.parse({"rank": 0, "preload": {"\x1b]0;pwned\x07\x1b[2J": 5}})
    assert isinstance(got, Damaged) and not CONTROL.search(got.why) and "preload." in got.why
    for score in (-5, 100.5, 1e308):
        assert "a score (0-100)" in str(results.parse({"exact_match": score})), score
    assert results.parse({"exact_match": 100, "f1": 0}).scores() == (100, 0)


def test_a_checkpoint_mark_names_files_of_its_checkpoint_only_and_an_address_is_an_address(
    tmp_path,
):
    from hpcqa.fsutil import file_sha256
    from hpcqa.record.jobdir import JobDir

    p = tmp_path / "checkpoint-3"
    p.mkdir()
    (p / "w.bin").write_bytes(b"w")
    (tmp_path / "elsewhere").write_bytes(b"e")
    entry = {"size": 1, "sha256": file_sha256(tmp_path / "elsewhere")}
    for rel in (str(tmp_path / "elsewhere"), "../elsewhere"):
        JobDir.checkpoint_marker(p).write_text(json.dumps({"files": {rel: entry}}))
        assert "not a file of the checkpoint" in JobDir.verify_checkpoint(p), rel
    (p / "link").symlink_to("/dev/zero")  # a hash of it would never end
    JobDir.checkpoint_marker(p).write_text(json.dumps({"files": {"link": entry}}))
    assert "not a file of the checkpoint" in JobDir.verify_checkpoint(p)
    JobDir.checkpoint_marker(p).write_text(
        json.dumps({"files": {"w.bin": {"size": 1, "sha256": file_sha256(p / "w.bin")}}})
    )
    assert JobDir.verify_checkpoint(p) is None
    a = tmp_path / "address.json"
    for bad in ("\x1b[2J10.0.0.1", "10.0.0.1 -o x", "", "-oProxyCommand=x"):
        a.write_text(json.dumps({"address": bad}))
        assert marks.read_address(a) is None, bad
    for good in ("10.0.0.1", "fe80::1%ib0", "node-7.cluster"):
        a.write_text(json.dumps({"address": good}))
        assert marks.read_address(a).address == good
