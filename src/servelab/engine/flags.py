"""Check engine flags against the installed engine's own `--help` before launching.

A flag the installed engine does not know kills the server at start, after a minute or
two of loading (vLLM dropped `--disable-log-requests` in one release). The help text is
the engine's own list of what it accepts, so it is asked once per engine version, cached
in the experiment's log directory, and every flag of the command line is checked against
it; an unknown flag is refused with the closest valid names.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from servelab.errors import ServelabError
from servelab.storage import write_atomic

__all__ = [
    "cached_help",
    "check_flags",
    "flag_names",
    "flag_of",
    "parse_help_options",
    "resolve_flag",
    "run_capture",
]

# An option as argparse prints it: "-tp TP, --tensor-parallel-size TP" or "--x, --no-x".
_OPTION = re.compile(r"(?<![\w{,\-])(--?[A-Za-z][\w\-.]*)")
_NUMBER = re.compile(r"^-\d|^-\.\d")


def parse_help_options(text: str) -> frozenset[str]:
    """Every option name an argparse-style help text lists (``--model``, ``-tp`` ...).

    Reads the signature part of option lines (before the two-space gap that starts the
    description), so flags only mentioned inside descriptions are not taken as valid.
    """
    lines = [(len(ln) - len(ln.lstrip()), ln.strip()) for ln in text.splitlines()]
    options = [(indent, s) for indent, s in lines if s.startswith("-") and not _NUMBER.match(s)]
    if not options:
        return frozenset()
    # Option lines share one indent (argparse's 2); a wrapped description line that starts
    # with a flag ("--port instead of ...") or an epilog example sits elsewhere.
    column = Counter(indent for indent, _ in options).most_common(1)[0][0]
    names: set[str] = set()
    for indent, stripped in options:
        if indent != column:
            continue
        signature = re.split(r"\s{2,}", stripped, maxsplit=1)[0]
        names.update(m.group(1).rstrip(".,") for m in _OPTION.finditer(signature))
    return frozenset(names)


def flag_of(token: str) -> str | None:
    """The flag name a command-line token names (``--max_num_seqs=8`` -> ``--max-num-seqs``),
    or None for a value (``8``, ``-1``, ``auto``)."""
    if not token.startswith("-") or token in ("-", "--") or _NUMBER.match(token):
        return None
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        # vLLM takes underscores for dashes and "--json-arg.key value" for config fields.
        return "--" + name[2:].split(".", 1)[0].replace("_", "-")
    name = name.split(".", 1)[0]  # "-cc.mode" is a field of "-cc"
    return "-O" if re.fullmatch(r"-O\d+", name) else name  # vLLM's "-O3": "-O" with value 3


def flag_names(args: Iterable[str]) -> list[str]:
    """The flag names in a list of command-line arguments, in order, without values."""
    return [f for f in (flag_of(a) for a in args) if f is not None]


def resolve_flag(flag: str, valid: frozenset[str], *, abbrev: bool = True) -> str | list[str]:
    """The valid flag `flag` names: itself, or with `abbrev` the one valid long flag it is a
    prefix of (``--tp`` -> ``--tp-size``, as argparse accepts). A list, when it names none
    (empty) or several (an ambiguous prefix)."""
    if flag in valid:
        return flag
    if not (abbrev and flag.startswith("--")):
        return []
    starts = sorted(v for v in valid if v.startswith(flag))
    return starts[0] if len(starts) == 1 else starts


def check_flags(flags: Sequence[str], valid: frozenset[str], where: str, *, abbrev: bool = True) -> None:
    """Raise `ServelabError` naming every flag not in `valid`, with the closest valid names.

    `where` says what was asked (``"vllm 0.32.0+cpu serve (--help=all)"``); `abbrev` as in
    `resolve_flag`.
    """
    problems = []
    for flag in dict.fromkeys(flags):
        found = resolve_flag(flag, valid, abbrev=abbrev)
        if isinstance(found, str):
            continue
        if found:
            problems.append(f"{flag} is ambiguous ({', '.join(found[:5])})")
            continue
        close = difflib.get_close_matches(flag, sorted(valid), n=3, cutoff=0.6)
        problems.append(flag + (f" (closest: {', '.join(close)})" if close else " (no close match)"))
    if problems:
        raise ServelabError(f"unknown flag(s) for {where}: " + "; ".join(problems))


def run_capture(argv: Sequence[str], env: Mapping[str, str], timeout_s: float, what: str) -> str:
    """Run a short command (a `--help`, a version query) and return its stdout.

    Raises `ServelabError` with the output's tail when it fails or is missing.
    """
    try:
        done = subprocess.run(
            list(argv),
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ServelabError(f"{what}: {argv[0]!r} not found") from None
    except subprocess.TimeoutExpired:
        raise ServelabError(f"{what}: `{' '.join(argv)}` took more than {timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise ServelabError(f"{what}: `{' '.join(argv)}` exited with code {done.returncode}:\n{tail}")
    return done.stdout


def cached_help(cache_path: Path, argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> str:
    """The help text at `cache_path`, or run `argv` and store its output there atomically.

    Name the cache file after the engine version: another version gets its own file.
    """
    if cache_path.is_file():
        return cache_path.read_text(encoding="utf-8")
    text = run_capture(argv, env, timeout_s, "reading the engine's flags")
    if not parse_help_options(text):
        raise ServelabError(f"`{' '.join(argv)}` printed no options; cannot check flags")
    write_atomic(cache_path, text.encode("utf-8"))
    return text
