"""The question commands: `questions` lists a batch's items waiting for an answer to their backend's question, and
`answer` answers one (accept with content, decline or cancel), through mcp_batch.client like the other client
commands."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mcp_batch.client import Conflict
from mcp_batch_cli.client_commands import connected, print_json
from mcp_batch_cli.client_parsers import command, server_options
from mcp_batch_cli.command_errors import CommandError
from mcp_batch_cli.plain_text import one_line


def add_question_commands(sub: Any) -> None:
    listed = command(
        sub,
        "questions",
        "list a batch's items waiting for an answer to their backend's question",
        "Each with its kind (elicitation or sampling), its message and what it asks for; answer with `answer`.",
    )
    listed.add_argument("id", help="the batch id")
    server_options(listed, "print the questions as JSON (default: a line each, then the requested fields)")
    listed.set_defaults(run=_questions)

    answer = command(sub, "answer", "answer an item's question", "The answer goes to the backend; the call goes on.")
    answer.add_argument("id", help="the batch id")
    answer.add_argument("item_id", metavar="ITEM_ID", help="the waiting item's id")
    answer.add_argument("action", choices=["accept", "decline", "cancel"], help="what to answer")
    answer.add_argument(
        "--content",
        metavar="JSON",
        help='with accept: the fields of the requested schema as a JSON object, e.g. \'{"name": "Ada"}\' (for a '
        "sampling request, the message: role, content, model)",
    )
    answer.add_argument("--request-id", metavar="ID", help="the question answered (default: the item's)")
    server_options(answer, "print the receipt as JSON")
    answer.set_defaults(run=_answer)


def _questions(args: argparse.Namespace) -> int:
    with connected(args, args.id) as client:
        found = client.questions(args.id)
    if args.json:
        print_json(found)
        return 0
    if not found.questions:
        print(f"no item of batch {args.id} is waiting for an answer")
    for pending in found.questions:
        question = pending.input_request
        message = question.params.get("message") or question.params.get("systemPrompt") or ""
        print(one_line(f"{pending.item_id}: {question.kind.value} until {question.expires_at}: {message}"))
        fields = (question.params.get("requestedSchema") or {}).get("properties") or {}
        for name, field in fields.items():
            print(one_line(f"  {name} ({field.get('type', 'any')}): {field.get('description', '')}"))
    return 0


def _answer(args: argparse.Namespace) -> int:
    content = None
    if args.content is not None:
        try:
            content = json.loads(args.content)
        except ValueError:
            raise CommandError("--content is not JSON") from None
        if not isinstance(content, dict):
            raise CommandError("--content must be a JSON object")
    with connected(args, args.id, args.item_id) as client:
        try:
            receipt = client.answer(args.id, args.item_id, args.action, content, args.request_id)
        except Conflict:
            raise CommandError(f"item {args.item_id!r} is not waiting for an answer") from None
    if args.json:
        print_json(receipt)
    else:
        print(f"answered {receipt.action.value} to item {receipt.item_id} ({receipt.request_id})")
    return 0
