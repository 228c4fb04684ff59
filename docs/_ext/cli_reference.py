"""The command-line reference, generated from the parser the command line runs.

The directive ``autodeuq-cli`` walks :func:`autodeuq.app.cli.build_parser` (argparse): the program's
description, then one section per command (aliases named with it) holding its usage line, its
description and, per argument group, each argument's flags and metavar, help text, choices and
default. Nothing here names an option: a new or renamed option changes the page by itself.

Each option is also registered with Sphinx's standard domain as an option of the program
``autodeuq <command>``, so a page can link to it with the ``option`` role, e.g.
``{option}`autodeuq run --refit``` in Markdown; a link to an option that no longer exists is a
build warning (an error under ``-W``).
"""
from __future__ import annotations

import argparse
import contextlib
import os

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

__all__ = ["CLIReference", "setup"]


def _subcommands(parser: argparse.ArgumentParser):
    """``(name, aliases, help, parser)`` of each command, in the order the parser lists them."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        seen = {}
        for name, sub in action.choices.items():
            if id(sub) in seen:  # an alias: the same parser under another name
                seen[id(sub)][1].append(name)
                continue
            seen[id(sub)] = (name, [], helps.get(name), sub)
        yield from seen.values()


def _flags(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    """The argument as ``--help`` names it: ``--size K``, ``--refit, --no-refit``, ``--space NAME``."""
    if not action.option_strings:
        return formatter._metavar_formatter(action, action.dest)(1)[0]
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = formatter._format_args(action, action.dest.upper())
    return ", ".join(f"{flag} {metavar}" for flag in action.option_strings)


def _help(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    """The help text as ``--help`` prints it, ``%(default)s`` and the like filled in."""
    if not action.help:
        return ""
    return " ".join(formatter._expand_help(action).split())


#: Width of the usage lines, in characters.
USAGE_WIDTH = 100


@contextlib.contextmanager
def _columns(width: int):
    """``COLUMNS`` (what argparse's formatters read) set to ``width`` for the block."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _value(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


class CLIReference(SphinxDirective):
    """``autodeuq-cli``: the reference of every command of :func:`autodeuq.app.cli.build_parser`."""

    has_content = False

    def run(self):
        # argparse wraps usage lines at the terminal's width: the page's must not depend on it.
        with _columns(USAGE_WIDTH):
            return self._run()

    def _run(self):
        from autodeuq.app.cli import build_parser

        parser = build_parser()
        program = parser.prog
        out = []
        if parser.description:
            out.append(nodes.paragraph(text=parser.description))
        commands = list(_subcommands(parser))
        summary = nodes.bullet_list()
        for name, aliases, helptext, _ in commands:
            item = nodes.paragraph()
            item += nodes.literal(text=f"{program} {name}")
            if aliases:
                item += nodes.Text(" (also " + ", ".join(f"{program} {a}" for a in aliases) + ")")
            if helptext:
                item += nodes.Text(f": {helptext}")
            summary += nodes.list_item("", item)
        out.append(summary)
        for name, aliases, helptext, sub in commands:
            out.append(self._command(program, name, aliases, helptext, sub))
        return out

    def _section(self, title: str, key: str) -> nodes.section:
        section = nodes.section(ids=[nodes.make_id(key)])
        section += nodes.title(text=title)
        self.state.document.note_implicit_target(section, section)
        return section

    def _command(self, program, name, aliases, helptext, parser) -> nodes.section:
        section = self._section(f"{program} {name}", f"cli-{program}-{name}")
        formatter = parser._get_formatter()
        if aliases:
            section += nodes.paragraph(text="Also: " + ", ".join(f"{program} {a}" for a in aliases) + ".")
        description = parser.description or helptext
        if description:
            section += nodes.paragraph(text=" ".join(description.split()))
        usage = parser.format_usage().strip()
        section += nodes.literal_block(usage, usage)
        std = self.env.get_domain("std")
        program_key = f"{program}-{name}"
        for group in parser._action_groups:
            actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
            if not actions:
                continue
            title = group.title or "arguments"
            sub = self._section(title[0].upper() + title[1:], f"cli-{program}-{name}-group-{title}")
            if group.description:
                sub += nodes.paragraph(text=group.description)
            entries = nodes.definition_list()
            for action in actions:
                entries += self._argument(action, formatter, std, program_key, aliases, program)
            sub += entries
            section += sub
        return section

    def _argument(self, action, formatter, std, program_key, aliases, program) -> nodes.definition_list_item:
        flag = action.option_strings[0] if action.option_strings else action.dest
        node_id = nodes.make_id(f"cli-{program_key}-option-{flag}")
        term = nodes.term("", "", ids=[node_id])
        term += nodes.literal(text=_flags(action, formatter))
        self.state.document.note_explicit_target(term)
        for flag in action.option_strings:
            std.add_program_option(program_key, flag, self.env.docname, node_id)
            for alias in aliases:
                std.add_program_option(f"{program}-{alias}", flag, self.env.docname, node_id)
        definition = nodes.definition()
        text = _help(action, formatter)
        if text:
            definition += nodes.paragraph(text=text)
        facts = []
        if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
            facts.append(("choices", _value(list(action.choices))))
        if action.required:
            facts.append(("required", "yes"))
        if isinstance(action, argparse._AppendAction):
            facts.append(("repeatable", "yes"))
        if action.default is not None and action.default is not argparse.SUPPRESS and action.nargs != 0:
            facts.append(("default", _value(action.default)))
        elif isinstance(action, argparse.BooleanOptionalAction) and action.default is not None:
            facts.append(("default", _value(action.default)))
        if facts:
            line = nodes.paragraph()
            for k, (label, value) in enumerate(facts):
                line += nodes.Text(("; " if k else "") + f"{label}: ")
                line += nodes.literal(text=value)
            definition += line
        return nodes.definition_list_item("", term, definition)


def setup(app):
    app.add_directive("autodeuq-cli", CLIReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
