"""Every command and option says what it does and what it defaults to; `--help` shows it (the installed command)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator

import pytest

from mcp_batch_cli.commands import build_parser
from tests.support import command_env, run_command

pytestmark = pytest.mark.timeout(120)


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from commands(sub, f"{prefix}{name} ")


def test_every_command_and_option_has_a_description_and_names_its_default() -> None:
    found = dict(commands(build_parser()))
    assert {"dev", "api", "worker", "demo-backend", "keys new", "status"} <= set(found)
    assert {"submit", "get", "item", "results", "list", "cancel", "delete", "retry", "validate", "watch"} <= set(found)
    for name, parser in found.items():
        if name == "demo-backend":
            continue  # its arguments are the demo server's own (below)
        assert parser.description, name
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help, f"{name} {action.option_strings[0]}"
            if action.default not in (None, False, argparse.SUPPRESS):
                assert "default" in action.help, f"{name} {action.option_strings[0]}: no default named"


async def test_help_shows_the_descriptions_of_the_server_commands_too() -> None:
    env = command_env()
    answers = await asyncio.gather(*(run_command(c, "--help", env=env) for c in ["dev", "worker", "demo-backend"]))
    (dev_code, dev, _), (worker_code, worker, _), (demo_code, demo, _) = (
        (code, " ".join(out.split()), err)
        for code, out, err in answers  # as one line, however it was wrapped
    )
    assert (dev_code, worker_code, demo_code) == (0, 0, 0)
    assert "--port" in dev and "(default: 8000)" in dev and "One dev at a time" in dev
    assert "default: 127.0.0.1:9464" in worker
    assert "--transport" in demo and "(default: stdio)" in demo and "(default: 9100)" in demo
