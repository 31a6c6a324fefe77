"""`Config`'s fields as documented: group, flag, default, choices, one line.

One source for the command line's ``--help`` (`tf_vtrace.agent.__main__`)
and the configuration reference page (`tf_vtrace.agent._config_reference`):
both read `Config`'s attribute docstrings and group comments from its
source, so neither copies them. Needs neither TensorFlow nor gymnasium.
"""

import ast
import collections
import dataclasses
import functools
import inspect
import re

from tf_vtrace.agent import config as config_lib

FieldDoc = collections.namedtuple(
    "FieldDoc", "name group flag kind default choices text")
FieldDoc.__doc__ = """One `Config` field: its group (the comment above it),
its command-line flag, its kind (``int``, ``float``, ``bool``, ``str`` or
``tuple``), default, choices (None: any value) and attribute docstring."""

_GROUP_COMMENT = re.compile(r"^\s*# --- (?P<group>.+) ---\s*$")


def _plain(docstring):
    """A docstring on one line, without reST/Markdown code marks; a constant
    of `tf_vtrace.agent.config` named in it (`MAX_UPDATES_PER_CALL`) is
    given as its value."""
    text = " ".join(docstring.split())

    def unmarked(match):
        name = match.group(1)
        return str(getattr(config_lib, name, name)) if name.isupper() else name
    return re.sub(r"`{1,2}([^`]+)`{1,2}", unmarked, text)


@functools.cache
def field_docs():
    """The `FieldDoc` of every `Config` field, in the class's order."""
    source = inspect.getsource(config_lib)
    lines = source.splitlines()
    (class_node,) = [node for node in ast.parse(source).body
                     if isinstance(node, ast.ClassDef) and node.name == "Config"]
    texts, groups, group = {}, {}, ""
    body = class_node.body
    for node, following in zip(body, body[1:] + [None]):
        if not isinstance(node, ast.AnnAssign):
            continue
        name = node.target.id
        for line in lines[:node.lineno - 1][::-1]:
            match = _GROUP_COMMENT.match(line)
            if match:
                group = match.group("group")
                break
        groups[name] = group
        if (isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            texts[name] = _plain(following.value.value)
    return tuple(
        FieldDoc(name=field.name, group=groups.get(field.name, ""),
                 flag="--" + field.name.replace("_", "-"),
                 kind=field.type.__name__, default=field.default,
                 choices=config_lib._CHOICES.get(field.name),
                 text=texts.get(field.name, ""))
        for field in dataclasses.fields(config_lib.Config))


def shown(value):
    """A default as typed on the command line."""
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
