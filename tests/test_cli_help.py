"""Every option of every `hf-laser` command says what it does, and no help text names an option its command lacks
(#71: `--speed` on `mine` said "instead of --dtype/--int8/--engine", which `mine` does not have)."""

from __future__ import annotations

import argparse
import re

import pytest

from hf_laser.cli import SUBCOMMANDS, build_parser


def command_parser(name: str) -> argparse.ArgumentParser:
    parser = build_parser(name)
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[name]


def arguments(name: str) -> list[argparse.Action]:
    return [a for a in command_parser(name)._actions if not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_every_option_has_a_help_text(name):
    missing = [a.option_strings or [a.dest] for a in arguments(name)
               if not a.help or a.help == argparse.SUPPRESS or not a.help.strip()]
    assert not missing, f"hf-laser {name}: no help for {missing}"


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_no_help_names_an_option_its_command_lacks(name):
    options = {o for a in arguments(name) for o in a.option_strings} | {"--help"}
    named = {(tuple(a.option_strings) or a.dest, flag) for a in arguments(name)
             for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", a.help or "") if flag not in options}
    assert not named, f"hf-laser {name}: help texts name options it does not have: {sorted(named)}"


def test_the_check_sees_what_it_checks():
    """The two checks above look at the texts `hf-laser COMMAND --help` prints: a speed mode's help names the options
    it replaces only where they exist."""
    embed = next(a for a in arguments("embed") if "--speed" in a.option_strings).help
    mine = next(a for a in arguments("mine") if "--speed" in a.option_strings).help
    assert "instead of --dtype/--int8/--engine" in embed
    assert "--dtype" not in mine and "--engine" not in mine
    serve = next(a for a in arguments("serve") if "--speed" in a.option_strings).help
    assert "instead of --dtype/--int8:" in serve


def test_language_options_say_names_work(capsys):
    """`embed --lang Welsh` works: its help says that names are taken."""
    assert "language name" in next(a for a in arguments("embed") if "--lang" in a.option_strings).help


def test_download_usage_does_not_read_as_laser2_taking_a_language(capsys):
    with pytest.raises(SystemExit):
        build_parser("download").parse_args(["download", "--help"])
    out = capsys.readouterr().out
    assert "laser2|laser3 LANG" not in out and "laser2 (one encoder for every language" in " ".join(out.split())
