"""One test per rule on the file itself, before the schema: what `load_file` refuses to read
(hostile or accidental YAML, empty or mis-encoded files) and how it words values YAML read as
another type. Each planted problem gives exactly one line; the hostile files also give it
quickly and in bounded memory, run as users run them (`hpctl validate` in a subprocess)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from config.errors import ConfigError
from config.loader import CONFIG_DIR, MAX_DEPTH, MAX_FILE_BYTES, load_file
from hpctl.errors import ExitCode
from tests.support import one_error_on

DEV = (CONFIG_DIR / "dev.yaml").read_text(encoding="utf-8")
HPCTL = Path(sys.executable).parent / "hpctl"


def dev_with(old: str, new: str) -> str:
    """config/dev.yaml's text with `old` (which must occur once) replaced by `new`."""
    assert DEV.count(old) == 1, old
    return DEV.replace(old, new)


def one_line_for(tmp_path: Path, content: str | bytes) -> str:
    """Write `content` to a file, load it; expect exactly one self-contained line."""
    path = tmp_path / "env.yaml"
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    lines = caught.value.lines
    assert len(lines) == 1, lines
    (line,) = lines
    assert "\n" not in line and "Traceback" not in line, line
    return line


def test_aliases_are_refused(tmp_path):
    # Even a harmless alias: a few nested ones expand into billions of values.
    text = dev_with(
        "  availability_zones: [us-east-1a, us-east-1b]\n  # Closed network",
        "  availability_zones: &azs [us-east-1a, us-east-1b]\n  # Closed network",
    ).replace("  availability_zones: [us-east-1a, us-east-1b]\n", "  availability_zones: *azs\n")
    line = one_line_for(tmp_path, text)
    row = text.splitlines().index("  availability_zones: *azs") + 1
    assert line == (
        f"(yaml) line {row}, column 23: YAML aliases (*name) are not allowed; write the value out"
    )


def test_nesting_deeper_than_the_limit_is_refused(tmp_path):
    line = one_line_for(tmp_path, "network: " + "[" * 30_000 + "\n")
    assert line.startswith("(yaml) line 1, column ")
    assert f"nested more than {MAX_DEPTH} levels deep" in line


@pytest.mark.parametrize(
    ("text", "kind"),
    [("? [a, b]\n: 1\n", "a list"), ("{[1]: x}\n", "a list"), ("? {a: 1}\n: x\n", "a mapping")],
    ids=["complex-list-key", "flow-list-key", "mapping-key"],
)
def test_keys_that_are_lists_or_mappings_are_refused(tmp_path, text, kind):
    line = one_line_for(tmp_path, text)
    assert line.startswith("(yaml) line 1, column ")
    assert line.endswith(f"a key is {kind}; keys are names: write the key as text")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("1", 'key 1 is a number in YAML; quote it: "1"'),
        ("yes", 'key yes is a boolean in YAML (true); quote it: "yes"'),
        ("~", "a key is empty or null; write the key's name"),
    ],
)
def test_keys_yaml_reads_as_another_type_are_refused(tmp_path, key, message):
    text = dev_with("  cost-center: ml-platform\n", f"  cost-center: ml-platform\n  {key}: x\n")
    row = text.splitlines().index(f"  {key}: x") + 1
    assert one_line_for(tmp_path, text) == f"(yaml) line {row}, column 3: {message}"


def test_merge_keys_are_refused(tmp_path):
    text = dev_with("  cost-center: ml-platform\n", "  <<: {cost-center: ml-platform}\n")
    assert one_line_for(tmp_path, text).endswith(
        "merge keys (<<) are not allowed; write the keys out"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "file is empty; write its settings"),
        (b"\n  \n", "file is empty; write its settings"),
        (b"# environment: dev\n\n", "file has only comments and blank lines; write its settings"),
    ],
    ids=["no-bytes", "blank", "comments"],
)
def test_an_empty_file_says_it_is_empty(tmp_path, content, message):
    assert one_line_for(tmp_path, content) == message


def test_a_file_that_is_not_utf8_names_the_byte_and_its_offset(tmp_path):
    content = dev_with("\nenvironment: dev\n", "\nenvironment: d\u00e9v\n").encode("latin-1")
    offset = content.index(b"\xe9")
    line = content[:offset].count(b"\n") + 1
    assert one_line_for(tmp_path, content) == (
        f"file is not UTF-8: byte 0xe9 at offset {offset} (line {line}) is not valid UTF-8; "
        "save the file as UTF-8"
    )


def test_control_characters_are_named_with_their_line(tmp_path):
    text = dev_with("cost-center: ml-platform", "cost-center: ml\x07platform")
    row = next(i for i, line in enumerate(text.splitlines(), 1) if "\x07" in line)
    assert one_line_for(tmp_path, text) == (
        f"(yaml) line {row}: character U+0007 is not allowed in YAML; remove it"
    )


def test_a_file_larger_than_the_limit_is_refused(tmp_path):
    text = DEV + "#" * MAX_FILE_BYTES + "\n"
    assert one_line_for(tmp_path, text) == (
        f"file is larger than {MAX_FILE_BYTES // 1024} KiB; settings files are a few KiB: "
        "check that this is the right file"
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'kubernetes_version: "1.34"',
            "kubernetes_version: 1.30",
            "eks.kubernetes_version: 1.3 is a number in YAML (1.30 lost its trailing zero); "
            'quote it: "1.30"',
        ),
        (
            'weekly_maintenance_start: "6:03:00"',
            "weekly_maintenance_start: 7:03:00",
            "storage.fsx.weekly_maintenance_start: 7:03:00 is a number in YAML 1.1 "
            '(base 60: 25380); quote it: "7:03:00"',
        ),
        (
            "cost-center: ml-platform",
            "cost-center: off",
            'tags.cost-center: off is a boolean in YAML (false); quote it: "off"',
        ),
    ],
    ids=["version", "time", "boolean"],
)
def test_unquoted_values_yaml_reads_as_another_type_say_to_quote_them(tmp_path, old, new, expected):
    assert one_line_for(tmp_path, dev_with(old, new)) == expected


def test_values_of_another_type_say_to_quote_them_without_the_file_text_too():
    # Data built in code (tests, tools) has no text as written: the message still says why.
    line = one_error_on("eks.kubernetes_version", lambda d: d["eks"].update(kubernetes_version=1.3))
    assert "1.3 is a number in YAML" in line and "quote" in line


def _billion_laughs() -> str:
    """Ten levels of nine aliases each (9**10 strings once expanded), as a value the schema
    turns into text (vpc_cidr: reading it used to run for minutes and out of memory)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 11):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + "\n" + dev_with("  vpc_cidr: 10.10.0.0/16", "  vpc_cidr: *l10")


def _limit_memory() -> None:
    one_gib = 1 << 30
    resource.setrlimit(resource.RLIMIT_AS, (one_gib, one_gib))


def test_hostile_files_fail_fast_with_one_line_each(tmp_path):
    # Before these rules, the laughs ran out of time and memory and the others printed
    # tracebacks.
    files = {
        "laughs": _billion_laughs(),
        "deep": "network: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "deep-within-size": "network: " + "[" * 30_000 + "\n",
        "complex-key": "? [a, b]\n: 1\n",
        "flow-key": "{[1]: x}\n",
    }
    paths = []
    for name, text in files.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    result = subprocess.run(
        [str(HPCTL), "validate", *(arg for path in paths for arg in ("--config", path))],
        capture_output=True,
        text=True,
        timeout=60,  # generous: each file takes well under a second
        preexec_fn=_limit_memory,
        check=False,
    )
    assert result.returncode == ExitCode.FAILED, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.splitlines()
    assert [line.split(": ")[1] for line in lines] == paths, result.stderr
    assert all(line.startswith("hpctl validate: ") for line in lines)
